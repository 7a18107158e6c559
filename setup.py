"""Build of the one compiled module, aiosubinterp._core.

Metadata lives in pyproject.toml; this file only declares the extension and
its build switches (environment variables, read at build time):

    AIOSUBINTERP_DEBUG=1            -O0 -g, assert() enabled (-UNDEBUG), and the lock
                                    order checked (ASI_CHECK_LOCK_ORDER: ext/includes/lockorder.h)
    AIOSUBINTERP_SANITIZE=address   -fsanitize=address at compile and link time
                                    (run with LD_PRELOAD=$(gcc -print-file-name=libasan.so)
                                    since python itself is not instrumented)
"""

import glob
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _env_flag("AIOSUBINTERP_DEBUG")
SANITIZE = os.environ.get("AIOSUBINTERP_SANITIZE", "").strip()

if SANITIZE not in {"", "address"}:
    sys.exit(
        f"AIOSUBINTERP_SANITIZE={SANITIZE!r} is not supported: use 'address' or leave it unset"
    )

# extra_compile_args come after Python's own CFLAGS (which carry -O3 -DNDEBUG),
# so these win.
compile_args = ["-Wno-unused-function"]
link_args: list[str] = []
if DEBUG:
    # ASI_CHECK_LOCK_ORDER: abort on a mutex taken out of the one order
    # (ext/includes/lockorder.h).
    compile_args += ["-O0", "-g", "-UNDEBUG", "-DASI_CHECK_LOCK_ORDER"]
else:
    compile_args += ["-O2"]
if SANITIZE:
    compile_args += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer"]
    link_args += [f"-fsanitize={SANITIZE}"]

# Worker threads are raw pthreads. glibc >= 2.34 has them in libc, where
# -lpthread is a harmless empty stub; older libcs need it.
libraries = ["pthread"] if os.name == "posix" else []

extensions = [
    Extension(
        "aiosubinterp._core",
        ["ext/_core.pyx"],
        include_dirs=["ext/includes"],
        # Recompile the C file when a fragment or header changes (Cython
        # already regenerates it for included .pxi and cimported .pxd).
        depends=sorted(
            glob.glob("ext/*.pxi") + glob.glob("ext/includes/*.pxd") + glob.glob("ext/includes/*.h")
        ),
        define_macros=[
            # Both are required for an own-GIL subinterpreter: without
            # module state the module is refused; without type specs a
            # cdef class is a static type shared by every interpreter and
            # crashes once two of them import the module.
            ("CYTHON_USE_MODULE_STATE", "1"),
            ("CYTHON_USE_TYPE_SPECS", "1"),
        ],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
        libraries=libraries,
    )
]

# Cython (3.1 to 3.3.1 at least) finds a module's per-interpreter state in a
# process-wide table sorted by interpreter ID. For an interpreter newer than
# every entry (each new worker, at its first import of _core) the search ends
# one past the last entry and compares the ID stored there, which is unused
# memory: when that garbage happens to equal the new ID (small integers are
# common in freed memory), the import fails with "Module '_core' has already
# been imported into this interpreter" (seen in CI once in ~5 full runs of the
# suite on 3.15; measured: the slot held values such as 1, 544 and 1012). The
# two lookups below get the bounds check they lack; a Cython that generates
# different code is left alone and reported.
_LOOKUP_FIXES = (
    (
        "        if (found && found->id == interpreter_id) {",
        "        if (found && found < data->table + data->count && found->id == interpreter_id) {",
    ),
    (
        "        if (lower_bound->id != interpreter_id) goto done;",
        "        if (lower_bound >= data->table + data->count || lower_bound->id != interpreter_id) "  # noqa: E501
        "goto done;",
    ),
)


def _bound_module_state_lookup(c_path: str) -> None:
    with open(c_path, encoding="utf-8") as f:
        source = f.read()
    changed = source
    for before, after in _LOOKUP_FIXES:
        if after in changed:
            continue
        if changed.count(before) != 1:
            print(
                f"setup.py: WARNING: {c_path} does not have Cython's module state lookup as "
                "expected; its out-of-bounds read is not fixed (see _LOOKUP_FIXES)",
                file=sys.stderr,
            )
            return
        changed = changed.replace(before, after)
    if changed != source:
        with open(c_path, "w", encoding="utf-8") as f:
            f.write(changed)


ext_modules = cythonize(
    extensions,
    include_path=["ext", "ext/includes"],
    compiler_directives={
        "language_level": 3,
        "subinterpreters_compatible": "own_gil",
        # Py_mod_gil = Py_MOD_GIL_NOT_USED on free-threaded builds (ignored
        # elsewhere): importing _core must not turn the GIL back on. What
        # makes that true is listed in ext/_core.pyx, "Free threading".
        "freethreading_compatible": True,
        "embedsignature": True,
    },
)
for _ext in ext_modules:
    for _source in _ext.sources:
        if _source.endswith(".c"):
            _bound_module_state_lookup(_source)

setup(ext_modules=ext_modules)
