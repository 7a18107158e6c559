"""A Dask worker preload: the worker gets an interpreter executor when it starts.

    dask worker SCHEDULER --nthreads 8 --preload aiosubinterp.dask_preload
    dask worker SCHEDULER --preload aiosubinterp.dask_preload \\
        --interpreters 8 --interpreters-name interpreters --interpreters-default

Then tasks run in the worker's interpreters under
``dask.annotate(executor="interpreters")`` (or every task, with
``--interpreters-default``). ``Worker(preload=["aiosubinterp.dask_preload"])``
and ``LocalCluster(preload=[...])`` do the same from Python. See
aiosubinterp.DaskInterpreterPlugin for the same thing as a worker plugin.

Main-interpreter module: imported by Dask workers, never by interpreters.
"""

from __future__ import annotations

import click

from aiosubinterp._dask.executor import install_executor, uninstall_executor

__all__ = ["dask_setup", "dask_teardown"]

_NAMES: dict[int, str] = {}


@click.command()
@click.option(
    "--interpreters-name",
    "name",
    default="interpreters",
    show_default=True,
    help="Name of the executor, for dask.annotate(executor=NAME).",
)
@click.option(
    "--interpreters",
    "size",
    type=click.IntRange(min=1),
    default=None,
    help="Interpreters per worker [default: the worker's --nthreads].",
)
@click.option(
    "--interpreters-default",
    "default",
    is_flag=True,
    help="Also make it the worker's default executor (pure-Python tasks only).",
)
def dask_setup(worker: object, name: str, size: int | None, default: bool) -> None:
    """Install a DaskInterpreterExecutor in the worker."""
    install_executor(worker, name, size=size, default=default)  # type: ignore[arg-type]
    _NAMES[id(worker)] = name


def dask_teardown(worker: object) -> None:
    """Shut the executor down when the worker closes."""
    name = _NAMES.pop(id(worker), None)
    if name is not None:
        uninstall_executor(worker, name)  # type: ignore[arg-type]
