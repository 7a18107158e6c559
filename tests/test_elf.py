"""elf: init kind, imports, needed libraries and $ORIGIN run paths of extension modules' ELF files.

Real files (numpy's, the stdlib's, our own _core), tiny extensions built
here with the C compiler, and hand-written ELF files for the classes and
byte orders the compiler cannot make (32-bit, big endian).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import pathlib
import random
import re
import shutil
import struct
import subprocess
import sys
import sysconfig

import pytest

from aiosubinterp import _core
from aiosubinterp._inside import elf

SINGLE = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) { return PyModule_Create(&def); }
"""
MULTI = """
#include <Python.h>
static PyModuleDef_Slot slots[] = {
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED}, {0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, 0, NULL, slots};
PyMODINIT_FUNC PyInit_%(name)s(void) { return PyModuleDef_Init(&def); }
"""
NOT_PYTHON = "int answer(void) { return 42; }\n"


def _numpy_file(pattern: str) -> pathlib.Path:
    # Found, not imported: numpy's import is slow and not what is tested.
    spec = importlib.util.find_spec("numpy")
    assert spec is not None and spec.submodule_search_locations, "numpy is a test dependency"
    found = sorted(pathlib.Path(spec.submodule_search_locations[0]).glob(pattern))
    assert found, f"numpy has no {pattern}"
    return found[0]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """build(name, source, *flags) -> path of a shared object compiled from C source."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build test extension modules")
    where = tmp_path_factory.mktemp("elf")

    def compile_(name: str, source: str, *flags: str) -> pathlib.Path:
        c_file = where / f"{name}.c"
        c_file.write_text(source % {"name": name})
        out = where / f"{name}.so"
        subprocess.run(
            [
                cc,
                "-shared",
                "-fPIC",
                "-I",
                sysconfig.get_paths()["include"],
                *flags,
                "-o",
                str(out),
                str(c_file),
            ],
            check=True,
        )
        return out

    return compile_


def _without_section_headers(path: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """A copy of a 64-bit little-endian ELF file with e_shoff, e_shnum and e_shstrndx zeroed."""
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, 0x28, 0)
    struct.pack_into("<HH", data, 0x3C, 0, 0)
    out.write_bytes(data)
    return out


def test_numpy_multiarray_is_multi_phase_and_finds_openblas_by_origin():
    path = _numpy_file("_core/_multiarray_umath*.so")
    info = elf.read_dynamic(str(path))
    assert elf.init_kind(info) == "multi"
    assert info.exported == {"PyInit__multiarray_umath"}
    assert "PyModuleDef_Init" in info.undefined and "PyModule_Create2" not in info.undefined
    openblas = [n for n in info.needed if n.startswith("libscipy_openblas")]
    assert openblas
    origins = elf.origin_paths(str(path), info)
    assert origins and all(entry in info.runpath for entry, _ in origins)
    libs = [
        d
        for entry, d in origins
        if entry.startswith("$ORIGIN") and os.path.basename(d) == "numpy.libs"
    ]
    assert libs and os.path.isabs(libs[0]) and os.path.isfile(os.path.join(libs[0], openblas[0]))


@pytest.mark.parametrize("name", ["_rational_tests", "_umath_tests"])
def test_numpy_test_modules_are_single_phase(name):
    path = str(_numpy_file(f"_core/{name}*.so"))
    assert elf.init_kind(elf.read_dynamic(path)) == "single"
    assert elf.extension_kind(path) == "single"


def test_stdlib_and_our_own_extension_are_multi_phase():
    # The shared objects of lib-dynload (Debian builds most of the stdlib's
    # extension modules into the interpreter; a few stay files there).
    # Only modules CPython converted to multi-phase init by 3.12 (some others,
    # readline and _curses on 3.13, still are single-phase).
    import glob

    multi = {
        "_asyncio",
        "_bz2",
        "_lzma",
        "_json",
        "_csv",
        "_struct",
        "_bisect",
        "_heapq",
        "_random",
        "_sqlite3",
        "_ssl",
        "_queue",
        "_multibytecodec",
        "_uuid",
        "_socket",
    }
    dynload = os.path.join(os.path.dirname(os.__file__), "lib-dynload")
    origins = [
        path
        for path in sorted(glob.glob(os.path.join(dynload, "*.so")))
        if os.path.basename(path).partition(".")[0] in multi
    ]
    assert origins, f"no extension module file in {dynload}"
    kinds = {os.path.basename(origin): elf.extension_kind(origin) for origin in origins}
    assert set(kinds.values()) == {"multi"}, kinds
    assert elf.extension_kind(_core.__file__) == "multi"
    assert elf.read_dynamic(_core.__file__).exported == {"PyInit__core"}


def test_built_modules_single_multi_and_unknown(build):
    single = elf.read_dynamic(str(build("single", SINGLE)))
    assert elf.init_kind(single) == "single" and single.exported == {"PyInit_single"}
    multi = elf.read_dynamic(str(build("multi", MULTI)))
    assert elf.init_kind(multi) == "multi" and multi.exported == {"PyInit_multi"}
    plain = elf.read_dynamic(str(build("plain", NOT_PYTHON, "-Wl,-soname,libplain.so.1")))
    assert elf.init_kind(plain) == "unknown" and not plain.exported
    assert plain.soname == "libplain.so.1" and single.soname is None
    assert "single" in repr(single) and "PyInit_single" in repr(single)


@pytest.mark.parametrize("dtags", ["--enable-new-dtags", "--disable-new-dtags"])
def test_runpath_and_rpath_with_origin(build, dtags):
    # --enable-new-dtags writes DT_RUNPATH, --disable-new-dtags the older DT_RPATH.
    path = build(
        f"paths{dtags[2:8]}",
        SINGLE,
        "-Wl,-rpath,$ORIGIN/../libs:/opt/lib:${ORIGIN}/sub",
        f"-Wl,{dtags}",
    )
    info = elf.read_dynamic(str(path))
    assert info.runpath == ("$ORIGIN/../libs", "/opt/lib", "${ORIGIN}/sub")
    here = os.path.dirname(os.path.abspath(path))
    assert elf.origin_paths(str(path), info) == [
        ("$ORIGIN/../libs", os.path.join(os.path.dirname(here), "libs")),
        ("${ORIGIN}/sub", os.path.join(here, "sub")),
    ]


def test_origin_paths_of_a_relative_path(build, monkeypatch):
    path = build("relative", MULTI, "-Wl,-rpath,$ORIGIN:$ORIGINAL/x:/usr/$ORIGIN")
    info = elf.read_dynamic(str(path))
    monkeypatch.chdir(path.parent.parent)
    relative = os.path.join(path.parent.name, path.name)
    # $ORIGINAL is another token, and $ORIGIN counts only at an entry's start.
    assert elf.origin_paths(relative, info) == [
        ("$ORIGIN", os.path.join(os.getcwd(), path.parent.name))
    ]


@pytest.mark.parametrize("hash_style", ["sysv", "gnu", "both"])
def test_stripped_and_without_section_headers(build, tmp_path, hash_style):
    built = build(
        f"hashed_{hash_style}", SINGLE, f"-Wl,--hash-style={hash_style}", "-Wl,-rpath,$ORIGIN/lib"
    )
    stripped = tmp_path / "stripped.so"
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(built)], check=True)
    no_sections = _without_section_headers(stripped, tmp_path / "no_sections.so")
    expected = elf.read_dynamic(str(built))
    for path in (stripped, no_sections):
        info = elf.read_dynamic(str(path))
        assert (info.undefined, info.exported, info.needed, info.runpath, info.soname) == (
            expected.undefined,
            expected.exported,
            expected.needed,
            expected.runpath,
            expected.soname,
        ), path.name
        assert elf.extension_kind(str(path)) == "single"
    assert "PyModule_Create2" in expected.undefined


def test_32_bit_build(tmp_path):
    # No Python.h for a 32-bit target: declare the two imports; -nostdlib as
    # a 32-bit libgcc may be missing. The file is still what ld.so would load.
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc)")
    source = tmp_path / "m32.c"
    source.write_text(
        "extern void *PyModule_Create2(void *, int);\n"
        "void *PyInit_m32(void) { return PyModule_Create2(0, 1013); }\n"
    )
    out = tmp_path / "m32.so"
    done = subprocess.run(
        [
            cc,
            "-m32",
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-Wl,-rpath,$ORIGIN/x",
            "-o",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cc cannot build 32-bit code here: {done.stderr.strip()[-200:]}")
    assert out.read_bytes()[4] == 1  # ELFCLASS32
    info = elf.read_dynamic(str(out))
    assert elf.init_kind(info) == "single" and info.exported == {"PyInit_m32"}
    assert info.runpath == ("$ORIGIN/x",)


def _handmade_elf(bits: int, order: str, sections: bool, hash_style: str) -> bytes:
    """A minimal ELF shared object, one PT_LOAD mapping the file at address 0.

    Symbols: an import of PyModule_Create2 and memcpy, a global PyInit_hand,
    a global helper and a local PyInit_local (neither exported).
    """
    word = "Q" if bits == 64 else "I"
    names = [
        "libhand.so.2",
        "$ORIGIN/lib:/b",
        "hand.so",
        "PyModule_Create2",
        "memcpy",
        "PyInit_hand",
        "helper",
        "PyInit_local",
    ]
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    at = {n: strtab.index(b"\0" + n.encode() + b"\0") + 1 for n in names}
    # (name, st_info, st_shndx): GLOBAL FUNC is 0x12, LOCAL FUNC 0x02.
    syms = [
        (0, 0, 0),
        (at["PyModule_Create2"], 0x12, 0),
        (at["memcpy"], 0x12, 0),
        (at["PyInit_hand"], 0x12, 5),
        (at["helper"], 0x12, 5),
        (at["PyInit_local"], 0x02, 5),
    ]
    if bits == 64:
        symtab = b"".join(struct.pack(order + "IBBHQQ", n, i, 0, s, 0x10, 0) for n, i, s in syms)
    else:
        symtab = b"".join(struct.pack(order + "IIIBBH", n, 0x10, 0, i, 0, s) for n, i, s in syms)
    if hash_style == "sysv":
        hash_tag, table = 4, struct.pack(order + "III", 1, len(syms), 1) + bytes(4 * len(syms))
    elif hash_style == "gnu-unhashed":  # all symbols below symoffset: an empty bucket, no chain
        hash_tag = 0x6FFFFEF5
        table = struct.pack(order + "IIII" + word + "I", 1, len(syms), 1, 0, 0, 0)
    else:  # one bucket from symbol 1 on; bit 0 of the last chain value ends the chain
        hash_tag = 0x6FFFFEF5
        chain = [0] * (len(syms) - 2) + [1]
        table = struct.pack(
            order + "IIII" + word + "I" + "I" * len(chain), 1, 1, 1, 0, 0, 1, *chain
        )
    ehsize, phsize, shsize = (64, 56, 64) if bits == 64 else (52, 32, 40)
    str_at = ehsize + 2 * phsize
    sym_at = str_at + len(strtab)
    hash_at = sym_at + len(symtab)
    dyn_at = hash_at + len(table)
    dyn = [
        (1, at["libhand.so.2"]),
        (29, at["$ORIGIN/lib:/b"]),
        (14, at["hand.so"]),
        (5, str_at),
        (10, len(strtab)),
        (6, sym_at),
        (hash_tag, hash_at),
        (0, 0),
    ]
    dynamic = b"".join(struct.pack(order + ("qQ" if bits == 64 else "iI"), *d) for d in dyn)
    sh_at = dyn_at + len(dynamic)
    size = sh_at + (5 * shsize if sections else 0)
    if bits == 64:

        def program(kind, offset, length):
            return struct.pack(
                order + "IIQQQQQQ", kind, 4, offset, offset, offset, length, length, 8
            )

        def section(kind, offset, length, link, entsize):
            return struct.pack(
                order + "IIQQQQIIQQ", 0, kind, 2, offset, offset, length, link, 0, 8, entsize
            )
    else:

        def program(kind, offset, length):
            return struct.pack(
                order + "IIIIIIII", kind, offset, offset, offset, length, length, 4, 4
            )

        def section(kind, offset, length, link, entsize):
            return struct.pack(
                order + "IIIIIIIIII", 0, kind, 2, offset, offset, length, link, 0, 4, entsize
            )

    header = struct.pack(
        order + "16sHHI" + word * 3 + "IHHHHHH",
        b"\x7fELF" + bytes([bits // 32, 1 if order == "<" else 2, 1]),
        3,
        62,
        1,
        0,
        ehsize,
        sh_at if sections else 0,
        0,
        ehsize,
        phsize,
        2,
        shsize,
        5 if sections else 0,
        0,
    )
    out = header + program(1, 0, size) + program(2, dyn_at, len(dynamic))
    out += strtab + symtab + table + dynamic
    if sections:  # null, .dynstr, .dynsym (linked to 1), hash, .dynamic (linked to 1)
        out += (
            section(0, 0, 0, 0, 0)
            + section(3, str_at, len(strtab), 0, 0)
            + section(11, sym_at, len(symtab), 1, len(symtab) // len(syms))
            + section(5, hash_at, len(table), 2, 4)
            + section(6, dyn_at, len(dynamic), 1, len(dynamic) // len(dyn))
        )
    assert len(out) == size
    return out


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("sections", [True, False])
@pytest.mark.parametrize("hash_style", ["sysv", "gnu", "gnu-unhashed"])
def test_handmade_classes_and_byte_orders(tmp_path, bits, order, sections, hash_style):
    path = tmp_path / "hand.so"
    path.write_bytes(_handmade_elf(bits, order, sections, hash_style))
    info = elf.read_dynamic(str(path))
    assert info.undefined == {"PyModule_Create2", "memcpy"}
    assert info.exported == {"PyInit_hand"}
    assert info.needed == ("libhand.so.2",) and info.soname == "hand.so"
    assert info.runpath == ("$ORIGIN/lib", "/b")
    assert elf.init_kind(info) == "single"


def test_not_elf_names_the_path_and_its_first_bytes(tmp_path):
    path = tmp_path / "module.so"
    path.write_text("INPUT(libfoo.so)\n")
    with pytest.raises(
        ValueError, match=r"not an ELF shared object: .*module\.so starts with b'INPUT"
    ):
        elf.read_dynamic(str(path))
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.so starts with b''"):
        elf.extension_kind(str(empty))


def test_object_files_and_unknown_classes_are_refused(build, tmp_path):
    obj = tmp_path / "single.o"
    source = build("for_object", SINGLE).with_suffix(".c")
    subprocess.run(
        ["cc", "-c", "-fPIC", "-I", sysconfig.get_paths()["include"], "-o", str(obj), str(source)],
        check=True,
    )
    with pytest.raises(ValueError, match=r"single\.o is a relocatable object file"):
        elf.read_dynamic(str(obj))
    odd = tmp_path / "odd.so"
    odd.write_bytes(b"\x7fELF\x03\x01" + bytes(100))
    with pytest.raises(ValueError, match=r"unsupported ELF file: .*odd\.so: class byte b'\\x03'"):
        elf.read_dynamic(str(odd))


def test_truncated_directory_and_missing(tmp_path):
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(pathlib.Path(_core.__file__).read_bytes()[:100])
    with pytest.raises(ValueError, match=r"truncated or corrupt ELF file: .*truncated\.so"):
        elf.read_dynamic(str(truncated))
    with pytest.raises(OSError) as raised:
        elf.read_dynamic(str(tmp_path))
    assert raised.value.filename == str(tmp_path)
    with pytest.raises(FileNotFoundError):
        elf.extension_kind(str(tmp_path / "missing.so"))
    # Neither blocks: a FIFO without a writer, a device without an end.
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(ValueError, match=re.escape(f"{path} is not a regular file")):
            elf.extension_kind(path)


def test_random_and_corrupted_files_raise_value_error(tmp_path, build):
    # Each corrupt file either still parses or raises a ValueError naming it:
    # no struct.error, IndexError, MemoryError or endless loop.
    rng = random.Random(1234)
    original = build("fuzzed", MULTI, "-Wl,-rpath,$ORIGIN").read_bytes()
    path = tmp_path / "corrupt.so"
    path.write_bytes(rng.randbytes(4096))
    with pytest.raises(ValueError, match=r"corrupt\.so starts with"):
        elf.read_dynamic(str(path))
    failures = 0
    for i in range(300):
        data = bytearray(original)
        if i % 3 == 0:  # section-less: the program header path
            data[0x28:0x30] = bytes(8)
            data[0x3C:0x40] = bytes(4)
        if i % 2 == 0:
            data[4:6] = bytes([rng.choice((1, 2)), rng.choice((1, 2))])
        for _ in range(rng.randint(1, 8)):
            # Mostly the headers and the first tables, where the offsets are.
            data[rng.randrange(min(len(data), 0x1000) if i % 4 else len(data))] = rng.randrange(256)
        path.write_bytes(data)
        try:
            elf.read_dynamic(str(path))
        except ValueError as e:
            assert str(path) in str(e), e
            failures += 1
    assert failures  # the loop did reach corrupt files


def test_extension_kind_reads_a_file_again_once_it_changed(build, tmp_path, monkeypatch):
    single = build("cached_single", SINGLE).read_bytes()
    multi = build("cached_multi", MULTI).read_bytes()
    reads = []
    real_read = elf._read
    monkeypatch.setattr(elf, "_read", lambda r: reads.append(r.path) or real_read(r))
    path = tmp_path / "cached.so"
    path.write_bytes(single)
    assert elf.extension_kind(str(path)) == "single"
    assert elf.extension_kind(str(path)) == "single"
    assert len(reads) == 1
    before = path.stat()
    with open(path, "r+b") as f:  # in place: the same inode
        f.write(multi)
        f.truncate()
    # Two writes within one clock tick may share an mtime: move it on.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert path.stat().st_ino == before.st_ino
    assert elf.extension_kind(str(path)) == "multi"
    assert len(reads) == 2


async def test_runs_inside_a_worker_interpreter():
    import aiosubinterp as asi

    async with asi.Interpreter() as interp:
        assert await interp.run(elf.extension_kind, _core.__file__) == "multi"
        assert (
            await interp.run(elf.extension_kind, str(_numpy_file("_core/_umath_tests*.so")))
            == "single"
        )


def test_worker_side_imports_only():
    # Imported inside worker interpreters: no typing or other module of ours.
    code = (
        "import sys; before = set(sys.modules)\n"
        "import aiosubinterp._inside.elf\n"
        "print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert set(ast.literal_eval(out)) == {
        "aiosubinterp",
        "aiosubinterp._inside",
        "aiosubinterp._inside.elf",
        "struct",
        "_struct",
    }
