"""Build of the one compiled module, aiosubinterp._core.

Metadata lives in pyproject.toml; this file only declares the extension and
its build switches (environment variables, read at build time):

    AIOSUBINTERP_DEBUG=1            -O0 -g, assert() enabled (-UNDEBUG)
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
    compile_args += ["-O0", "-g", "-UNDEBUG"]
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

setup(
    ext_modules=cythonize(
        extensions,
        include_path=["ext", "ext/includes"],
        compiler_directives={
            "language_level": 3,
            "subinterpreters_compatible": "own_gil",
            "freethreading_compatible": False,
            "embedsignature": True,
        },
    ),
)
