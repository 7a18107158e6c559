"""Worker side of ``fallback="copy"``: a private copy of each refusing extension module.

An extension module that refuses own-GIL interpreters (numpy's
``_multiarray_umath``, orjson, pydantic-core, lxml) keeps its state in C
statics, one set per loaded file. Loading a fresh *copy* of the file, at a
path this process never loaded before, gives this interpreter statics of its
own; CPython's refusal is then lifted for that one load
(``_imp._override_multi_interp_extensions_check``). Measured facts behind each
rule (3.13.0, numpy, orjson, pydantic-core, lxml, msgspec and scipy in 2-4
workers at once):

- Only multi-phase modules (``PyModuleDef_Init``) can be isolated this way: a
  single-phase module's init runs in the *main* interpreter on 3.13+ and binds
  to main's state there (numpy's test helpers, msgspec, scipy's Fortran
  wrappers: segfaults). Those are refused up front, before CPython runs their
  init, by reading the file's imports (``aiosubinterp._inside.elf``).
- A path is never reused: the dynamic linker hands back the old mapping for a
  path (or inode) it loaded before. Each interpreter incarnation gets a fresh
  directory from main, and files are copied (a reflink where the file system
  can), never hard-linked.
- The check is lifted only while CPython makes and runs a module from its
  copy. The setting is the whole interpreter's, so deciding whether a module
  needs a copy never touches it: the module's definition says whether it
  supports an own GIL (``aiosubinterp._core.extension_own_gil``). Only when
  that cannot be read is the original tried with the check on, and only
  while no copy is loading (else it gets a copy).
- Native libraries the module finds by SONAME (OpenBLAS) stay one per process;
  the copy finds them where the original does (``$ORIGIN`` run paths are
  linked into the copy's folder).

Worker-side module: imports only what every worker has loaded already.
"""

import _imp
import _thread
import os
import sys
import time

from aiosubinterp import _core

TYPE_CHECKING = False  # no typing import at run time: this module loads in workers
if TYPE_CHECKING:
    from typing import Any

_external: "Any" = sys.modules["_frozen_importlib_external"]
_bootstrap: "Any" = sys.modules["_frozen_importlib"]
_PathFinder: "Any" = _external.PathFinder
_ExtensionFileLoader: "Any" = _external.ExtensionFileLoader
# -1: no check; 0: the interpreter's own setting; returns the previous value.
_override: "Any" = _imp._override_multi_interp_extensions_check  # type: ignore[attr-defined]

__all__ = ["DENIED", "PrivateCopies", "install"]

_REFUSAL = "does not support loading in subinterpreters"
STATS_FILE = ".copies"  # one line per copy: module, bytes, seconds (read by main's statistics())

# Packages a copy cannot make safe for reasons their binaries do not show.
DENIED = {
    "uvloop": "libuv inside it installs process-wide signal and child-process handlers, "
    "which two copies (and the main interpreter's event loop) would fight over",
}


def _refused(name: str, why: str) -> ImportError:
    from aiosubinterp._errors import ModuleRefusedError

    return ModuleRefusedError(
        f"the extension module {name!r} refuses to load in a subinterpreter with its own GIL, "
        f"and a private copy cannot isolate it: {why}. Run it on processes instead "
        "(InterpreterPool(fallback=('copy', 'process')), or ProcessPool).",
        name=name,
    )


class PrivateCopies:
    """The meta-path finder of one worker interpreter with ``fallback="copy"``.

    It answers only for extension modules outside the standard library (the
    spec PathFinder finds, with a loader of ours); everything else is left to
    the usual finders.

    Thread-safety: imports are serialised by the import lock of each module;
    the bookkeeping is only appended to. The check's setting and the count of
    loads from copies running change together, under ``_check_lock``.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.packages: set[str] = set()  # top-level packages whose extensions load from copies
        self.made: list[tuple[str, int, float]] = []  # (module, bytes, seconds)
        self.loaded: set[int] = set()  # ids of modules made from copies, not run yet
        self._lifted = 0  # loads from copies running now (on any thread of this interpreter)
        # Guards _lifted and the check's setting. Re-entrant: a module made
        # while it is held may import another extension on the same thread.
        self._check_lock = _thread.RLock()
        stdlib = os.path.dirname(os.__file__)
        self._skip = (stdlib + os.sep, os.path.join(stdlib, "lib-dynload") + os.sep)

    # -- finder --------------------------------------------------------------

    def find_spec(self, name: str, path: "Any" = None, target: "Any" = None) -> "Any":
        spec = _PathFinder.find_spec(name, path, target)
        if spec is None or type(spec.loader) is not _ExtensionFileLoader:
            return None
        origin = spec.origin or ""
        if origin.startswith(self._skip) and "site-packages" not in origin:
            return None
        spec.loader = _CopyLoader(self, name, origin)
        return spec

    def invalidate_caches(self) -> None:
        pass

    # -- loading -------------------------------------------------------------

    def create(self, spec: "Any", path: str) -> "Any":
        """The module for spec: loaded as usual if it may be, else from a private copy."""
        name = spec.name
        top = name.partition(".")[0]
        kind = _kind(path)
        if kind == "single":
            # Refused by CPython in any case; its init would first run in main.
            raise _refused(
                name,
                "it is a single-phase extension module (its init function "
                "runs in the main interpreter, where it would bind to main's "
                "state)",
            )
        if top not in self.packages:
            module = self._load_usual(spec, path, kind)
            if module is not None:
                return module
            if top in DENIED:
                raise _refused(name, DENIED[top])
            self.packages.add(top)
        return self._load_copy(spec, path)

    def _load_usual(self, spec: "Any", path: str, kind: str) -> "Any":
        """The module made from path itself, or None if it needs a copy.

        Never changes the check: another thread of this interpreter may be
        loading from a copy with the check lifted (the setting is the
        interpreter's). When the definition cannot be read, the original is
        tried with the check on, which holds only while no copy is loading.
        """
        if kind == "multi":
            supports = _core.extension_own_gil(path, spec.name, sys.getdlopenflags())
            if supports is not None:
                return _imp.create_dynamic(spec) if supports else None
        with self._check_lock:
            if self._lifted:
                return None  # the check is off now: no way to ask CPython
            try:
                return _imp.create_dynamic(spec)
            except ImportError as exc:
                if _REFUSAL not in str(exc):
                    raise
        return None

    def _load_copy(self, spec: "Any", path: str) -> "Any":
        copy = self.copy_file(spec.name, path)
        copy_spec = _bootstrap.ModuleSpec(spec.name, None, origin=copy)
        # The check is lifted only while this module is made from its copy
        # (and run, below: PyO3 makes submodules there). An extension module
        # another thread imports meanwhile is judged by its definition, not by
        # the check (_load_usual).
        self._lift()
        try:
            module = _imp.create_dynamic(copy_spec)
        finally:
            self._unlift()
        self.loaded.add(id(module))
        return module

    def execute(self, module: "Any") -> None:
        """Run module's exec slots (lifting the check for a module made from a copy)."""
        if id(module) not in self.loaded:
            _imp.exec_dynamic(module)
            return
        self.loaded.discard(id(module))
        self._lift()
        try:
            _imp.exec_dynamic(module)
        finally:
            self._unlift()

    def _lift(self) -> None:
        """Lift the check for a load from a copy (until its _unlift()).

        A count, not the value each caller found: sections of several threads
        of this interpreter may end in any order, and a saved value restored
        late would leave the check off for good. The count and the setting
        change in one step: a thread switch between them could turn the check
        back on under another thread's section.
        """
        with self._check_lock:
            self._lifted += 1
            _override(-1)

    def _unlift(self) -> None:
        """End a section of _lift(): the check is back on when none is left."""
        with self._check_lock:
            self._lifted -= 1
            if not self._lifted:
                _override(0)

    def copy_file(self, name: str, path: str) -> str:
        """Copy path into this interpreter's folder, at its place in the package."""
        started = time.perf_counter()
        entry = path
        for _ in range(name.count(".") + 1):
            entry = os.path.dirname(entry)
        base = self.root
        copy = os.path.join(base, os.path.relpath(path, entry))
        attempt = 1
        while os.path.lexists(copy):
            # An earlier load from a copy failed and this is the import again:
            # a new path (the dynamic linker would hand back the old mapping).
            attempt += 1
            base = os.path.join(self.root, f".attempt{attempt}")
            copy = os.path.join(base, os.path.relpath(path, entry))
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        size = _clone(path, copy)
        _link_origin_paths(path, copy, base)
        seconds = time.perf_counter() - started
        self.made.append((name, size, seconds))
        try:
            with open(os.path.join(self.root, STATS_FILE), "a") as stats:
                stats.write(f"{name}\t{size}\t{seconds:.6f}\n")
        except OSError:
            pass
        return copy


class _CopyLoader(_ExtensionFileLoader):  # type: ignore[misc]
    """ExtensionFileLoader whose create_module may load a private copy."""

    def __init__(self, copies: PrivateCopies, name: str, path: str) -> None:
        super().__init__(name, path)
        self._copies = copies

    def create_module(self, spec: "Any") -> "Any":
        return self._copies.create(spec, self.path)

    def exec_module(self, module: "Any") -> None:
        self._copies.execute(module)


def _kind(path: str) -> str:
    from aiosubinterp._inside import elf

    try:
        return str(elf.extension_kind(path))
    except (OSError, ValueError):
        return "unknown"


_FICLONE = 0x40049409  # linux/fs.h: share the blocks (btrfs, xfs, bcachefs); a new inode


def _clone(source: str, target: str) -> int:
    """Copy source to a new file target (a reflink where possible); its size."""
    fd_in = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd_in).st_size
        fd_out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
        try:
            try:
                import fcntl

                fcntl.ioctl(fd_out, _FICLONE, fd_in)
                return size
            except (ImportError, OSError):
                pass
            done = 0
            while done < size:
                try:
                    n = os.copy_file_range(fd_in, fd_out, size - done)
                except OSError:
                    n = 0
                if n <= 0:
                    break
                done += n
            while done < size:  # copy_file_range unsupported here: plain reads
                chunk = os.pread(fd_in, min(1 << 20, size - done), done)
                if not chunk:
                    break
                os.write(fd_out, chunk)
                done += len(chunk)
            return done
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _link_origin_paths(original: str, copy: str, root: str) -> None:
    """Make the copy's ``$ORIGIN`` run paths name what the original's name.

    A folder the copy's run path names that does not exist under root becomes
    a link to the original's folder (numpy: ``$ORIGIN/../../numpy.libs``); in
    a folder that exists (the copy's own), the libraries the file needs are
    linked one by one. Those libraries are loaded once per process anyway.
    """
    from aiosubinterp._inside import elf

    try:
        info = elf.read_dynamic(original)
    except (OSError, ValueError):
        return
    here, there = os.path.dirname(original), os.path.dirname(copy)
    for _entry, folder in elf.origin_paths(original, info):
        mirrored = os.path.normpath(os.path.join(there, os.path.relpath(folder, here)))
        if not mirrored.startswith(root + os.sep) or not os.path.isdir(folder):
            continue
        if not os.path.lexists(mirrored):
            os.makedirs(os.path.dirname(mirrored), exist_ok=True)
            os.symlink(folder, mirrored)
            continue
        if os.path.islink(mirrored):
            continue
        for needed in info.needed:
            source = os.path.join(folder, needed)
            link = os.path.join(mirrored, needed)
            if os.path.exists(source) and not os.path.lexists(link):
                os.symlink(source, link)


def install(root: str) -> PrivateCopies:
    """Put a PrivateCopies for root first on this interpreter's sys.meta_path.

    numpy warns at each import in a subinterpreter that it may share state
    with other interpreters; with a private copy it shares none, so that one
    warning is silenced here.
    """
    import warnings

    warnings.filterwarnings(
        "ignore", message="NumPy was imported from a Python sub-interpreter", category=UserWarning
    )
    copies = PrivateCopies(root)
    sys.meta_path.insert(0, copies)
    return copies
