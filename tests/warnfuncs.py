"""Worker functions for tests/test_worker_warnings.py (they warn inside interpreters)."""

from __future__ import annotations

import logging
import warnings


class AppWarning(UserWarning):
    """A category main can name (main imports this module too)."""


def line_of(text: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        found = [n for n, line in enumerate(f, 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def warn(message: str, times: int = 1) -> None:
    for _ in range(times):
        warnings.warn(message, AppWarning, stacklevel=1)  # the warning's line


def deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=2)


def call_deprecated(message: str) -> None:
    deprecated(message)  # the caller's line (stacklevel=2)


def warn_unknown_category(message: str) -> None:
    local = type("LocalWarning", (UserWarning,), {})  # not an attribute of this module
    warnings.warn(message, local, stacklevel=1)


def log_warn_log() -> None:
    log = logging.getLogger("warntest")
    log.warning("before")
    warnings.warn("between", AppWarning, stacklevel=1)
    log.warning("after")


def warn_in_catch(message: str) -> list[str]:
    """A task that catches its own warnings keeps them."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.warn(message, AppWarning, stacklevel=1)
    return [str(w.message) for w in seen]


def own_showwarning() -> None:
    """An initializer that shows warnings its own way."""
    warnings.showwarning = lambda *args, **kwargs: None
