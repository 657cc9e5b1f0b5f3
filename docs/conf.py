"""Sphinx configuration of chainerjit's documentation.

Build it with ``bash scripts/docs.sh`` (or, in a set-up ``.venv``,
``.venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html``).
The pages are Markdown, read by MyST; the API reference imports the
package (its Cython extensions built in place by ``scripts/install.sh``).
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, ROOT)  # the checkout's chainerjit, built in place

project = 'chainerjit'
author = 'the chainerjit authors'
copyright = '2026, ' + author
release = version = '0.1.0'

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
]

source_suffix = {
    '.rst': 'restructuredtext',
    '.md': 'markdown',
}
root_doc = 'index'
exclude_patterns = ['_build']

# Heading anchors, so that pages can link to a section as GitHub does
# (errors.md#unrolledloop).
myst_heading_anchors = 3

autodoc_member_order = 'bysource'
autodoc_typehints = 'none'
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = 'alabaster'
html_title = 'chainerjit'
html_theme_options = {
    'description': 'A just-in-time compiler for Chainer models',
    'fixed_sidebar': True,
}
