"""Main side of log forwarding: records from workers are handled by main's logging.

Each pool with ``forward_logging=True`` owns one LogConsumer: a bounded
channel whose send end each worker gets a clone of (see
aiosubinterp._inside.logs for what the worker sends), and one helper thread
that receives the records in order, rebuilds a LogRecord from each and hands
it to ``logging.getLogger(name).handle()``. A thread, not a task on a loop:
it works the same under asyncio, uvloop and the InterpreterPoolExecutor
(which has no loop), and a pool used from several loops has one consumer.

Warnings from workers come through the same channel (in order with the
records): each is passed to ``warnings.warn_explicit`` on that thread, with
a registry per module kept here, so main's filters decide whether and how
often it is shown (``default``: once per location), and main's
``warnings.showwarning`` shows it (``logging.captureWarnings``,
``catch_warnings(record=True)`` and ``pytest.warns`` see it). A warning that
main's filters turn into an error cannot be raised in the task that warned
(it went on): it goes to ``sys.unraisablehook``.

Output from workers (while main's sys.stdout/sys.stderr are replaced, see
aiosubinterp._inside.logs) is written to main's stream of that name, as it
is when the text is handled.

At interpreter exit, consumers of pools never closed are stopped the same
way (an atexit hook, registered after logging's own, so it runs before
logging.shutdown() flushes the handlers): what the workers sent before the
exit is handled; what they send after it is not.

Closing: once the pool's workers are gone (every record they sent is in the
channel), stop() sends an end marker behind those records and waits until
the thread has handled everything before it, so ``aclose()`` returns after
the last record was handled.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
import warnings
import weakref
from typing import Any

from aiosubinterp._channels.ends import open_channel
from aiosubinterp._inside.logs import OUTPUT, RECORD_FIELDS, WARNING

__all__ = ["DEFAULT_BUFFER", "LogConsumer", "RecordSink", "drain_at_exit", "level_snapshot"]

DEFAULT_BUFFER = 10_000  # records waiting in main at most, per pool
_STOP = None  # the end marker (a record is never None)
_NFIELDS = len(RECORD_FIELDS)
_log = logging.getLogger("aiosubinterp")


def level_snapshot() -> tuple[int, dict[str, int], int]:
    """Main's levels now: (root level, {logger name: level set on it}, logging.disable level)."""
    manager = logging.Logger.manager
    levels = {
        name: logger.level
        for name, logger in list(manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and logger.level
    }
    return logging.getLogger().level, levels, manager.disable


class RecordSink:
    """Hands what workers sent (records, warnings, output; _inside.logs's tuples) to main.

    Used by LogConsumer's thread (interpreter pools) and by a ProcessPool's
    reader threads, which get the same tuples over their worker's socket.

    Thread-safety: handle() may be called from several threads at once (it
    takes a lock: one item at a time, so a worker's items keep their order).
    """

    def __init__(self, maxsize: int = DEFAULT_BUFFER) -> None:
        self._maxsize = maxsize
        self._registries: dict[str, dict[Any, Any]] = {}  # warnings shown, per module
        self._handling = threading.Lock()

    def handle(self, item: tuple[Any, ...]) -> None:
        """Handle one item; a bad one is reported on logging's last resort, never raised."""
        with self._handling:
            try:
                self._handle(item)
            except Exception:  # noqa: BLE001 - one bad record must not stop the others
                logging.lastResort.handle(  # type: ignore[union-attr]
                    logging.makeLogRecord(
                        {
                            "name": "aiosubinterp",
                            "levelno": logging.ERROR,
                            "levelname": "ERROR",
                            "msg": f"aiosubinterp: could not handle a log record from a worker: {item!r}",  # noqa: E501
                        }
                    )
                )

    def _handle(self, item: tuple[Any, ...]) -> None:
        if item[0] == OUTPUT:  # to main's stream of that name, as it is now
            getattr(sys, item[2]).write(item[3])
            return
        if item[0] == WARNING:
            self._warn(item)
            return
        if item[0] == "dropped":  # a worker stopped with drops not reported yet
            _, interp_id, dropped = item
            self._report_dropped(interp_id, dropped)
            return
        fields = dict(zip(RECORD_FIELDS, item[:_NFIELDS], strict=True))
        extras, dropped = item[_NFIELDS], item[_NFIELDS + 1]
        if dropped:
            self._report_dropped(fields["interpreter_id"], dropped)
        logger = logging.getLogger(fields["name"])
        if not logger.isEnabledFor(fields["levelno"]):  # main's levels changed since
            return
        fields.update(extras)
        fields["args"] = None
        fields["relativeCreated"] = (fields["created"] - logging._startTime) * 1000  # type: ignore[attr-defined]
        logger.handle(logging.makeLogRecord(fields))

    def _warn(self, item: tuple[Any, ...]) -> None:
        _, interp_id, text, category_name, filename, lineno, module = item
        category = _category(category_name)
        if category is None:  # not a Warning class here (not imported in main)
            category = UserWarning
            text = f"{category_name}: {text}"
        key = module or filename
        registry = self._registries.get(key)
        if registry is None:
            registry = self._registries[key] = {}
        try:
            warnings.warn_explicit(
                text, category, filename, lineno, module=module, registry=registry
            )
        except Warning as exc:  # main's filters say "error"
            sys.unraisablehook(_Unraisable(exc, interp_id))  # type: ignore[arg-type]

    def _report_dropped(self, interp_id: int, dropped: int) -> None:
        _log.warning(
            "interpreter %d dropped %d log records: they came faster than the main "
            "interpreter handled them (at most %d wait). Log less, or at a level the "
            "main interpreter drops",
            interp_id,
            dropped,
            self._maxsize,
        )


class LogConsumer(RecordSink):
    """The channel workers send records into, and the thread that handles them in main.

    Thread-safety: worker_setup() and stop() may be called from any thread;
    stop() must not be called on an event loop's thread (it blocks).
    """

    def __init__(self, maxsize: int = DEFAULT_BUFFER) -> None:
        super().__init__(maxsize)
        self._send, self._recv = open_channel(maxsize)
        self._lock = threading.Lock()
        self._stopped = False
        _live.add(self)
        self._thread = threading.Thread(target=self._run, name="aiosubinterp-logs", daemon=True)
        try:
            self._thread.start()
        except BaseException:  # e.g. no new thread at interpreter shutdown (3.12)
            self._send.close()
            self._recv.close()
            raise

    def worker_setup(self) -> tuple[Any, ...] | None:
        """What a starting worker gets (_inside.logs.Forwarder), or None once stopped."""
        with self._lock:
            if self._stopped:
                return None
            send = self._send.clone()
        root, levels, disable = level_snapshot()
        return (send, root, levels, disable, True)

    def stop(self, timeout: float | None = None) -> None:
        """After the workers are gone: handle what they sent, then end the thread. Idempotent.

        timeout (at exit): seconds to wait at most for a handler that does
        not return; then what is left is dropped and the thread left behind.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        _live.discard(self)
        try:
            self._send.send_sync(_STOP, timeout)  # behind every record already sent
        except Exception:  # noqa: BLE001 - e.g. on a loop's thread: never hang, drop the rest
            self._recv.close()  # the thread's recv_sync returns: it ends
        self._thread.join(timeout)
        self._send.close()
        self._recv.close()

    def _run(self) -> None:
        recv = self._recv
        while True:
            try:
                item = recv.recv_sync()
            except Exception:  # noqa: BLE001 - EndOfChannel or closed: nothing more can come
                return
            if item is _STOP:
                return
            self.handle(item)


_live: weakref.WeakSet[LogConsumer] = weakref.WeakSet()  # consumers not stopped yet
_others: weakref.WeakSet[Any] = weakref.WeakSet()  # process pools (drain_logs())


def drain_at_exit(pool: Any) -> None:
    """Have pool.drain_logs() called at interpreter exit, unless pool is gone by then."""
    _others.add(pool)


EXIT_LIMIT = 30.0  # seconds the exit hook waits at most, in all (a stuck handler)


def _stop_at_exit() -> None:
    deadline = time.monotonic() + EXIT_LIMIT
    for consumer in list(_live):
        consumer.stop(max(0.0, (deadline - time.monotonic()) / 2))  # the send, then the join
    for pool in list(_others):
        pool.drain_logs(deadline)


# logging is imported above, so its shutdown hook is registered first: atexit
# runs this one before it, and the records end up in handlers still open.
atexit.register(_stop_at_exit)


def _category(name: str) -> type[Warning] | None:
    """The Warning subclass called name ("module.qualname") in main, if main has it."""
    module, _, qualname = name.rpartition(".")
    found: Any = sys.modules.get(module)
    while found is None and "." in module:  # a nested class: "pkg.mod.Outer.Inner"
        module, _, outer = module.rpartition(".")
        qualname = f"{outer}.{qualname}"
        found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    return None


class _Unraisable:
    """What sys.unraisablehook gets for a worker's warning that main's filters make an error."""

    def __init__(self, exc: Warning, interp_id: int) -> None:
        self.exc_type = type(exc)
        self.exc_value = exc
        self.exc_traceback = None
        self.err_msg = (
            f"aiosubinterp: a warning from interpreter {interp_id}, which "
            "the main interpreter's warnings filters turn into an error"
        )
        self.object = None
