"""What a Dask task becomes inside an interpreter: a call, or a small expression to evaluate.

Worker-side module: imported inside interpreters, so it must not import
asyncio, nor dask or distributed (they pull in C extensions that refuse
subinterpreters, and they are not needed: aiosubinterp._dask.translate translates
dask's task objects in the main interpreter into the plain tuples below).

Expressions (nested tuples, built by ``aiosubinterp._dask.translate.to_expression``):

    ("v", value)                       a value
    ("r", key)                         the value of a key of the enclosing subgraph
    ("c", fn, (expr, ...), ((name, expr), ...))   fn(*args, **kwargs)
    ("l" | "t" | "s", (expr, ...))     a list, tuple or set of the values
    ("d", ((kexpr, vexpr), ...))       a dict
    ("g", {key: expr}, outkey, (inkey, ...), (expr, ...))
                                       a fused subgraph: the inkeys are bound to
                                       the values of the last exprs, and the
                                       value of outkey is computed
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["call_pickled", "evaluate"]


def evaluate(expr: tuple[Any, ...]) -> Any:
    """The value of a task expression (see the module docstring)."""
    return _eval(expr, None)


def _eval(expr: tuple[Any, ...], scope: _Scope | None) -> Any:
    tag = expr[0]
    if tag == "v":
        return expr[1]
    if tag == "c":
        args = [_eval(a, scope) for a in expr[2]]
        if expr[3]:
            return expr[1](*args, **{name: _eval(v, scope) for name, v in expr[3]})
        return expr[1](*args)
    if tag == "r":
        if scope is None:
            raise RuntimeError(f"task expression refers to {expr[1]!r} outside a subgraph")
        return scope.get(expr[1])
    if tag == "l":
        return [_eval(a, scope) for a in expr[1]]
    if tag == "t":
        return tuple(_eval(a, scope) for a in expr[1])
    if tag == "s":
        return {_eval(a, scope) for a in expr[1]}
    if tag == "d":
        return {_eval(k, scope): _eval(v, scope) for k, v in expr[1]}
    if tag == "g":
        _, graph, outkey, inkeys, deps = expr
        bound = {k: _eval(d, scope) for k, d in zip(inkeys, deps, strict=True)}
        return _Scope(graph, bound).get(outkey)
    raise ValueError(f"unknown task expression tag {tag!r}")


class _Scope:
    """The keys of one fused subgraph, each computed at most once, on demand."""

    __slots__ = ("done", "graph")

    def __init__(self, graph: dict[Any, Any], bound: dict[Any, Any]) -> None:
        self.graph = graph
        self.done = bound

    def get(self, key: Any) -> Any:
        try:
            return self.done[key]
        except KeyError:
            pass
        try:
            expr = self.graph[key]
        except KeyError:
            raise RuntimeError(f"task expression: key {key!r} is not in its subgraph") from None
        value = self.done[key] = _eval(expr, self)
        return value


def call_pickled(blob: bytes) -> Any:
    """Call the (fn, args, kwargs) that cloudpickle packed into blob.

    For functions that cannot cross by name: lambdas, closures, and functions
    of a Dask client's script, which Dask ships by value. Unpickling them
    imports cloudpickle (pure Python) in this interpreter.
    """
    fn, args, kwargs = pickle.loads(blob)
    return fn(*args, **kwargs)
