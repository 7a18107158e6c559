"""Read what an extension module's ELF file imports, exports and links against.

Why: a private copy of an extension module's ``*.so`` (loaded under its own
name, so the dynamic loader gives it fresh statics) isolates it from other
interpreters only if it uses multi-phase init. A single-phase module's
``PyInit_`` calls ``PyModule_Create2``; CPython 3.13+ runs such an init in the
main interpreter, so a copy cannot isolate it. The imported symbols tell the
two apart without loading the file. The copy also needs the libraries the
original finds through ``$ORIGIN`` run paths: origin_paths() names them.

Written from the System V ABI's ELF chapter (ELF32 and ELF64, either byte
order). Only the headers and the few tables needed are read (seek + read):
extension files can be 10-100 MB.

Worker-side module: imports only os and struct (no typing, no
``from __future__``), as everything imported inside interpreters.
"""

import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["DynamicInfo", "extension_kind", "init_kind", "origin_paths", "read_dynamic"]

_PT_LOAD, _PT_DYNAMIC = 1, 2
_SHT_DYNSYM = 11
_DT_NEEDED, _DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ = 1, 4, 5, 6, 10
_DT_SONAME, _DT_RPATH, _DT_RUNPATH, _DT_GNU_HASH = 14, 15, 29, 0x6FFFFEF5
_ET_NAMES = {
    0: "an untyped ELF file",
    1: "a relocatable object file",
    2: "an executable",
    4: "a core dump",
}
_EXPORT_PREFIXES = ("PyInit_", "PyModExport_")
# ELF64 and ELF32 layouts (byte order prefixed at use): header, program
# header, section header, symbol, dynamic entry; the symbol's field order differs.
_LAYOUT = {
    2: ("16sHHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", "IBBHQQ", "qQ"),
    1: ("16sHHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", "IIIBBH", "iI"),
}


class DynamicInfo:
    """What one ELF shared object imports, exports and links against (read by read_dynamic()).

    Attributes:
        undefined: names of the dynamic symbols it imports (undefined in it).
        exported: the PyInit_* and PyModExport_* functions or objects it
            defines as global or weak (only those: the set stays small).
        needed: its DT_NEEDED libraries, in order.
        runpath: DT_RUNPATH (else DT_RPATH) split on ":", unexpanded, in
            order, empty entries left out.
        soname: DT_SONAME, or None.

    Thread-safety: never changed after read_dynamic() builds it.
    """

    __slots__ = ("exported", "needed", "runpath", "soname", "undefined")

    def __init__(
        self,
        undefined: frozenset[str],
        exported: frozenset[str],
        needed: tuple[str, ...],
        runpath: tuple[str, ...],
        soname: str | None,
    ) -> None:
        self.undefined = undefined
        self.exported = exported
        self.needed = needed
        self.runpath = runpath
        self.soname = soname

    def __repr__(self) -> str:
        return (
            f"DynamicInfo(undefined=<{len(self.undefined)} names>, "
            f"exported={sorted(self.exported)}, needed={self.needed}, "
            f"runpath={self.runpath}, soname={self.soname!r})"
        )


class _Reader:
    """An open ELF file and its layout; every read is checked against the file's size."""

    __slots__ = ("end", "f", "layout", "loads", "path", "size", "stamp", "word")

    def __init__(self, f: "BinaryIO", path: str) -> None:
        st = os.fstat(f.fileno())
        if st.st_mode & 0o170000 != 0o100000:  # S_IFMT, S_IFREG: a FIFO or device may never end
            raise ValueError(f"not an ELF shared object: {path} is not a regular file")
        self.f = f
        self.path = path
        self.size = st.st_size
        self.stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        self.end = "<"
        self.layout = _LAYOUT[2]
        self.word = 8
        self.loads: list[tuple[int, ...]] = []

    def corrupt(self, what: str) -> ValueError:
        return ValueError(f"truncated or corrupt ELF file: {self.path}: {what}")

    def read(self, offset: int, size: int, what: str) -> bytes:
        """Exactly size bytes at offset: a corrupt field cannot make us read past the end."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise self.corrupt(
                f"{what} ({size} bytes at offset {offset}) is outside the file's {self.size} bytes"
            )
        self.f.seek(offset)
        data = self.f.read(size)
        if len(data) != size:
            raise self.corrupt(f"short read of {what}")
        return data

    def table(self, fmt: str, offset: int, count: int, what: str) -> list[tuple[int, ...]]:
        """count entries of struct format fmt (byte order added) at offset."""
        fmt = self.end + fmt
        if count > self.size:  # bounds the product before read() checks the end
            raise self.corrupt(f"{count} entries in {what}")
        return list(struct.iter_unpack(fmt, self.read(offset, count * struct.calcsize(fmt), what)))

    def offset_of(self, vaddr: int, what: str) -> int:
        """The file offset of a virtual address, through the PT_LOAD segment holding it."""
        for offset, start, filesz in self.loads:
            if start <= vaddr < start + filesz:
                return vaddr - start + offset
        raise self.corrupt(f"{what}'s address {vaddr:#x} is in no loaded segment")


def _open(path: str) -> "BinaryIO":
    """path opened for reading; O_NONBLOCK lest a FIFO block the open (_Reader refuses it)."""
    return open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK))


def _header(r: _Reader) -> tuple[int, ...]:
    """The ELF header's fields after e_ident; sets r's byte order and layout."""
    r.f.seek(0)
    head = r.f.read(64)
    if head[:4] != b"\x7fELF":
        raise ValueError(f"not an ELF shared object: {r.path} starts with {head[:16]!r}")
    if len(head) < 6 or head[4] not in _LAYOUT or head[5] not in (1, 2):
        raise ValueError(
            f"unsupported ELF file: {r.path}: class byte {head[4:5]!r} (1: 32-bit, "
            f"2: 64-bit), data byte {head[5:6]!r} (1: little, 2: big endian)"
        )
    r.end = "<" if head[5] == 1 else ">"
    r.layout = _LAYOUT[head[4]]
    r.word = 8 if head[4] == 2 else 4
    fields = struct.unpack(r.end + r.layout[0], r.read(0, struct.calcsize(r.layout[0]), "header"))
    if fields[1] != 3:  # e_type: ET_DYN
        kind = _ET_NAMES.get(fields[1], f"an ELF file of type {fields[1]}")
        raise ValueError(f"not an ELF shared object: {r.path} is {kind}")
    return fields[5:]


def _symbols(
    r: _Reader, shoff: int, shnum: int, dyn: dict[int, int]
) -> tuple[list[tuple[int, ...]], bytes]:
    """The dynamic symbol table (st_name, st_info, st_shndx) and its string table.

    From the SHT_DYNSYM section if there is one. Otherwise (no section
    headers), from DT_SYMTAB and DT_STRTAB, counted by DT_HASH's nchain or by walking
    DT_GNU_HASH; with neither (no ELF tool makes such a file) there is no
    count, and the symbols are reported empty rather than guessed.
    """
    sym = r.layout[3]
    sections = r.table(r.layout[2], shoff, shnum, "section headers") if shoff else []
    for _, kind, _, _, offset, size, link, *_ in sections:
        if kind == _SHT_DYNSYM and link < len(sections):
            strtab = r.read(sections[link][4], sections[link][5], ".dynstr")
            entries = r.table(sym, offset, size // struct.calcsize(sym), ".dynsym")
            break
    else:
        if _DT_SYMTAB not in dyn or _DT_STRTAB not in dyn:
            return [], b""
        count = _symbol_count(r, dyn)
        if count < 0:
            return [], b""
        strtab = r.read(
            r.offset_of(dyn[_DT_STRTAB], "DT_STRTAB"), dyn.get(_DT_STRSZ, 0), "DT_STRTAB"
        )
        entries = r.table(sym, r.offset_of(dyn[_DT_SYMTAB], "DT_SYMTAB"), count, "DT_SYMTAB")
    if r.word == 8:
        return [(e[0], e[1], e[3]) for e in entries], strtab
    return [(e[0], e[3], e[5]) for e in entries], strtab


def _symbol_count(r: _Reader, dyn: dict[int, int]) -> int:
    """How many dynamic symbols: DT_HASH's nchain, or walked out of DT_GNU_HASH; -1 if neither."""
    if _DT_HASH in dyn:
        return r.table("II", r.offset_of(dyn[_DT_HASH], "DT_HASH"), 1, "DT_HASH")[0][1]
    if _DT_GNU_HASH not in dyn:
        return -1
    at = r.offset_of(dyn[_DT_GNU_HASH], "DT_GNU_HASH")
    nbuckets, symoffset, bloom_words, _ = r.table("IIII", at, 1, "DT_GNU_HASH")[0]
    buckets_at = at + 16 + bloom_words * r.word
    last = max((b[0] for b in r.table("I", buckets_at, nbuckets, "DT_GNU_HASH buckets")), default=0)
    if last < symoffset:
        return symoffset  # no hashed symbol: only the unhashed ones below symoffset
    # The highest bucket's chain ends at the last symbol: the one whose chain
    # value has bit 0 set. Each step reads 4 bytes further, so the end of the
    # file ends a corrupt chain.
    chain_at = buckets_at + 4 * nbuckets
    while not r.table("I", chain_at + 4 * (last - symoffset), 1, "DT_GNU_HASH chain")[0][0] & 1:
        last += 1
    return last + 1


def read_dynamic(path: str) -> DynamicInfo:
    """What the ELF shared object at path imports, exports, needs and searches.

    Reads the ELF header, the program headers (PT_DYNAMIC is the dynamic
    array the loader reads, PT_LOAD maps its addresses to file offsets) and
    the dynamic symbol table (see _symbols() for files without section headers).

    Raises:
        ValueError: path is not an ELF shared object (the message says what
            it is), or is truncated or corrupt. OSError passes through.
    """
    with _open(path) as f:
        return _read(_Reader(f, path))


def _read(r: _Reader) -> DynamicInfo:
    phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = _header(r)
    if (phnum and phentsize != struct.calcsize(r.layout[1])) or (
        shnum and shentsize != struct.calcsize(r.layout[2])
    ):
        raise r.corrupt(f"header entry sizes {phentsize}, {shentsize} do not match its class")
    if shoff and not shnum:  # more than 0xff00 sections: section 0's sh_size counts them
        shnum = r.table(r.layout[2], shoff, 1, "section header 0")[0][5]
    programs = r.table(r.layout[1], phoff, phnum, "program headers")
    if r.word == 8:  # (p_type, p_offset, p_vaddr, p_filesz) of either layout
        programs = [(p[0], p[2], p[3], p[5]) for p in programs]
    else:
        programs = [(p[0], p[1], p[2], p[4]) for p in programs]
    r.loads = [p[1:] for p in programs if p[0] == _PT_LOAD]
    dynamic = next((p for p in programs if p[0] == _PT_DYNAMIC), None)
    if dynamic is None:
        raise ValueError(
            f"not an ELF shared object: {r.path} has no dynamic section (statically linked?)"
        )
    entries = r.table(r.layout[4], dynamic[1], dynamic[3] // (2 * r.word), "PT_DYNAMIC")
    dyn: dict[int, int] = {}
    lists: dict[int, list[int]] = {_DT_NEEDED: [], _DT_RPATH: [], _DT_RUNPATH: []}
    for tag, value in entries:
        if tag == 0:  # DT_NULL ends the array
            break
        dyn.setdefault(tag, value)
        if tag in lists:
            lists[tag].append(value)
    strtab = b""
    if _DT_STRTAB in dyn:
        strtab = r.read(
            r.offset_of(dyn[_DT_STRTAB], "DT_STRTAB"), dyn.get(_DT_STRSZ, 0), "DT_STRTAB"
        )
    needed = tuple(_string(r, strtab, v) for v in lists[_DT_NEEDED])
    runpath = tuple(
        e
        for v in lists[_DT_RUNPATH] or lists[_DT_RPATH]
        for e in _string(r, strtab, v).split(":")
        if e
    )
    soname = _string(r, strtab, dyn[_DT_SONAME]) if _DT_SONAME in dyn else None
    symbols, symstr = _symbols(r, shoff, shnum, dyn)
    undefined: set[str] = set()
    exported: set[str] = set()
    for name_at, info, shndx in symbols:
        if not name_at:
            continue
        if shndx == 0:  # SHN_UNDEF: an import
            undefined.add(_string(r, symstr, name_at))
        elif info >> 4 in (1, 2) and info & 0xF in (1, 2):  # GLOBAL/WEAK, OBJECT/FUNC
            name = _string(r, symstr, name_at)
            if name.startswith(_EXPORT_PREFIXES):
                exported.add(name)
    return DynamicInfo(frozenset(undefined), frozenset(exported), needed, runpath, soname)


def _string(r: _Reader, strtab: bytes, offset: int) -> str:
    end = strtab.find(b"\0", offset)
    if offset >= len(strtab) or end < 0:
        raise r.corrupt(f"string offset {offset} outside its {len(strtab)}-byte string table")
    return strtab[offset:end].decode("utf-8", "surrogateescape")


def init_kind(info: DynamicInfo) -> str:
    """'single', 'multi' or 'unknown': how the extension module described by info initialises.

    'single' if it imports PyModule_Create2 (or its trace-refs twin): its
    PyInit_ builds the module itself, which CPython 3.13+ runs in the main
    interpreter, so a private copy cannot isolate it. 'multi' if it imports
    PyModuleDef_Init or exports a PyModExport_ hook (multi-phase: each
    interpreter gets its own module). 'unknown' otherwise (modules made some
    other way, or no extension module at all): treat as not isolatable.
    A file that imports both counts as 'single': some module of it is.
    """
    if {"PyModule_Create2", "PyModule_Create2TraceRefs"} & info.undefined:
        return "single"
    if "PyModuleDef_Init" in info.undefined or any(
        name.startswith("PyModExport_") for name in info.exported
    ):
        return "multi"
    return "unknown"


# path -> ((st_ino, st_size, st_mtime_ns), kind). Thread-safety: one dict
# operation at a time; two threads may both read a file and store the same kind.
_KINDS: dict[str, tuple[tuple[int, int, int], str]] = {}


def extension_kind(path: str) -> str:
    """init_kind(read_dynamic(path)), cached until the file at path changes (inode, size, mtime).

    Raises what read_dynamic() raises.
    """
    with _open(path) as f:
        r = _Reader(f, path)  # its stamp is that of the file read, even if path is replaced
        cached = _KINDS.get(path)
        if cached is not None and cached[0] == r.stamp:
            return cached[1]
        kind = init_kind(_read(r))
    _KINDS[path] = (r.stamp, kind)
    return kind


def origin_paths(path: str, info: DynamicInfo) -> list[tuple[str, str]]:
    """(entry, directory) for each of info's run path entries that starts with $ORIGIN.

    The directory is the absolute, normalised one the loader would search for
    the file at path ($ORIGIN is the directory holding it, as named, symlinks
    not resolved): a private copy elsewhere must find the same libraries.
    """
    origin = os.path.dirname(os.path.abspath(path))
    found = []
    for entry in info.runpath:
        if entry.startswith("${ORIGIN}"):
            rest = entry[9:]
        elif entry.startswith("$ORIGIN") and not (entry[7:8].isalnum() or entry[7:8] == "_"):
            rest = entry[7:]  # "$ORIGINX" would be a token named ORIGINX, not $ORIGIN
        else:
            continue
        found.append((entry, os.path.normpath(origin + rest)))
    return found
