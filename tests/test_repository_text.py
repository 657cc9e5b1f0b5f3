"""The repository speaks of the project: no text refers to the stretches
of work it was written in or to numbered tickets (history goes in
CHANGELOG.md, by date), and the README stays a short front door."""

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A stretch of work named ("this ...", "earlier ...s") or a ticket by
#: its number; not onnxruntime's InferenceSession or a variable named so.
_FORBIDDEN = re.compile(
    r'\b(?:this|last|previous|next|earlier|later)\s+'
    r's[e]ssions?\b|\bis[s]ues?\s+#?\d+', re.IGNORECASE)
_TEXT_SUFFIXES = ('.py', '.pyx', '.pxd', '.pxi', '.md', '.rst', '.txt',
                  '.sh', '.cfg', '.toml', '.ipynb', '')


def _tracked_files():
    try:
        out = subprocess.run(['git', 'ls-files', '--cached', '--others',
                              '--exclude-standard'], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip('not a git checkout')
    return [p for p in out.splitlines()
            if os.path.splitext(p)[1] in _TEXT_SUFFIXES
            and os.path.isfile(os.path.join(ROOT, p))]


def _offending_lines(path):
    with open(os.path.join(ROOT, path), errors='replace') as f:
        for number, line in enumerate(f, 1):
            if _FORBIDDEN.search(line):
                yield '%s:%d: %s' % (path, number, line.strip())


def test_no_text_mentions_sessions_or_issue_numbers():
    found = [line for path in _tracked_files()
             for line in _offending_lines(path)]
    assert found == []


_SESSION = 'ses' + 'sion'  # not written whole, so that this file passes
_ISSUE = 'is' + 'sue'


@pytest.mark.parametrize('text', [
    'measured in this %s' % _SESSION, 'as %s 6 asks' % _ISSUE,
    'see %s #21' % _ISSUE, 'Earlier %ss kept it' % _SESSION])
def test_the_check_sees_such_text(text):
    assert _FORBIDDEN.search(text)


@pytest.mark.parametrize('text', [
    'session = onnxruntime.InferenceSession(path)',
    'outputs = session.run(None, feed)'])
def test_the_check_leaves_onnxruntime_sessions_alone(text):
    assert not _FORBIDDEN.search(text)


def test_the_readme_is_a_short_front_door():
    with open(os.path.join(ROOT, 'README.md')) as f:
        lines = f.read().splitlines()
    assert len(lines) <= 250
    first_screen = '\n'.join(lines[:40])
    assert 'bash scripts/main.sh' in first_screen
    assert 'bash scripts/test.sh' in first_screen
