"""A summary line printed after a test module, as the zoo tests do."""


def write_after_module(request, summary, write):
    """Calls ``write(terminal_reporter)`` with output capture off, if the
    module collected a ``summary``."""
    plugins = request.config.pluginmanager
    reporter = plugins.getplugin('terminalreporter')
    capture = plugins.getplugin('capturemanager')
    if reporter is None or capture is None or not summary:
        return
    with capture.global_and_fixture_disabled():
        write(reporter)
