"""Headless Chromium for the tests that look at a page (the live demo, the docs site)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def chromium() -> str:
    """Chromium's path (``make test`` installs Debian's package as root); skips without it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(
        "no chromium on PATH: as root, `make test` installs Debian's chromium "
        "package (`apt-get install chromium`); the Debian root's runs have none"
    )


def headless(browser: str, profile: Path) -> list[str]:
    """The command line of a headless Chromium with a fresh profile that makes no
    connection of its own (this machine's network refuses them, many at a time)."""
    return [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
    ]
