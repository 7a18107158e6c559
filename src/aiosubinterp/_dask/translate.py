"""Dask's task objects as calls and expressions an interpreter can run.

In the main interpreter, running no user code: a plain task becomes
``fn(*args, **kwargs)`` with its dependencies filled in; anything nested
becomes a tuple expression that ``aiosubinterp._inside.daskwork`` evaluates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dask import _task_spec as _spec

from aiosubinterp._inside import daskwork as _daskwork

__all__ = ["task_call", "to_expression"]

_CONTAINERS: dict[type, str] = {_spec.List: "l", _spec.Tuple: "t", _spec.Set: "s"}


class _Untranslatable(TypeError):
    pass


def _is_shallow(arg: object) -> bool:
    """True if arg is resolved without calling any user function (a ref, a value, a container)."""
    if isinstance(arg, (_spec.TaskRef, _spec.Alias, _spec.DataNode)):
        return True
    if isinstance(arg, _spec.NestedContainer):
        return (type(arg) in _CONTAINERS or type(arg) is _spec.Dict) and all(
            _is_shallow(a) for a in arg.args
        )
    return not isinstance(arg, _spec.GraphNode)


def _resolve(arg: object, data: dict[Any, Any]) -> object:
    """The value of a shallow argument, as dask's Task.__call__ would compute it."""
    if isinstance(arg, _spec.TaskRef):
        return data[arg.key]
    if isinstance(arg, _spec.GraphNode):
        return arg({k: data[k] for k in arg.dependencies})
    return arg


def to_expression(node: Any, data: dict[Any, Any], local: bool = False) -> tuple[Any, ...]:
    """The aiosubinterp._inside.daskwork expression that computes node.

    ``data`` holds the values of the keys the task depends on. With
    ``local``, references are to keys of the enclosing fused subgraph and
    stay references ("r"); otherwise they are replaced by their values.
    """
    if isinstance(node, _spec.TaskRef):
        return ("r", node.key) if local else ("v", data[node.key])
    if not isinstance(node, _spec.GraphNode):
        return ("v", node)
    if isinstance(node, _spec.Alias):
        return ("r", node.target) if local else ("v", data[node.target])
    if isinstance(node, _spec.DataNode):
        return ("v", node.value)
    task: Any = node  # a Task (or container): isinstance narrowing would hide its fields
    kind = type(task)
    if kind in _CONTAINERS:
        return (_CONTAINERS[kind], tuple(to_expression(a, data, local) for a in task.args))
    if kind is _spec.Dict:
        items = task.args
        return (
            "d",
            tuple(
                (to_expression(items[i], data, local), to_expression(items[i + 1], data, local))
                for i in range(0, len(items), 2)
            ),
        )
    if kind is _spec.Task and task.func is _spec._execute_subgraph:
        inner, outkey, inkeys, *deps = task.args
        graph = {key: to_expression(sub, data, True) for key, sub in inner.items()}
        return (
            "g",
            graph,
            outkey,
            tuple(inkeys),
            tuple(to_expression(d, data, local) for d in deps),
        )
    if kind is _spec.Task:
        return (
            "c",
            task.func,
            tuple(to_expression(a, data, local) for a in task.args),
            tuple((k, to_expression(v, data, local)) for k, v in task.kwargs.items()),
        )
    raise _Untranslatable(
        f"aiosubinterp cannot run a dask {kind.__module__}.{kind.__qualname__} task in an "
        "interpreter; run it on the worker's default executor (do not annotate it with "
        "the interpreter executor)"
    )


def task_call(
    task: Any, data: dict[Any, Any]
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """(fn, args, kwargs) to send to an interpreter for a dask task."""
    if (
        type(task) is _spec.Task
        and task.func is not _spec._execute_subgraph
        and all(_is_shallow(a) for a in task.args)
        and all(_is_shallow(v) for v in task.kwargs.values())
    ):
        args = tuple(_resolve(a, data) for a in task.args)
        kwargs = {k: _resolve(v, data) for k, v in task.kwargs.items()}
        return task.func, args, kwargs
    return _daskwork.evaluate, (to_expression(task, data),), {}
