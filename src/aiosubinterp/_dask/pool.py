"""In front of Dask: DaskPool has InterpreterPool's async API and runs calls on a cluster."""

from __future__ import annotations

import asyncio
import functools
import traceback
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

import dask
import distributed

from aiosubinterp._dask.executor import stop_frame_sampling
from aiosubinterp._engine import hub as _hub
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._engine.task import Task
from aiosubinterp._errors import ExecutionFailed, NotShareableError, PoolClosedError

__all__ = ["DaskPool"]


async def _gather(client: distributed.Client, future: distributed.Future[Any]) -> Any:
    return await client.gather(future, asynchronous=True)  # type: ignore[no-untyped-call]


def _remote_error(exc: BaseException) -> BaseException:
    """As InterpreterPool raises them: the task's own exception, caused by an ExecutionFailed.

    The traceback that distributed attached (the worker's frames, then the
    client's gather machinery) becomes the ExecutionFailed's text and is
    dropped from the exception: its frames hold the Dask future, which would
    keep the task's result alive on the cluster as long as the exception lives.
    """
    if isinstance(exc, asyncio.CancelledError):
        return exc
    cause = exc.__cause__
    if not isinstance(cause, ExecutionFailed) and not isinstance(exc, ExecutionFailed):
        tp = type(exc)
        type_name = f"{tp.__module__}.{tp.__qualname__}"
        tb_text = "".join(traceback.format_exception(exc))
        message = str(exc)
        exc.__cause__ = ExecutionFailed(
            f"{type_name}: {message}" if message else type_name, type_name, tb_text
        )
    return exc.with_traceback(None)


class DaskPool:
    """InterpreterPool's async API (run, submit, map) on a Dask cluster.

    Args:
        client: a connected ``distributed.Client``: an asynchronous one
            (``await Client(address, asynchronous=True)``) created on the
            loop that uses the pool, or a synchronous one (whose loop runs in
            its own thread). The pool does not close it.
        executor: the name of the executor the calls run on in each worker,
            such as ``"interpreters"`` when the workers have
            DaskInterpreterPlugin; None (default) is the worker's default
            executor (threads).

    Code written against InterpreterPool runs on a cluster by swapping the
    pool object. The differences: functions and arguments travel the Dask
    way (cloudpickle, so lambdas work), every call is a Dask task with a
    unique key (calls are never merged, as ``pure=False``), results are
    copied back from the workers, and closing the pool leaves the client and
    the cluster running.

    Thread-safety: use a pool from the event loop's thread; each task belongs
    to the loop that submitted it.
    """

    def __init__(self, client: distributed.Client, *, executor: str | None = None) -> None:
        if not isinstance(client, distributed.Client):
            raise TypeError(
                f"DaskPool needs a distributed.Client, got {type(client).__name__}: create one "
                "with distributed.Client(address) or Client(cluster) (asynchronous=True in async "
                "code) and pass it"
            )
        if executor is not None and (not isinstance(executor, str) or not executor):
            raise TypeError(f"executor must be None or an executor name (str), got {executor!r}")
        if client.status in ("closing", "closed"):
            raise ValueError(f"DaskPool got a closed client ({client!r}): pass an open Client")
        # This process may run interpreters too (and a LocalCluster's scheduler).
        stop_frame_sampling()
        self._client = client
        self._executor = executor
        self._closed = False
        # Task -> (its Dask future, the relay that gathers its result)
        self._inflight: dict[Task, tuple[distributed.Future[Any], asyncio.Future[Any]]] = {}
        self._cancels: set[asyncio.Future[Any]] = set()
        self._submitted = 0

    @property
    def client(self) -> distributed.Client:
        """The Dask client the calls go through."""
        return self._client

    @property
    def closed(self) -> bool:
        return self._closed

    def _client_loop(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        client = self._client
        if client.status in ("closing", "closed"):
            raise PoolClosedError(
                "the Dask client of this DaskPool is closed: create a pool on an open Client"
            )
        try:
            io_loop = client.loop
        except RuntimeError:
            io_loop = None
        client_loop = getattr(io_loop, "asyncio_loop", None)
        if client_loop is None or client.status != "running":
            raise RuntimeError(
                f"the Dask client of this DaskPool has not connected (status {client.status!r}): "
                "`await` an asynchronous Client before using the pool"
            )
        if client_loop is not loop and not client_loop.is_running():
            raise RuntimeError(
                "the Dask client of this DaskPool belongs to another event loop, which is not "
                "running: create the Client (asynchronous=True) on the loop that uses the pool, "
                "or use a synchronous Client"
            )
        return client_loop  # type: ignore[no-any-return]

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        """Schedule fn(*args, **kwargs) on the cluster; return its Task at once.

        The Task is an ``asyncio.Future``: await it for the result;
        ``cancel()`` cancels the Dask task too. Raises TypeError if fn is not
        callable, NotShareableError if Dask cannot serialize the call,
        PoolClosedError after close() or once the client closed.
        """
        loop = _hub.running_loop("DaskPool.submit()")
        if self._closed:
            raise PoolClosedError("this DaskPool is closed: create a new one to run more work")
        if not callable(fn):
            raise TypeError(f"DaskPool: expected a callable to run, got {type(fn).__name__} {fn!r}")
        client_loop = self._client_loop(loop)
        call = functools.partial(fn, **kwargs) if kwargs else fn
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        try:
            if self._executor is not None:
                with dask.annotate(executor=self._executor):  # type: ignore[attr-defined]
                    dfut = self._client.submit(call, *args, pure=False)
            else:
                dfut = self._client.submit(call, *args, pure=False)
        except Exception as exc:
            text = str(exc).lower()
            if isinstance(exc, TypeError) and ("pickl" in text or "serializ" in text):
                raise NotShareableError(
                    f"Dask cannot send the call {name}() to the cluster: "
                    f"{type(exc).__name__}: {exc}. Pass picklable arguments."
                ) from exc
            raise
        task = Task(loop, self, _lifecycle.next_task_id(), name, None)
        if client_loop is loop:
            relay: asyncio.Future[Any] = loop.create_task(_gather(self._client, dfut))
        else:
            relay = asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(_gather(self._client, dfut), client_loop),
                loop=loop,
            )
        self._inflight[task] = (dfut, relay)
        relay.add_done_callback(functools.partial(self._settle, task))
        self._submitted += 1
        return task

    def _settle(self, task: Task, relay: asyncio.Future[Any]) -> None:
        # Dropping the Dask future releases the task's result on the cluster.
        self._inflight.pop(task, None)
        exc = None if relay.cancelled() else relay.exception()
        if task.done():  # cancelled: the relay ended with Dask's cancellation error
            return
        if relay.cancelled():
            asyncio.Future[Any].cancel(task)
            return
        if exc is not None:
            task.set_exception(_remote_error(exc))
        else:
            task.set_result(relay.result())

    def _cancel_task(self, task: Task) -> None:
        # Called by Task.cancel() on the loop thread, before the Task is marked cancelled.
        # The relay is not cancelled (distributed's gather does not expect that):
        # it ends with Dask's cancellation error once the cancel reached the client.
        entry = self._inflight.get(task)
        if entry is None:
            return
        dfut, _ = entry
        try:
            client_loop = self._client_loop(task.get_loop())
        except RuntimeError:  # the client closed or stopped: its tasks are gone with it
            return
        loop = task.get_loop()
        coro = self._client.cancel(  # type: ignore[no-untyped-call]
            [dfut], asynchronous=True, reason="DaskPool task cancelled"
        )
        if client_loop is loop:
            done: asyncio.Future[Any] = loop.create_task(coro)
        else:
            done = asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(coro, client_loop), loop=loop
            )
        self._cancels.add(done)
        done.add_done_callback(self._cancel_done)

    def _on_retired(self, serial: int) -> None:
        """TaskOwner: a no-op here (the cluster manages its own workers)."""

    def _cancel_done(self, done: asyncio.Future[Any]) -> None:
        self._cancels.discard(done)
        if not done.cancelled():
            done.exception()  # the cluster went away meanwhile: nothing left to cancel

    async def run(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Any:
        """Run fn(*args, **kwargs) on the cluster and return its result.

        Exceptions come back with their own type, caused by an ExecutionFailed
        that carries the remote traceback.

        Cancellation: the Dask task is cancelled (a running task still runs to
        its end on its worker: Dask does not interrupt running tasks).
        """
        return await self.submit(fn, *args, **kwargs)

    def map(
        self,
        fn: Callable[..., object],
        iterable: Iterable[Any] | AsyncIterable[Any],
        *,
        ordered: bool = True,
        window: int | None = None,
    ) -> AsyncIterator[Any]:
        """Yield fn(item) for every item, computed on the cluster.

        At most ``window`` calls are in flight (default 64), so a long or
        endless iterable streams. With ``ordered=False`` results come as they
        finish. The first failure is raised at its place and the calls still
        in flight are cancelled.

        Cancellation: closing or cancelling the iteration cancels every call in flight.
        """
        return _lifecycle.windowed_map(
            self.submit, fn, iterable, ordered=ordered, window=64 if window is None else window
        )

    def close(self) -> None:
        """Accept no more calls; those submitted still run. Idempotent; the client stays open."""
        self._closed = True

    async def aclose(self) -> None:
        """Close, and wait until the calls submitted so far have finished.

        Cancellation: the calls still in flight are cancelled.
        """
        self.close()
        pending = dict(self._inflight)
        try:
            if pending:
                await asyncio.wait([relay for _, relay in pending.values()])
        except asyncio.CancelledError:
            for task in pending:
                task.cancel()
            raise
        if self._cancels:
            await asyncio.wait(list(self._cancels))

    async def __aenter__(self) -> DaskPool:
        _hub.running_loop("async with DaskPool(...)")
        if self._closed:
            raise PoolClosedError("this DaskPool is closed: create a new one")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def statistics(self) -> dict[str, int | str]:
        """A snapshot: state, submitted, in flight."""
        return {
            "state": "closed" if self._closed else "open",
            "submitted": self._submitted,
            "inflight": len(self._inflight),
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<aiosubinterp.DaskPool {self._client!r} {state}>"
