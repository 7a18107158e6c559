"""Context variables a pool carries to its workers (``context_vars=[request_id]``).

A ``contextvars.ContextVar`` object cannot cross to another interpreter: each
interpreter has its own module objects, so its own variable. A pool finds
each variable it is given once, at creation, as a module-level global
(module name + attribute name). At each submit, the values the caller's
context holds for them ride with the call as ((module, name, value), ...);
the worker imports that module, sets its own variable for the task's
duration and resets it after (aiosubinterp._inside.worker.Runner._enter).
A variable not set in the caller is not sent: it stays unset (at its
default) in the worker, where a pool with context_vars runs each task in a
copy of the worker's context (as an asyncio task runs), so nothing a task
sets outlives it.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterable
from typing import Any, cast

from aiosubinterp._errors import NotShareableError
from aiosubinterp._inside import marshal as _marshal

__all__ = ["Located", "explain", "locate", "values"]

# (variable, module name, attribute name) per context variable of a pool.
Located = tuple[tuple["contextvars.ContextVar[Any]", str, str], ...]

_MISSING: Any = object()


def locate(context_vars: Iterable[contextvars.ContextVar[Any]] | None, owner: str) -> Located:
    """Each variable with the module global that names it; a clear error if one has none.

    Raises TypeError for something that is not an iterable of ContextVar, and
    NotShareableError (a TypeError) for a variable no importable module holds.
    """
    if context_vars is None:
        return ()
    if isinstance(context_vars, contextvars.ContextVar):
        raise TypeError(
            f"{owner}(context_vars=...) takes a list of context variables, got the variable "
            f"{context_vars.name!r} itself: write context_vars=[{context_vars.name}]"
        )
    if isinstance(context_vars, str):
        raise TypeError(
            f"{owner}(context_vars=...) takes the contextvars.ContextVar objects themselves, "
            f"not names: got the string {context_vars!r}"
        )
    try:
        given = list(context_vars)
    except TypeError:
        raise TypeError(
            f"{owner}(context_vars=...) must be a list of contextvars.ContextVar, "
            f"got {type(context_vars).__name__}"
        ) from None
    unique: list[contextvars.ContextVar[Any]] = []
    for var in given:
        if not isinstance(var, contextvars.ContextVar):
            raise TypeError(
                f"{owner}(context_vars=...) must contain contextvars.ContextVar "
                f"objects, got {type(var).__name__} {var!r}"
            )
        if not any(var is seen for seen in unique):
            unique.append(var)
    if not unique:
        return ()
    found = _find_globals(unique)
    located = []
    for var in unique:
        where = found.get(id(var))
        if where is None:
            raise NotShareableError(
                f"{owner}(context_vars=...): the context variable {var.name!r} is not a "
                "global of any imported module, so a worker cannot find its own copy of it "
                "(a ContextVar object cannot cross interpreters; each worker sets the one of "
                "the same module and name). Define it at the top level of a module, "
                f"`{var.name} = contextvars.ContextVar({var.name!r})`, and pass that."
            )
        module, name = where
        if module == "__main__" and _marshal._main_is_interactive():
            raise NotShareableError(
                f"{owner}(context_vars=...): the context variable {var.name!r} is defined in an "
                "interactive session, which a worker interpreter cannot import. Define it in a "
                "module (a .py file) and import it from there."
            )
        located.append((var, module, name))
    return tuple(located)


def _find_globals(wanted: list[contextvars.ContextVar[Any]]) -> dict[int, tuple[str, str]]:
    """id(var) -> (module, attribute) of a module global holding it.

    Prefers a module other than the main script (the defining module, when the
    script imported the variable from it) and an attribute named like the
    variable; the attribute is looked for by the variable's name first, then
    (for those not found) by a scan of each module's globals.
    """
    by_id = {id(var): var for var in wanted}
    best: dict[int, tuple[int, str, str]] = {}  # id -> (rank, module, name), lowest rank wins

    def consider(var_id: int, module: str, name: str, named: bool) -> None:
        rank = (module in ("__main__", _marshal.MAIN_ALIAS)) * 2 + (not named)
        if var_id not in best or rank < best[var_id][0]:
            best[var_id] = (rank, "__main__" if module == _marshal.MAIN_ALIAS else module, name)

    modules = [(n, m) for n, m in list(sys.modules.items()) if m is not None]
    namespaces = []
    for module_name, module in modules:
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict:
            continue
        namespaces.append((module_name, namespace))
        for var in wanted:
            if namespace.get(var.name) is var:
                consider(id(var), module_name, var.name, True)
    missing = {i for i in by_id if i not in best or best[i][0] >= 2}
    if missing:
        for module_name, namespace in namespaces:
            for name, value in list(namespace.items()):
                if id(value) in missing and by_id[id(value)] is value and isinstance(name, str):
                    consider(id(value), module_name, name, name == value.name)
    return {i: (module, name) for i, (_, module, name) in best.items()}


def values(located: Located) -> tuple[tuple[str, str, Any], ...]:
    """The caller's values of the located variables set in its context (maybe none).

    Sent even when empty: the worker then runs the task in a context of its own,
    where the variables are unset whatever earlier tasks did.
    """
    out = []
    for var, module, name in located:
        value = var.get(_MISSING)
        if value is not _MISSING:
            out.append((module, name, value))
    return tuple(out)


def explain(sent: object) -> NotShareableError | None:
    """A NotShareableError naming the context variable whose value cannot cross, or None.

    sent: what values() returned for the call that would not encode.
    """
    from aiosubinterp import _core

    for module, name, value in cast("tuple[tuple[str, str, Any], ...]", sent):
        try:
            _core.dumps(value)
        except Exception as exc:  # noqa: BLE001 - any failure names the variable
            return NotShareableError(
                f"cannot send the value of the context variable {module}.{name} (in the "
                f"pool's context_vars) to an interpreter: it is a {type(value).__name__}, and "
                f"{type(exc).__name__}: {exc}. Values cross by copy: set the variable to plain "
                "data (str, int, a tuple, a picklable object) where the task is submitted, or "
                "leave it out of context_vars."
            )
    return None
