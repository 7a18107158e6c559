"""Source rules: explicit thread-state switches in ext/, each one explained; no import cycle."""

from __future__ import annotations

import os
import pathlib
import re

EXT = pathlib.Path(__file__).resolve().parent.parent / "ext"
SOURCES = sorted(p for p in EXT.rglob("*") if p.suffix in {".pyx", ".pxi", ".pxd", ".h"})
SWITCHES = re.compile(
    r"^\s*(?:\w+\s*=\s*)?(PyThreadState_Swap|PyEval_RestoreThread|PyEval_SaveThread|"
    r"PyThreadState_DeleteCurrent|Py_NewInterpreterFromConfig|Py_EndInterpreter|with nogil)\b"
)


def test_sources_found():
    assert any(p.name == "_core.pyx" for p in SOURCES)
    assert len(SOURCES) >= 8


def _code(path: pathlib.Path) -> str:
    """The source without comments (they may name what is forbidden)."""
    marker = "//" if path.suffix == ".h" else "#"
    return "\n".join(line.split(marker, 1)[0] for line in path.read_text().splitlines())


def test_no_gilstate_and_no_with_gil():
    for path in SOURCES:
        text = _code(path)
        assert "PyGILState_" not in text, f"{path.name}: PyGILState_* picks the wrong interpreter"
        assert not re.search(r"\bwith\s+gil\b", text), f"{path.name}: `with gil` is forbidden"


def test_every_thread_state_switch_has_a_gil_comment():
    missing = []
    for path in SOURCES:
        if path.suffix in {".pxd", ".h"}:
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not SWITCHES.search(line):
                continue
            context = "\n".join(lines[max(0, i - 3) : i + 1])
            if "# GIL:" not in context:
                missing.append(f"{path.name}:{i + 1}: {line.strip()}")
    assert not missing, "thread-state switches without a `# GIL:` comment:\n" + "\n".join(missing)


# Raised at their site, outside errors.pxi: argument checks (errors.pxi's
# header states the rule). EndNotPicklableError is a TypeError (channel.pxi).
ARGUMENT_ERRORS = {"TypeError", "ValueError", "EndNotPicklableError"}


def test_c_failures_become_exceptions_only_in_errors_pxi():
    outside = []
    for path in SOURCES:
        if path.suffix not in {".pyx", ".pxi"} or path.name == "errors.pxi":
            continue
        for i, line in enumerate(_code(path).splitlines()):
            match = re.search(r"\braise\s+([A-Za-z_]\w*)", line)
            if match and match.group(1) not in ARGUMENT_ERRORS:
                outside.append(f"{path.name}:{i + 1}: {line.strip()}")
    assert not outside, "raise through a raise_* helper of errors.pxi:\n" + "\n".join(outside)


def test_the_built_module_bounds_cythons_module_state_lookup():
    # setup.py adds the bounds check Cython's per-interpreter module lookup
    # lacks (a new interpreter's first import of _core read one entry past
    # the table and failed at random with "has already been imported into
    # this interpreter"). The C file the extension was built from has it.
    import ast

    tree = ast.parse((EXT.parent / "setup.py").read_text())
    fixes = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_LOOKUP_FIXES"
    )
    assert len(fixes) == 2
    generated = EXT / "_core.c"
    assert generated.exists(), "ext/_core.c is made by the build (make venv); build first"
    text = generated.read_text()
    for _, fixed in fixes:
        assert fixed in text, f"ext/_core.c lacks {fixed.strip()!r}: see setup.py"


def test_the_built_module_never_takes_the_gil_by_pygilstate():
    # Cython makes a nogil function take the GIL with PyGILState_Ensure to
    # raise (a zero-division check, an unraisable error): that takes the main
    # interpreter's GIL from a worker's thread. ext/ must leave no such path
    # (recv_try_locked's `%` did, before cdivision).
    text = (EXT / "_core.c").read_text()
    assert "__Pyx_PyGILState_Ensure()" not in text
    assert not re.search(r"__Pyx_WriteUnraisable\([^;]*, 1\);", text)


def _package_imports(path: pathlib.Path) -> set[str]:
    """aiosubinterp modules path imports at its top level (not in functions or `if` blocks)."""
    import ast

    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiosubinterp"):
            # `from aiosubinterp.demo import circles` imports the package and,
            # if circles is a module, that module too.
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("aiosubinterp."))
    return found


def test_no_import_cycle_between_the_package_modules():
    # Imports inside functions and `if TYPE_CHECKING:` blocks do not count:
    # they run after both modules exist.
    package = EXT.parent / "src" / "aiosubinterp"
    # Subpackages too (aiosubinterp.demo.zoo); a package is named by its __init__.py.
    modules = {
        ".".join(("aiosubinterp", *p.relative_to(package).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): p
        for p in package.rglob("*.py")
        if p.relative_to(package).parts != ("__init__.py",)
    }
    assert "aiosubinterp.demo.zoo" in modules and "aiosubinterp.demo" in modules
    graph = {name: _package_imports(path) & modules.keys() for name, path in modules.items()}
    done: set[str] = set()

    def walk(name: str, stack: list[str]) -> list[str] | None:
        if name in stack:
            return [*stack[stack.index(name) :], name]
        if name in done:
            return None
        for dep in sorted(graph[name]):
            found = walk(dep, [*stack, name])
            if found:
                return found
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = walk(name, [])
        assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Files a reader of this repository cannot open (the developers' machine,
# documents kept outside the repository) and issue numbers of a tracker that
# is not public: a source file states the facts themselves instead.
UNREADABLE_REFERENCE = re.compile(
    r"/work/|\.\./shared|\b(?:research|reviews)/[\w.-]+\.md|DESIGN\.md|\b[Ii]ssue #?\d+\b"
)
# Kept as they are: the changelog and the benchmark log record history.
HISTORY = {
    "CHANGELOG.md",
    "benchmarks/README.md",
    "docs/benchmarks.md",
    "tests/test_sourcecode.py",
}  # and this file, which spells the patterns out


# Folders of the tree that are not the project's sources (see .gitignore).
NOT_SOURCES = {
    "build",
    "dist",
    "site",
    "out",
    "venv",
    "__pycache__",
    "aiosubinterp-demo",
    "aiosubinterp-bench",
}


def _project_files(root: pathlib.Path):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not (d.startswith(".") or d in NOT_SOURCES or d.endswith(".egg-info"))
        )
        for name in sorted(files):
            yield pathlib.Path(folder, name)


def test_sources_name_no_reference_a_reader_cannot_open():
    root = EXT.parent
    suffixes = {".py", ".pyx", ".pxi", ".pxd", ".h", ".md", ".toml", ".sh", ".cfg", ".yml"}
    found = []
    checked = 0
    for path in _project_files(root):
        name = path.relative_to(root).as_posix()
        if name in HISTORY or path.suffix not in suffixes:
            continue
        checked += 1
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if UNREADABLE_REFERENCE.search(line) and "uvloop issue" not in line:
                found.append(f"{name}:{lineno}: {line.strip()}")
    assert checked > 100, checked  # the walk found the project
    assert not found, "\n".join(found)


def test_modules_are_imported_under_their_own_names():
    # `from aiosubinterp.X import mod as _mod`: a reader finds the module by the
    # name the code uses (no `hub as _loop` left over from an older layout).
    package = EXT.parent / "src" / "aiosubinterp"
    pattern = re.compile(r"from aiosubinterp(?:\.[\w.]+)? import (\w+) as (\w+)")
    wrong = []
    for path in sorted(package.rglob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for name, alias in pattern.findall(line):
                if alias not in (name, "_" + name):
                    wrong.append(f"{path.relative_to(package.parent)}:{lineno}: {name} as {alias}")
    assert not wrong, "\n".join(wrong)


# CPython's private hooks the executor needs, each with why: nothing public does it.
EXECUTOR_PRIVATE_READS = {
    # Runs before non-daemon threads are joined and before atexit hooks, as
    # concurrent.futures.thread's own exit wait does.
    "threading._register_atexit",
}


def test_the_executor_reads_no_private_attribute_of_another_object():
    # The executor drives the interpreter engine through the public names of
    # its _ExecutorEngine (broken, closed_future, enqueue, withdraw, ...): it
    # does not read `engine._state`, `task._x` and the like, so the engine's
    # internals can change without the executor noticing only at run time.
    import ast

    path = EXT.parent / "src" / "aiosubinterp" / "_engine" / "executor.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if ast.unparse(node) not in EXECUTOR_PRIVATE_READS:
            found.append(f"executor.py:{node.lineno}: {ast.unparse(node)}")
    assert not found, (
        "executor.py reads private attributes of other objects; give the object a public "
        "name for what the executor needs (a property or method of _ExecutorEngine, the "
        "executor's Future or hub.ThreadHub) and use that:\n" + "\n".join(found)
    )


# The loop callbacks _process/ schedules that are not results, each with why.
PROCESS_LOOP_CALLBACKS = {
    # The channel service's own loop, stopped from the thread closing the pool.
    ("endservice.py", "loop.stop"),
    # Inside a worker process: a cancellation request reaching the job's own loop.
    ("worker.py", "task.cancel"),
}


def test_process_results_reach_their_callers_through_the_loops_hub():
    # One road back to the caller: a ProcessPool's reader thread hands each
    # result to the submitting loop's hub (LoopHub.post), which delivers a
    # burst of them on one wakeup, as the interpreter backends' completions
    # are. A call_soon_threadsafe per result would be a second road (one
    # wakeup per result, and the hub's shutdown would not see it).
    import ast

    folder = EXT.parent / "src" / "aiosubinterp" / "_process"
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "call_soon_threadsafe"
            ):
                continue
            callback = ast.unparse(node.args[0]) if node.args else ""
            if (path.name, callback) not in PROCESS_LOOP_CALLBACKS:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, (
        "_process/ hands something to a loop with call_soon_threadsafe; a task's result "
        "goes through the loop's hub (LoopHub.post), anything else is listed with its "
        "reason in PROCESS_LOOP_CALLBACKS:\n" + "\n".join(found)
    )
