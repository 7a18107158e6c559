"""MkDocs hook: the site does not show the test markers of python examples.

tests/test_docs.py runs every ```python block under docs/ and reads the
block's first lines for markers: ``# requires: numpy`` (skipped where numpy
is missing, or the Python too old) and ``# not run: <reason>`` (a fragment).
They are for the tests; a reader would copy them. This hook removes them
from each page's markdown before MkDocs renders it; the sources keep them.
Registered in mkdocs.yml (``hooks:``) and kept out of the site
(``exclude_docs:``).
"""

from __future__ import annotations

import re
from typing import Any

# The markers test_docs reads: the lines right after a fence's opening that
# match its MARKER (``^# (not run|requires): *(.*)$``), up to the first other line.
MARKERS = re.compile(r"^(```python[ \t]*\n)((?:# (?:not run|requires):[^\n]*\n)+)", re.M)


def strip_markers(markdown: str) -> str:
    """The markdown with the marker lines at the top of python blocks removed."""
    return MARKERS.sub(r"\1", markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return strip_markers(markdown)
