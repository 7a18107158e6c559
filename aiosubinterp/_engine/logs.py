"""Main side of log forwarding: records from workers are handled by main's logging.

Each pool with ``forward_logging=True`` owns one LogConsumer: a bounded
channel whose send end each worker gets a clone of (see
aiosubinterp._inside.logs for what the worker sends), and one helper thread
that receives the records in order, rebuilds a LogRecord from each and hands
it to ``logging.getLogger(name).handle()``. A thread, not a task on a loop:
it works the same under asyncio, uvloop and the InterpreterPoolExecutor
(which has no loop), and a pool used from several loops has one consumer.

Closing: once the pool's workers are gone (every record they sent is in the
channel), stop() sends an end marker behind those records and waits until
the thread has handled everything before it, so ``aclose()`` returns after
the last record was handled.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from aiosubinterp._channels.ends import open_channel
from aiosubinterp._inside.logs import RECORD_FIELDS

__all__ = ["DEFAULT_BUFFER", "LogConsumer", "level_snapshot"]

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


class LogConsumer:
    """The channel workers send records into, and the thread that handles them in main.

    Thread-safety: worker_setup() and stop() may be called from any thread;
    stop() must not be called on an event loop's thread (it blocks).
    """

    def __init__(self, maxsize: int = DEFAULT_BUFFER) -> None:
        self._maxsize = maxsize
        self._send, self._recv = open_channel(maxsize)
        self._lock = threading.Lock()
        self._stopped = False
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
        return (send, root, levels, disable)

    def stop(self) -> None:
        """After the workers are gone: handle what they sent, then end the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            self._send.send_sync(_STOP)  # behind every record already sent
        except Exception:  # noqa: BLE001 - e.g. on a loop's thread: never hang, drop the rest
            self._recv.close()  # the thread's recv_sync returns: it ends
        self._thread.join()
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
            try:
                self._handle(item)
            except Exception:  # noqa: BLE001 - one bad record must not stop the others
                logging.lastResort.handle(logging.makeLogRecord({  # type: ignore[union-attr]
                    "name": "aiosubinterp", "levelno": logging.ERROR, "levelname": "ERROR",
                    "msg": f"aiosubinterp: could not handle a log record from a worker: {item!r}",
                }))

    def _handle(self, item: tuple[Any, ...]) -> None:
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

    def _report_dropped(self, interp_id: int, dropped: int) -> None:
        _log.warning(
            "interpreter %d dropped %d log records: they came faster than the main "
            "interpreter handled them (at most %d wait). Log less, or at a level the "
            "main interpreter drops", interp_id, dropped, self._maxsize)
