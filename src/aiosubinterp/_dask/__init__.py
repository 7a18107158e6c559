"""Dask distributed, in both directions: one module per direction.

- ``executor``: inside Dask, interpreters run a Dask worker's tasks;
- ``translate``: what that executor sends (Dask's task objects as calls);
- ``pool``: in front of Dask, ``DaskPool``.

Inside Dask: ``DaskInterpreterExecutor`` is an executor a Dask worker can run
its tasks on; ``DaskInterpreterPlugin`` (or the ``aiosubinterp.dask_preload``
module) installs one in every worker. In front of Dask: ``DaskPool(client)``
has InterpreterPool's async API and runs the calls on a Dask cluster.

How a Dask worker calls a non-thread executor (distributed >= 2025.1):
``loop.run_in_executor(executor, _run_task_simple, task, data, delay)``,
where ``task`` is a ``dask._task_spec`` graph node and ``data`` maps the keys
it depends on to their values. Neither that wrapper nor the task object can
run in an interpreter (distributed imports C extensions that refuse
subinterpreters), so the executor translates them here, in the main
interpreter and without running any user code: a plain task becomes
``fn(*args, **kwargs)`` with its dependencies filled in, anything nested
(containers of tasks, fused subgraphs) becomes a tuple expression that
``aiosubinterp._inside.daskwork`` evaluates in the interpreter. Only the user's
functions and values cross. The message the worker expects back is built by
distributed's own ``_run_task_simple``, around the outcome.

Functions that cannot cross by name (lambdas, closures, functions of the
client's script, which Dask ships by value) cross by value with cloudpickle,
as Dask itself ships them.

Main-interpreter package: imports distributed, never imported by workers.
Importing it fails at once, with what to install, without dask and distributed.
"""

try:
    import cloudpickle  # type: ignore[import-untyped]  # noqa: F401
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError as exc:  # pragma: no cover - the test command installs them
    raise ImportError(
        f"aiosubinterp's Dask integration needs dask and distributed ({exc}): "
        "pip install 'dask[distributed]'"
    ) from exc
