"""The .pyi stub and the compiled module name the same things."""

from __future__ import annotations

import ast
import pathlib

from aiosubinterp import _core

STUB = pathlib.Path(_core.__file__).with_name("_core.pyi")
# Module globals that are implementation details of the import, not API.
NOT_API = {"_atexit", "_marshal_module", "_sys"}


def _stub_names() -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(STUB.read_text())
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {
                n.name if isinstance(n, ast.FunctionDef) else n.target.id  # type: ignore[union-attr]
                for n in node.body
                if isinstance(n, ast.FunctionDef)
                or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            }
            # Dunders (buffer protocol, len, context manager) are typing aids:
            # compared on neither side.
            members[node.name] = {n for n in members[node.name] if not n.startswith("__")}
    return names, members


def test_stub_covers_the_module():
    names, _ = _stub_names()
    actual = {n for n in vars(_core) if not n.startswith("__")} - NOT_API
    assert names == actual, f"missing in stub: {actual - names}; not in module: {names - actual}"


def test_stub_classes_match():
    _, members = _stub_names()
    for cls, stub_members in members.items():
        real = {n for n in vars(getattr(_core, cls)) if not n.startswith("__")}
        assert stub_members == real, (
            f"{cls}: missing in stub {real - stub_members}, extra {stub_members - real}"
        )
