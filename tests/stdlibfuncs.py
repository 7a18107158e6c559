"""The stdlib matrix's exercises (tests/test_stdlib_matrix.py), run inside workers.

Each exercise imports one stdlib module inside the function and calls a
little of it, going through its C accelerator where it has one; it returns
plain data. The matrix runs every exercise in the main interpreter and in
several workers and compares the values: a pure-Python fallback (a shim)
must compute the same thing as the accelerator. What belongs here: the
exercises, their table (STDLIB_EXERCISES) and other calls into the
standard library's C modules that the matrix compares.

Imported inside workers: no asyncio, no uvloop at module level.
"""

from __future__ import annotations

import os
import sys


def _ex_email():
    from email.message import EmailMessage
    from email.parser import BytesParser
    from email.policy import default

    msg = EmailMessage()
    msg["Subject"] = "héllo wörld"
    msg["To"] = "a@example.com"
    msg.set_content("body ü " * 20)
    raw = bytes(msg)
    back = BytesParser(policy=default).parsebytes(raw)
    return raw, str(back["Subject"]), back.get_content()


def _ex_csv():
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf).writerows([["a", "b,c", 'd"e'], [1, 2.5, None]])
    return buf.getvalue(), [row for row in csv.reader(io.StringIO(buf.getvalue()))]


def _ex_uuid():
    import uuid

    named = uuid.uuid5(uuid.NAMESPACE_DNS, "python.org")
    return named.hex, uuid.uuid1().version, uuid.uuid4().version


def _ex_logging():
    import io
    import logging

    buf = io.StringIO()
    logger = logging.getLogger("aiosubinterp.matrix")
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    logger.addHandler(handler)
    try:
        logger.warning("value %d", 42)
    finally:
        logger.removeHandler(handler)
    return buf.getvalue()


def _ex_unicodedata():
    import unicodedata

    return unicodedata.name("é"), unicodedata.normalize("NFD", "é"), unicodedata.category("𝔸")  # noqa: RUF001


_DATA = bytes(range(256)) * 64


def _ex_lzma():
    import lzma

    packed = lzma.compress(_DATA)
    return packed, lzma.decompress(packed) == _DATA


def _ex_bz2():
    import bz2

    packed = bz2.compress(_DATA)
    return packed, bz2.decompress(packed) == _DATA


def _ex_zlib():
    import zlib

    packed = zlib.compress(_DATA, 9)
    return packed, zlib.decompress(packed) == _DATA, zlib.crc32(_DATA), zlib.adler32(_DATA)


def _ex_gzip():
    import gzip

    packed = gzip.compress(_DATA, mtime=0)
    return packed, gzip.decompress(packed) == _DATA


def _ex_array():
    import array

    a = array.array("d", range(10))
    a.reverse()
    return a.tobytes(), sum(a), array.array("i", b"\x01\x00\x00\x00" * 3).tolist()


def _ex_struct():
    import struct

    packed = struct.pack("<iqd3s", -1, 2**40, 3.5, b"abc")
    return packed, struct.unpack("<iqd3s", packed)


def _ex_mmap():
    import mmap

    with mmap.mmap(-1, 4096) as m:
        m.write(b"hello mmap")
        return m[:10], m.find(b"mmap")


def _ex_select():
    import select

    r, w = os.pipe()
    try:
        os.write(w, b"x")
        ready = select.select([r], [], [], 5)[0] == [r]
        poller = select.poll()
        poller.register(r, select.POLLIN)
        polled = [fd == r for fd, _ in poller.poll(5000)]
        return ready, polled
    finally:
        os.close(r)
        os.close(w)


def _ex_socket():
    import socket

    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"ping")
        return b.recv(4), socket.htons(1), socket.inet_aton("10.1.2.3")


def _ex_ssl():
    import ssl

    ctx = ssl.create_default_context()
    return ctx.verify_mode == ssl.CERT_REQUIRED, ctx.check_hostname, ssl.OPENSSL_VERSION


def _ex_sqlite3():
    import sqlite3

    con = sqlite3.connect(":memory:")
    try:
        con.execute("create table t (k text, v real)")
        con.executemany("insert into t values (?, ?)", [("a", 1.5), ("b", 2.5), ("a", 3.0)])
        rows = con.execute("select k, sum(v) from t group by k order by k").fetchall()
        return rows, sqlite3.sqlite_version
    finally:
        con.close()


def _ex_tomllib():
    import tomllib

    doc = tomllib.loads('a = 1\nb = [1.5, "x"]\n[c]\nd = 1979-05-27T07:32:00Z\n')
    return doc["a"], doc["b"], doc["c"]["d"].isoformat()


def _ex_concurrent_futures():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(pow, range(8), [3] * 8))


def _ex_multiprocessing():
    import multiprocessing

    a, b = multiprocessing.Pipe()
    with a, b:
        a.send({"x": [1, 2]})
        return b.recv(), multiprocessing.cpu_count() >= 1, multiprocessing.current_process().name


def _ex_typing():
    import typing

    class Movie(typing.TypedDict):
        title: str
        year: int

    # typing's own Optional, on purpose:
    return str(typing.Optional[list[int]]), sorted(typing.get_type_hints(Movie))  # noqa: UP045


def _ex_dataclasses():
    import dataclasses

    cls = dataclasses.make_dataclass("P", [("x", int), ("y", int, dataclasses.field(default=2))])
    return dataclasses.asdict(cls(1)), repr(cls(3, 4))


def _ex_enum():
    import enum

    Color = enum.Enum("Color", "RED GREEN BLUE")
    Perm = enum.IntFlag("Perm", "R W X")
    Level = enum.IntEnum("Level", "LOW HIGH")
    return [c.name for c in Color], int(Perm.R | Perm.X), str(Perm.W), f"{Level.HIGH}"


def _ex_fractions():
    from fractions import Fraction

    return str(Fraction(1, 3) + Fraction(1, 6)), str(Fraction("3.1415").limit_denominator(100))


def _ex_random():
    import random

    rng = random.Random(1234)
    return rng.random(), rng.randrange(10**20), rng.sample(range(100), 5), rng.gauss(0, 1)


def _ex_secrets():
    import secrets

    return len(secrets.token_bytes(16)), len(secrets.token_hex(8)), secrets.randbelow(1) == 0


def _ex_base64():
    import base64

    return base64.b64encode(_DATA[:300]), base64.b32encode(b"xyz"), base64.a85encode(b"abcd")


def _ex_binascii():
    import binascii

    return binascii.hexlify(_DATA[:40]), binascii.crc32(_DATA), binascii.b2a_base64(b"hi")


def _ex_heapq():
    import heapq

    h = [5, 1, 8, 3, 9, 2]
    heapq.heapify(h)
    return [heapq.heappop(h) for _ in range(3)], heapq.nlargest(2, range(50), key=lambda x: -x)


def _ex_bisect():
    import bisect

    a = [1, 3, 5, 7]
    bisect.insort(a, 4)
    return a, bisect.bisect_left(a, 5), bisect.bisect_right(a, 5)


def _ex_functools():
    import functools

    @functools.cache
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    return (
        fib(80),
        functools.reduce(lambda a, b: a * b, range(1, 20)),
        functools.cmp_to_key(lambda a, b: b - a)(1) < functools.cmp_to_key(lambda a, b: b - a)(2),
    )


def _ex_itertools():
    import itertools

    return (
        list(itertools.islice(itertools.permutations("abcd", 2), 5)),
        list(itertools.accumulate(range(6))),
        list(itertools.batched(range(7), 3)),
    )


def _ex_operator():
    import operator

    return operator.itemgetter(1, 0)("ab"), operator.attrgetter("real")(3 + 4j), operator.index(7)


def _ex_math():
    import math

    return math.factorial(30), math.lgamma(10.5), math.isqrt(10**30), math.fsum([0.1] * 10)


def _ex_cmath():
    import cmath

    return cmath.sqrt(-4), cmath.exp(1j * cmath.pi).real, cmath.phase(-1 + 0j)


def _ex_xml_etree_ElementTree():
    import xml.etree.ElementTree as ET

    root = ET.fromstring("<a x='1'><b>text</b><b>more</b></a>")
    return ET.tostring(root), [b.text for b in root.iter("b")], root.get("x")


def _ex_html_parser():
    from html.parser import HTMLParser

    seen = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            seen.append((tag, attrs))

        def handle_data(self, data):
            seen.append(data)

    Collect().feed("<p class='x'>a &amp; b<br></p>")
    return seen


def _ex_urllib_parse():
    import urllib.parse

    parts = urllib.parse.urlsplit("https://user@example.com:8080/p/a?q=1&r=é#frag")
    return tuple(parts), urllib.parse.quote("a b/é"), urllib.parse.parse_qs("a=1&a=2&b=3")


def _ex_urllib_request():
    import urllib.request

    req = urllib.request.Request("http://example.com/x", data=b"d", headers={"X-A": "1"})
    return req.get_method(), req.full_url, req.header_items()


def _ex_http_client():
    import http.client

    conn = http.client.HTTPConnection("example.com", 8080, timeout=1)  # never connects
    return http.client.responses[404], conn.host, conn.port


def _ex_json():
    import json

    value = {"b": [1, 2.5, None, True], "a": "é\u2028", "c": {"d": []}}
    text = json.dumps(value, sort_keys=True)
    return text, json.loads(text) == value, json.dumps(value, indent=1, ensure_ascii=False)


def _ex_re():
    import re

    pattern = re.compile(r"(?P<word>\w+)@(\d+)", re.UNICODE)
    return pattern.findall("ab@1 çd@22 x@"), pattern.sub(r"\2", "q@3"), re.escape("a.b*c")


def _ex_pickle():
    import pickle

    value = {"t": (1, 2.5, "x"), "b": bytearray(b"ab"), "s": {1, 2}, "r": [None] * 3}
    value["self"] = [value["t"], value["t"]]
    back = pickle.loads(pickle.dumps(value, protocol=5))
    return back == value, back["self"][0] is back["self"][1], pickle.HIGHEST_PROTOCOL


def _ex_decimal():
    import decimal

    with decimal.localcontext(prec=40):
        third = decimal.Decimal(1) / decimal.Decimal(3)
    return (
        str(third),
        str(decimal.Decimal("1.10") + decimal.Decimal("2.205")),
        str(decimal.Decimal(2).sqrt()),
    )


def _ex_datetime():
    import datetime

    t = datetime.datetime(2024, 2, 29, 23, 59, 30, tzinfo=datetime.UTC)
    later = t + datetime.timedelta(seconds=45)
    return (
        later.isoformat(),
        t.strftime("%A %j"),
        (later - t).total_seconds(),
        datetime.date(2024, 3, 1).toordinal(),
    )


def _ex_zoneinfo():
    import datetime
    import zoneinfo

    try:
        tz = zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:  # no tz database on this machine
        return "no tzdata"
    summer = datetime.datetime(2024, 7, 1, 12, tzinfo=tz)
    return (
        summer.utcoffset().total_seconds(),
        summer.tzname(),
        summer.astimezone(datetime.UTC).isoformat(),
    )


def _ex_statistics():
    import statistics

    data = [2.5, 3.25, 5.5, 11.25, 11.75]
    dist = statistics.NormalDist(0, 1)
    return statistics.mean(data), statistics.median(data), statistics.stdev(data), dist.inv_cdf(0.9)


def _ex_hashlib():
    import hashlib

    return (
        hashlib.sha256(_DATA).hexdigest(),
        hashlib.md5(_DATA).hexdigest(),
        hashlib.blake2b(_DATA, digest_size=16).hexdigest(),
        hashlib.sha3_256(_DATA).hexdigest(),
    )


def _ex_hmac():
    import hmac

    digest = hmac.new(b"key", _DATA, "sha256").hexdigest()
    return digest, hmac.compare_digest(digest, digest), hmac.digest(b"k", b"m", "sha1")


def _ex_asyncio():
    import asyncio  # import only: running a loop in a worker is test_async_worker.py's

    return asyncio.iscoroutinefunction(_ex_asyncio), asyncio.Queue.__name__


def _ex_subprocess():
    import subprocess

    return subprocess.list2cmdline(["a b", 'c"d']), subprocess.run(
        [sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True
    ).stdout


def _ex_threading():
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(sum(range(1000))))
    t.start()
    t.join()
    lock = threading.RLock()
    with lock, lock:
        pass
    return out


def _ex_queue():
    import queue

    q = queue.SimpleQueue()
    for i in range(3):
        q.put(i)
    pq = queue.PriorityQueue()
    for i in (3, 1, 2):
        pq.put(i)
    return [q.get() for _ in range(3)], [pq.get() for _ in range(3)]


def _ex_io():
    import io

    raw = io.BytesIO()
    with io.TextIOWrapper(raw, encoding="utf-8", newline="\n", write_through=True) as text:
        text.write("é\nline2\n")
        value = raw.getvalue()
    return value, io.StringIO("a\nb\n").readlines()


def _ex_pathlib():
    import pathlib

    p = pathlib.PurePosixPath("/usr/lib/python3/x.tar.gz")
    return p.suffixes, p.stem, str(p.with_name("y.py")), str(p.relative_to("/usr"))


def _ex_tempfile():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with tempfile.NamedTemporaryFile("w+", dir=d, delete=False) as f:
            f.write("tmp")
            f.seek(0)
            return f.read(), os.path.dirname(f.name) == d


def _ex_shutil():
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "a")
        with open(src, "wb") as f:
            f.write(_DATA)
        shutil.copyfile(src, os.path.join(d, "b"))
        shutil.copytree(d, os.path.join(d, "tree"), ignore=shutil.ignore_patterns("tree"))
        return sorted(os.listdir(os.path.join(d, "tree"))), os.path.getsize(os.path.join(d, "b"))


def _ex_textwrap():
    import textwrap

    return textwrap.wrap("lorem ipsum dolor sit amet " * 5, 20), textwrap.dedent("  a\n  b")


def _ex_string():
    import string

    return (
        string.Template("$x-${y}").substitute(x=1, y="z"),
        string.Formatter().format("{0:>4}|{k}", 7, k="v"),
        string.capwords("hello big world"),
    )


def _ex_difflib():
    import difflib

    diff = list(difflib.unified_diff(["a\n", "b\n"], ["a\n", "c\n"], "x", "y"))
    return diff, difflib.SequenceMatcher(None, "abcd", "bcde").ratio()


def _ex_pprint():
    import pprint

    return pprint.pformat({f"k{i}": list(range(i)) for i in range(8)}, width=40)


def _ex_copy():
    import copy

    value = {"a": [1, [2, 3]], "b": (4, [5])}
    deep = copy.deepcopy(value)
    return deep == value, deep["a"] is not value["a"], copy.copy(value)["a"] is value["a"]


def _ex_weakref():
    import weakref

    class Obj:
        pass

    objs = [Obj() for _ in range(3)]
    table = weakref.WeakValueDictionary(enumerate(objs))
    del objs[0]
    return sorted(table), weakref.ref(objs[0])() is objs[0]


def _ex_contextvars():
    import contextvars

    var = contextvars.ContextVar("var", default=0)

    def inner():
        var.set(5)
        return var.get()

    return contextvars.copy_context().run(inner), var.get()


def _ex_collections():
    import collections

    d = collections.OrderedDict.fromkeys("abc")
    d.move_to_end("a")
    return (
        list(d),
        collections.Counter("abracadabra").most_common(2),
        list(collections.deque(range(5), maxlen=3)),
    )


def _ex_ctypes():
    import ctypes

    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]

    p = Pair(3, 1.5)
    return p.a, p.b, ctypes.sizeof(Pair), ctypes.c_uint8(300).value


def _ex_readline():
    import readline

    return readline.get_history_length()


def _ex_curses():
    import curses

    return curses.ascii.isalpha("a") if hasattr(curses, "ascii") else curses.COLOR_RED


def _ex_cProfile():
    import cProfile

    prof = cProfile.Profile()
    prof.runcall(sum, range(10))
    return True


def _ex_tracemalloc():
    import tracemalloc

    return tracemalloc.is_tracing()


def _ex_faulthandler():
    import faulthandler

    return faulthandler.is_enabled() in (True, False)


# module name -> (exercise, the C modules behind it that the exercise loads)
STDLIB_EXERCISES: dict[str, tuple] = {
    "email": (_ex_email, ("binascii",)),
    "csv": (_ex_csv, ("_csv",)),
    "uuid": (_ex_uuid, ("_uuid",)),
    "logging": (_ex_logging, ()),
    "unicodedata": (_ex_unicodedata, ("unicodedata",)),
    "lzma": (_ex_lzma, ("_lzma",)),
    "bz2": (_ex_bz2, ("_bz2",)),
    "zlib": (_ex_zlib, ("zlib",)),
    "gzip": (_ex_gzip, ("zlib",)),
    "array": (_ex_array, ("array",)),
    "struct": (_ex_struct, ("_struct",)),
    "mmap": (_ex_mmap, ("mmap",)),
    "select": (_ex_select, ("select",)),
    "socket": (_ex_socket, ("_socket",)),
    "ssl": (_ex_ssl, ("_ssl",)),
    "sqlite3": (_ex_sqlite3, ("_sqlite3", "_datetime")),
    "tomllib": (_ex_tomllib, ("_datetime",)),
    "concurrent.futures": (_ex_concurrent_futures, ("_thread",)),
    "multiprocessing": (_ex_multiprocessing, ("_multiprocessing",)),
    "typing": (_ex_typing, ("_typing",)),
    "dataclasses": (_ex_dataclasses, ()),
    "enum": (_ex_enum, ()),
    "fractions": (_ex_fractions, ("_decimal",)),
    "random": (_ex_random, ("_random",)),
    "secrets": (_ex_secrets, ("_random",)),
    "base64": (_ex_base64, ("binascii",)),
    "binascii": (_ex_binascii, ("binascii",)),
    "heapq": (_ex_heapq, ("_heapq",)),
    "bisect": (_ex_bisect, ("_bisect",)),
    "functools": (_ex_functools, ("_functools",)),
    "itertools": (_ex_itertools, ("itertools",)),
    "operator": (_ex_operator, ("_operator",)),
    "math": (_ex_math, ("math",)),
    "cmath": (_ex_cmath, ("cmath",)),
    "collections": (_ex_collections, ("_collections",)),
    "xml.etree.ElementTree": (_ex_xml_etree_ElementTree, ("_elementtree", "pyexpat")),
    "html.parser": (_ex_html_parser, ()),
    "urllib.parse": (_ex_urllib_parse, ()),
    "urllib.request": (_ex_urllib_request, ("_datetime",)),
    "http.client": (_ex_http_client, ("_datetime",)),
    "json": (_ex_json, ("_json",)),
    "re": (_ex_re, ("_sre",)),
    "pickle": (_ex_pickle, ("_pickle",)),
    "decimal": (_ex_decimal, ("_decimal",)),
    "datetime": (_ex_datetime, ("_datetime",)),
    "zoneinfo": (_ex_zoneinfo, ("_zoneinfo", "_datetime")),
    "statistics": (_ex_statistics, ("_statistics",)),
    "hashlib": (_ex_hashlib, ("_hashlib", "_blake2")),
    "hmac": (_ex_hmac, ("_hashlib",)),
    "asyncio": (_ex_asyncio, ("_asyncio",)),
    "subprocess": (_ex_subprocess, ("_posixsubprocess",)),
    "threading": (_ex_threading, ("_thread",)),
    "queue": (_ex_queue, ("_queue",)),
    "io": (_ex_io, ("_io",)),
    "pathlib": (_ex_pathlib, ()),
    "tempfile": (_ex_tempfile, ()),
    "shutil": (_ex_shutil, ()),
    "textwrap": (_ex_textwrap, ()),
    "string": (_ex_string, ("_string",)),
    "difflib": (_ex_difflib, ()),
    "pprint": (_ex_pprint, ()),
    "copy": (_ex_copy, ()),
    "weakref": (_ex_weakref, ("_weakref",)),
    "contextvars": (_ex_contextvars, ("_contextvars",)),
    "ctypes": (_ex_ctypes, ("_ctypes",)),
    "readline": (_ex_readline, ("readline",)),
    "curses": (_ex_curses, ("_curses",)),
    "cProfile": (_ex_cProfile, ("_lsprof",)),
    "tracemalloc": (_ex_tracemalloc, ("_tracemalloc",)),
    "faulthandler": (_ex_faulthandler, ("faulthandler",)),
}


def exercise_stdlib(name):
    """Run the exercise of stdlib module `name`: (its value, the C modules it left loaded)."""
    fn, accelerators = STDLIB_EXERCISES[name]
    value = fn()
    loaded = tuple(a for a in accelerators if sys.modules.get(a) is not None)
    return value, loaded


def keyword_calls():
    """Keyword calls of C functions and methods of extension modules (3.12.1's gh-119213)."""
    import binascii
    import math
    import queue
    import zlib

    q = queue.SimpleQueue()
    q.put(1)
    return (
        math.isclose(1.0, 1.0, rel_tol=0.1),
        zlib.compress(b"x", level=1),
        binascii.b2a_base64(b"x", newline=False),
        q.get(block=False),
        zlib.decompressobj().decompress(zlib.compress(b"abc"), max_length=2),
    )
