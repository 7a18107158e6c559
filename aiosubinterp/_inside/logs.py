"""Worker side of log forwarding: records logged in a worker go to main's logging.

Worker-side module: it must not import asyncio (nor anything of ours that
does). It imports ``logging`` only when the worker's own code did (see
Forwarder.maybe_install), so a worker that never logs pays nothing.

A record crosses as a tuple of builtins (RECORD_FIELDS, then a tuple of
(key, value) pairs for the ``extra`` fields) through a bounded channel; the
consumer in main (aiosubinterp._engine.logs) rebuilds a LogRecord from it.
When the channel is full the record is dropped and counted; the count rides
on the next record that gets through (or on a marker sent at shutdown), and
main reports it once as a warning.
"""

from aiosubinterp import _core

TYPE_CHECKING = False  # no typing import at run time: this module loads in every worker
if TYPE_CHECKING:
    from typing import Any

__all__ = ["RECORD_FIELDS", "Forwarder"]

# What a forwarded record carries, in order (then: extras, dropped count).
RECORD_FIELDS = (
    "name", "levelno", "levelname", "msg", "created", "msecs", "pathname", "filename",
    "module", "lineno", "funcName", "exc_text", "stack_info", "thread", "threadName",
    "process", "interpreter_id",
)
_NATIVE = (str, int, float, bool, type(None))


class Forwarder:
    """Installs the forwarding handler in this worker once ``logging`` is in use.

    setup is (send_end, root_level, {logger_name: level}, disable_level): main's
    levels when the worker started, so records main would drop are dropped
    here, before anything crosses.

    Thread-safety: the handler may be called from any thread of this
    interpreter (logging serialises handlers with the handler's lock).
    """

    def __init__(self, setup: tuple[object, ...]) -> None:
        self._send: Any
        self._send, self._root_level, self._levels, self._disable = setup
        self._handler: Any = None
        self.pending = True  # not installed yet (logging not imported, or not decided)

    def maybe_install(self) -> None:
        """Install the handler if this worker's code imported logging; called between jobs."""
        import sys

        if "logging" not in sys.modules:
            return
        self.pending = False
        import logging

        root = logging.getLogger()
        if root.handlers:
            return  # the worker configured its own logging (its initializer): keep it
        root.setLevel(self._root_level)  # type: ignore[arg-type]
        for name, level in self._levels.items():  # type: ignore[attr-defined]
            logging.getLogger(name).setLevel(level)
        if self._disable:
            logging.disable(self._disable)  # type: ignore[arg-type]
        self._handler = _handler_class(logging)(self._send)
        root.addHandler(self._handler)

    def shutdown(self) -> None:
        """The worker stops: report drops not reported yet; close this worker's end."""
        handler, self._handler = self._handler, None
        if handler is not None:
            import logging

            logging.getLogger().removeHandler(handler)
            if handler.dropped:
                # Best effort: a full channel here means main is not draining.
                self._send._send_nowait(("dropped", _core.current_interpreter_id(),
                                         handler.dropped))
        self._send.close()


_class: "Any" = None


def _handler_class(logging: "Any") -> "Any":
    """The handler class, made once logging is imported (it subclasses logging.Handler)."""
    global _class
    if _class is not None:
        return _class
    standard = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
    formatter = logging.Formatter()
    interp_id = _core.current_interpreter_id()
    done = _core.CHAN_DONE
    wouldblock = _core.CHAN_WOULDBLOCK

    class ForwardingHandler(logging.Handler):  # type: ignore[misc]
        """Sends each record to main as a tuple; drops (and counts) when the channel is full."""

        def __init__(self, send: "Any") -> None:
            super().__init__()
            self.send = send
            self.dropped = 0

        def emit(self, record: "Any") -> None:
            # A handler the worker's code added on the way up wins: no second copy in main.
            logger = logging.Logger.manager.loggerDict.get(record.name)
            while isinstance(logger, logging.Logger) and logger is not logging.root:
                if logger.handlers:
                    return
                if not logger.propagate:
                    return
                logger = logger.parent
            if len(logging.root.handlers) > 1:
                return
            try:
                message = record.getMessage()
                exc_text = record.exc_text
                if record.exc_info and not exc_text:
                    exc_text = formatter.formatException(record.exc_info)
                extras = tuple(
                    (k, v) for k, v in record.__dict__.items()
                    if k not in standard and type(v) in _NATIVE
                )
                item = (
                    record.name, record.levelno, record.levelname, message, record.created,
                    record.msecs, record.pathname, record.filename, record.module,
                    record.lineno, record.funcName, exc_text or None, record.stack_info,
                    record.thread, record.threadName, record.process, interp_id,
                    extras, self.dropped,
                )
                status = self.send._send_nowait(item)
            except Exception:  # noqa: BLE001 - logging's own rule: report, never raise
                self.handleError(record)
                return
            if status == done:
                self.dropped = 0
            elif status == wouldblock:
                self.dropped += 1
            # Closed or broken: the pool is going away; nobody can read it.

    _class = ForwardingHandler
    return _class
