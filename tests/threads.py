"""Running a test's work in several threads at once."""

import threading


def run_in_threads(work, count):
    """Calls ``work(k)`` for ``k`` in ``range(count)``, each in a thread
    of its own, all started before any is joined; fails with the first
    error a thread raised."""
    errors = []

    def guarded(k):
        try:
            work(k)
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(k,))
               for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
