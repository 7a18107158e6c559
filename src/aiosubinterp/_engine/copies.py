"""Main side of ``fallback="copy"``: the folders private copies go to, and their cleanup.

Each pool gets a folder ``<tmp>/aiosubinterp-copies-<uid>/<pid>-<n>-<random>``;
each interpreter it starts (a replacement too) gets a new subfolder, never
reused: the dynamic linker would hand back the old mapping for a path it
loaded before. The pool's folder is removed when the pool closes and at exit
(the copies stay mapped in the interpreters that loaded them); folders of
processes that are gone are removed when the next pool makes its own.

``AIOSUBINTERP_COPY_DIR`` names another parent folder (a file system with
reflinks makes copies free of disk space; tmpfs keeps them in memory).
"""

from __future__ import annotations

import atexit
import itertools
import os
import secrets
import shutil
import tempfile
import threading

from aiosubinterp._inside.copies import STATS_FILE

__all__ = ["NATIVE_THREAD_VARIABLES", "CopyFolders", "parent_folder"]

_pools = itertools.count(1)
_live: set[str] = set()
_live_lock = threading.Lock()

# Native thread pools are one per process (their library is found by SONAME
# and loaded once for every copy): N workers each asking OpenBLAS for all
# cores ran 5x slower. One thread each unless the user chose otherwise.
NATIVE_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def parent_folder() -> str:
    """Where every pool of this user puts its copy folders."""
    base = os.environ.get("AIOSUBINTERP_COPY_DIR") or tempfile.gettempdir()
    return os.path.join(base, f"aiosubinterp-copies-{os.getuid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_private(folder: str) -> None:
    """Refuse a folder others could write into: they could swap a copy before it loads."""
    import stat

    info = os.lstat(folder)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise PermissionError(
            f"the private copies' folder {folder} must be a directory of this user "
            f"(uid {os.getuid()}) that nobody else can write to (a link, another owner or "
            f"mode {stat.filemode(info.st_mode)} found): a file swapped there would be "
            "loaded as code. Remove it, or set AIOSUBINTERP_COPY_DIR to a folder of your own."
        )


def remove_stale(parent: str) -> list[str]:
    """Remove the folders of processes that are gone; their names."""
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        pid_text = name.partition("-")[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        removed.append(name)
    return removed


class CopyFolders:
    """The copy folder of one pool, and a new subfolder per interpreter it starts.

    Thread-safety: next_folder() is called under the pool's lock; close() may
    run on any thread.
    """

    def __init__(self) -> None:
        self._parent = parent_folder()
        self._folder: str | None = None
        self._incarnations = itertools.count(1)
        self._lock = threading.Lock()

    def _make(self) -> str:
        os.makedirs(self._parent, mode=0o700, exist_ok=True)
        check_private(self._parent)
        remove_stale(self._parent)
        folder = os.path.join(self._parent, f"{os.getpid()}-{next(_pools)}-{secrets.token_hex(4)}")
        os.mkdir(folder, 0o700)
        with _live_lock:
            _live.add(folder)
        for name in NATIVE_THREAD_VARIABLES:
            os.environ.setdefault(name, "1")
        return folder

    def next_folder(self) -> str:
        """A folder name no interpreter of this process used (made by the worker itself)."""
        with self._lock:
            if self._folder is None:
                self._folder = self._make()
            return os.path.join(self._folder, f"i{next(self._incarnations)}")

    @property
    def folder(self) -> str | None:
        return self._folder

    def statistics(self) -> dict[str, float | int | str]:
        """Copies made so far: how many, their bytes, the seconds they took, and the folder
        ("" before the first interpreter starts, and after close)."""
        count = size = 0
        seconds = 0.0
        folder = self._folder
        if folder is not None:
            try:
                names = os.listdir(folder)
            except OSError:
                names = []
            for name in names:
                try:
                    with open(os.path.join(folder, name, STATS_FILE)) as stats:
                        lines = stats.read().splitlines()
                except OSError:
                    continue
                for line in lines:
                    parts = line.split("\t")
                    if len(parts) != 3:
                        continue
                    count += 1
                    size += int(parts[1])
                    seconds += float(parts[2])
        return {
            "copies": count,
            "copies_bytes": size,
            "copies_seconds": round(seconds, 6),
            "copies_folder": folder or "",
        }

    def close(self) -> None:
        """Remove the folder (the interpreters keep what they mapped)."""
        with self._lock:
            folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            with _live_lock:
                _live.discard(folder)


@atexit.register
def _remove_at_exit() -> None:
    with _live_lock:
        folders = list(_live)
        _live.clear()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
