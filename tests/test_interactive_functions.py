"""Functions defined where no worker can import them cross by value (cloudpickle).

A function, lambda or closure defined in a Jupyter cell, the REPL, ``python -c``
or stdin has no module a worker could import: it is pickled with cloudpickle
(once per function object) and loaded in the worker by plain pickle.
Instances of classes defined there cross too (arguments, results, channel
items), their class by value, and come back as instances of main's class. The
scripts run in child processes (``python -c`` and ``python -``, as a user
would), on asyncio and on uvloop; one test runs a real Jupyter kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import outfuncs
import pytest
from childproc import ROOT, TESTS

from aiosubinterp._errors import NotShareableError
from aiosubinterp._inside import marshal

pytest.importorskip("cloudpickle")

LOOPS = ["asyncio", "uvloop"]

# Defines a function, a lambda and a closure where no worker can import them,
# and runs each in a pool on the loop named by argv[1].
SCRIPT = """
import asyncio, sys
import aiosubinterp

FACTOR = 3

def triple(x):
    print("worker printed", x, flush=True)
    return x * FACTOR

add_one = lambda x: x + 1

def adder(k):
    return lambda x: x + k

async def main():
    async with aiosubinterp.InterpreterPool(2) as pool:
        print("results", await pool.run(triple, 2), await pool.run(add_one, 2),
              await pool.run(adder(10), 2), [y async for y in pool.map(triple, range(4))])

if sys.argv[1] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


def run_python(
    args: list[str], *, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Python with args in a child, the project importable; timeout is a backstop for a freeze."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]))
    try:
        return subprocess.run(
            [sys.executable, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child froze (killed after {timeout} s): {exc.stdout!r} {exc.stderr!r}")


def needs_loop(loop: str) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")


def check_script_output(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "results 6 3 12 [0, 3, 6, 9]" in proc.stdout
    assert "worker printed 2" in proc.stdout


@pytest.mark.parametrize("loop", LOOPS)
def test_python_c(loop):
    needs_loop(loop)
    check_script_output(run_python(["-c", SCRIPT, loop]))


@pytest.mark.parametrize("loop", LOOPS)
def test_stdin(loop):
    needs_loop(loop)
    check_script_output(run_python(["-", loop], stdin=SCRIPT))


@pytest.mark.parametrize("loop", LOOPS)
def test_unpicklable_global_is_named(loop):
    needs_loop(loop)
    script = textwrap.dedent("""
        import asyncio, sys, threading
        import aiosubinterp

        guard = threading.Lock()

        def locked(x):
            with guard:
                return x

        async def main():
            async with aiosubinterp.InterpreterPool(1) as pool:
                try:
                    await pool.run(locked, 1)
                except aiosubinterp.NotShareableError as exc:
                    print("refused:", exc)

        if sys.argv[1] == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
    """)
    proc = run_python(["-c", script, loop])
    assert proc.returncode == 0, proc.stderr
    assert "refused: cannot send 'locked' by value" in proc.stdout
    assert "the global 'guard' (lock) cannot be pickled" in proc.stdout


def test_process_pool_and_executor():
    script = textwrap.dedent("""
        import asyncio
        import aiosubinterp

        K = 4
        times_k = lambda x: x * K

        def init():
            print("initializer ran", flush=True)

        async def main():
            async with aiosubinterp.ProcessPool(1) as pool:
                print("process", await pool.run(times_k, 2))

        asyncio.run(main())
        with aiosubinterp.InterpreterPoolExecutor(1, initializer=init) as ex:
            print("executor", list(ex.map(times_k, range(3))), ex.submit(lambda: K).result())
    """)
    proc = run_python(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert "process 8" in proc.stdout
    assert "executor [0, 4, 8] 4" in proc.stdout
    assert "initializer ran" in proc.stdout


def test_without_cloudpickle_the_error_says_how():
    script = textwrap.dedent("""
        import asyncio, sys
        sys.modules["cloudpickle"] = None  # as if not installed
        import aiosubinterp

        def f(x):
            return x

        async def main():
            async with aiosubinterp.InterpreterPool(1) as pool:
                try:
                    await pool.run(f, 1)
                except aiosubinterp.NotShareableError as exc:
                    print("refused:", exc)

        asyncio.run(main())
    """)
    proc = run_python(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert "defined in an interactive session" in proc.stdout
    assert "pip install cloudpickle" in proc.stdout


def interactive(source: str, namespace: dict[str, object] | None = None) -> dict[str, object]:
    """The namespace of source run as if typed at the REPL."""
    ns: dict[str, object] = {"__name__": "__main__", **(namespace or {})}
    exec(compile(textwrap.dedent(source), "<stdin>", "exec"), ns)
    return ns


def test_pickled_once_per_function_and_again_when_a_global_is_rebound():
    ns = interactive("""
        N = 2
        def times(x):
            return x * N
    """)
    fn = ns["times"]
    first = marshal.call_payload(fn, (1,), {})
    again = marshal.call_payload(fn, (2,), {})
    assert first[0] is None and type(first[1]) is bytes  # the target crosses as bytes
    assert again[1] is first[1]  # pickled once
    assert marshal.function_from_value(first[1])(5) == 10
    ns["N"] = 3  # the cell that sets it ran again
    changed = marshal.call_payload(fn, (1,), {})
    assert changed[1] is not first[1]
    assert marshal.function_from_value(changed[1])(5) == 15


def test_module_functions_still_cross_by_reference():
    payload = marshal.call_payload(outfuncs.say, ("x", 1), {})
    assert payload[:2] == ("outfuncs", "say")


def test_lambda_of_a_module_keeps_its_error():
    with pytest.raises(NotShareableError, match="cannot send the lambda"):
        marshal.call_payload(lambda x: x, (), {})


CELL = """
import logging
import aiosubinterp

logging.basicConfig(format="%(levelname)s:%(name)s:%(message)s", force=True)

def work(x):
    print(f"worker printed {x}")
    logging.getLogger("nb").warning("worker logged %s", x)
    return x * 2

class Box:
    def __init__(self, value):
        self.value = value

def doubled(box):
    return Box(box.value * 2)

async with aiosubinterp.InterpreterPool(1) as pool:
    result = await pool.run(work, 21)
    box = await pool.run(doubled, Box(4))
print("result", result)
print("box", box.value, type(box) is Box)
"""


# Runs in a child process: jupyter_client's blocking client leaves an event loop
# (an epoll fd and a socket pair) open in the process that used it.
KERNEL_CHILD = """
import json, os, sys
import jupyter_client
from jupyter_client.kernelspec import KernelSpecManager

kernels, cell = sys.argv[1], sys.stdin.read()
spec = os.path.join(kernels, "under-test")
os.makedirs(spec)
with open(os.path.join(spec, "kernel.json"), "w") as f:
    json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
               "display_name": "the Python under test", "language": "python"}, f)
km = jupyter_client.KernelManager(kernel_name="under-test",
                                  kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels]))
km.start_kernel(cwd=kernels)
kc = km.client()
kc.start_channels()
try:
    kc.wait_for_ready(timeout=120)  # backstops only: a kernel starts in about a second
    msg_id = kc.execute(cell)
    streams = {"stdout": "", "stderr": ""}
    errors = []
    while True:
        msg = kc.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            streams[content["name"]] += content["text"]
        elif kind == "error":
            errors.append("\\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=120)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=120)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(json.dumps({"streams": streams, "errors": errors, "status": reply["content"]["status"]}))
"""


def test_jupyter_kernel(tmp_path):
    """A cell defines a function and runs it in a pool; its prints and logs are the cell's.
    An instance of a class the cell defines crosses as an argument and comes back."""
    pytest.importorskip("ipykernel", reason="no ipykernel (tornado has no wheels for 3.13t)")
    pytest.importorskip("jupyter_client")
    proc = run_python(["-c", KERNEL_CHILD, str(tmp_path / "kernels")], stdin=CELL, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert not out["errors"], out["errors"]
    assert out["status"] == "ok"
    assert "worker printed 21" in out["streams"]["stdout"]
    assert "result 42" in out["streams"]["stdout"]
    assert "box 8 True" in out["streams"]["stdout"]  # an instance of a cell's class, both ways
    assert "WARNING:nb:worker logged 21" in out["streams"]["stderr"]


# Instances of classes defined where no worker can import them, as arguments
# (also nested, and keywords), as results and through channels; the class of
# what comes back is main's own, its methods untouched.
CLASSES = """
import asyncio, dataclasses, sys, threading
import aiosubinterp

FACTOR = 10

@dataclasses.dataclass
class Point:
    x: int
    y: int = 0

    def scaled(self):
        return Point(self.x * FACTOR, self.y * FACTOR)

def total(p, *, extra=None, many=(), by_key=None):
    values = [p, *(extra and [extra] or []), *many, *(by_key or {}).values()]
    return sum(v.scaled().x for v in values)

def make(n):
    return {"points": [Point(n, n + 1)], "one": Point(n).scaled()}

def relay(rx, tx):
    tx.send_sync(rx.recv_sync().scaled())

class Holder:
    def __init__(self):
        self.guard = threading.Lock()

async def main():
    scaled = Point.scaled
    async with aiosubinterp.InterpreterPool(2) as pool:
        print("args", await pool.run(total, Point(1), extra=Point(2), many=[Point(3)],
                                     by_key={"k": Point(4)}))
        made = await pool.run(make, 5)
        p, one = made["points"][0], made["one"]
        print("result", p, one, type(p) is Point, isinstance(one, Point),
              Point.scaled is scaled)
        print("rebound", await pool.run(total, p))
        to_worker, rx = aiosubinterp.open_channel(1)
        tx, from_worker = aiosubinterp.open_channel(1)
        relayed = pool.submit(relay, rx, tx)
        await to_worker.send(Point(8))
        got = await from_worker.recv()
        await relayed
        print("channel", got, type(got) is Point)
        try:
            await pool.run(total, Holder())
        except aiosubinterp.NotShareableError as exc:
            print("refused:", exc)
    with aiosubinterp.InterpreterPoolExecutor(1) as ex:
        got = ex.submit(make, 2).result()
        print("executor", ex.submit(total, Point(7)).result(), type(got["one"]) is Point)

if sys.argv[1] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


def check_classes_output(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "args 100" in proc.stdout
    assert "result Point(x=5, y=6) Point(x=50, y=0) True True True" in proc.stdout
    assert "rebound 50" in proc.stdout
    assert "channel Point(x=80, y=0) True" in proc.stdout
    assert "executor 70 True" in proc.stdout
    refused = [line for line in proc.stdout.splitlines() if line.startswith("refused:")]
    assert refused, proc.stdout
    assert "argument 0 of total() (Holder), at .guard (lock)" in refused[0]


@pytest.mark.parametrize("loop", LOOPS)
def test_instances_of_interactive_classes_python_c(loop):
    needs_loop(loop)
    check_classes_output(run_python(["-c", CLASSES, loop]))


@pytest.mark.parametrize("loop", LOOPS)
def test_instances_of_interactive_classes_stdin(loop):
    needs_loop(loop)
    check_classes_output(run_python(["-", loop], stdin=CLASSES))


def test_interactive_class_method_using_an_unpicklable_global_is_refused_clearly():
    script = textwrap.dedent("""
        import asyncio, threading
        import aiosubinterp

        guard = threading.Lock()

        class Counter:
            def bump(self):
                with guard:
                    return 1

        def bump(c):
            return c.bump()

        async def main():
            async with aiosubinterp.InterpreterPool(1) as pool:
                try:
                    await pool.run(bump, Counter())
                except aiosubinterp.NotShareableError as exc:
                    print("refused:", exc)

        asyncio.run(main())
    """)
    proc = run_python(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert "refused: cannot send" in proc.stdout
    assert "cannot be pickled" in proc.stdout and "lock" in proc.stdout


def test_instances_without_cloudpickle_the_error_says_how():
    script = textwrap.dedent("""
        import asyncio, sys
        sys.modules["cloudpickle"] = None  # as if not installed
        import aiosubinterp

        class Point:
            pass

        async def main():
            async with aiosubinterp.InterpreterPool(1) as pool:
                try:
                    await pool.run(print, [Point()])
                except aiosubinterp.NotShareableError as exc:
                    print("refused:", exc)

        asyncio.run(main())
    """)
    proc = run_python(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert "refused: cannot send a list" in proc.stdout
    assert "defined in an interactive session" in proc.stdout
    assert "pip install cloudpickle" in proc.stdout


def test_script_classes_still_cross_by_reference(tmp_path):
    """In a script (a file workers import), the plain pickle is kept: no cloudpickle."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent("""
        import asyncio, sys
        import aiosubinterp

        class Point:
            def __init__(self, x):
                self.x = x

        def double(p):
            return Point(p.x * 2)

        async def main():
            async with aiosubinterp.InterpreterPool(1) as pool:
                got = await pool.run(double, Point(4))
                print("result", got.x, type(got) is Point, "cloudpickle" in sys.modules)

        if __name__ == "__main__":
            asyncio.run(main())
    """)
    )
    proc = run_python([str(script)])
    assert proc.returncode == 0, proc.stderr
    assert "result 8 True False" in proc.stdout
