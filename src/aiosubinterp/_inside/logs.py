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

Warnings take the same channel (so they keep their order with records): the
worker's ``warnings.showwarning`` sends ("warning", interpreter id, message,
category name, filename, lineno, module) once per distinct warning, and
main passes it to ``warnings.warn_explicit``, so main's filters, its
once-per-location registry and its ``showwarning`` decide (see
aiosubinterp._engine.logs).

Output too, while main's ``sys.stdout``/``sys.stderr`` are not the process's
own (main says so in the worker settings, checked at each submit): this
worker's ``sys.stdout``/``sys.stderr`` are then _Output streams that send
("output", interpreter id, "stdout" or "stderr", text) line by line, and
main writes the text to its stream of that name. Otherwise they are the
worker's own streams (straight to the fds), as without forwarding.
"""

from aiosubinterp import _core

TYPE_CHECKING = False  # no typing import at run time: this module loads in every worker
if TYPE_CHECKING:
    from typing import Any

__all__ = ["OUTPUT", "RECORD_FIELDS", "WARNING", "Forwarder"]

# What a forwarded record carries, in order (then: extras, dropped count).
RECORD_FIELDS = (
    "name",
    "levelno",
    "levelname",
    "msg",
    "created",
    "msecs",
    "pathname",
    "filename",
    "module",
    "lineno",
    "funcName",
    "exc_text",
    "stack_info",
    "thread",
    "threadName",
    "process",
    "interpreter_id",
    "task_id",
)
_NATIVE = (str, int, float, bool, type(None))
WARNING = "warning"  # first item of a forwarded warning (a record's is its logger name)
OUTPUT = "output"  # first item of forwarded output
_MAX_SEEN = 10_000  # distinct warnings remembered per worker (then forgotten, all at once)


class Forwarder:
    """Installs the forwarding handler in this worker once ``logging`` is in use.

    setup is (send_end, root_level, {logger_name: level}, disable_level[,
    warnings]): main's levels when the worker started, so records main would
    drop are dropped here, before anything crosses; warnings (default True)
    forwards warnings too (install_warnings).

    Thread-safety: the handler may be called from any thread of this
    interpreter (logging serialises handlers with the handler's lock).
    """

    def __init__(self, setup: tuple[object, ...]) -> None:
        import _warnings  # built in, loaded: the filters as they are before the initializer

        self._send: Any
        self._send, self._root_level, self._levels, self._disable = setup[:4]
        self._forward_warnings = bool(setup[4]) if len(setup) > 4 else True
        self._filters_at_start = list(_warnings.filters)
        self._handler: Any = None
        self._seen: set[tuple[object, ...]] = set()
        self._warnings_dropped = 0
        self._showwarning: Any = None
        self._output = 0  # bit 1: stdout forwarded, bit 2: stderr
        self._streams: dict[str, _Output] = {}
        self.pending = True  # not installed yet (logging not imported, or not decided)
        self.forwarding = False  # the handler is installed: records go to main

    def install_warnings(self) -> None:
        """Send this worker's warnings to main; called once, after the initializer.

        Kept out when the initializer set up warnings its own way (changed the
        filters or ``warnings.showwarning``). Costs the import of ``warnings``
        (~0.2 ms of the interpreter's start): C code warns without it, and
        then bypasses showwarning.
        """
        if not self._forward_warnings:
            return
        import warnings

        if (
            warnings.showwarning is not warnings._showwarning_orig  # type: ignore[attr-defined]
            or warnings.filters != self._filters_at_start
        ):
            return
        # Every warning reaches showwarning here; main's filters decide. Code
        # of the task that filters (or catches) warnings itself still does.
        warnings.simplefilter("always")
        self._showwarning = warnings.showwarning = self._forward_warning

    def set_output(self, bits: int) -> None:
        """Forward this worker's stdout (bit 1) and stderr (bit 2) to main's, or stop.

        A stream the task's code replaced itself (its own redirect) is left alone.
        """
        if bits == self._output:
            return
        self._output = bits
        import sys

        for bit, name in ((1, "stdout"), (2, "stderr")):
            current = getattr(sys, name)
            mine = self._streams.get(name)
            if bits & bit:
                if current is getattr(sys, f"__{name}__"):
                    if mine is None:
                        mine = self._streams[name] = _Output(self._send, name, current)
                    setattr(sys, name, mine)
            elif mine is not None and current is mine:
                mine.flush()
                setattr(sys, name, mine.original)

    def _forward_warning(
        self,
        message: "Any",
        category: "Any",
        filename: str,
        lineno: int,
        file: "Any" = None,
        line: "Any" = None,
    ) -> None:
        if file is not None:  # someone asked for a given file: not ours to move
            import warnings

            warnings._showwarning_orig(message, category, filename, lineno, file, line)  # type: ignore[attr-defined]
            return
        text = str(message)
        key = (text, category, filename, lineno)
        if key in self._seen:
            return  # main has it already: its registry decides how often to show it
        if len(self._seen) >= _MAX_SEEN:
            self._seen.clear()
        self._seen.add(key)
        import sys

        module = None
        frame = sys._getframe(1)
        while frame is not None:  # the warning's frame (stacklevel may point above warn())
            if frame.f_code.co_filename == filename and frame.f_lineno == lineno:
                module = frame.f_globals.get("__name__")
                break
            frame = frame.f_back  # type: ignore[assignment]
        del frame
        item = (
            WARNING,
            _core.current_interpreter_id(),
            text,
            f"{category.__module__}.{category.__qualname__}",
            filename,
            lineno,
            module if type(module) is str else None,
        )
        try:
            status = self._send._send_nowait(item)
        except Exception:  # noqa: BLE001 - closed: the pool is going away
            return
        if status == _core.CHAN_WOULDBLOCK:
            self._warnings_dropped += 1

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
        self.forwarding = True

    def shutdown(self) -> None:
        """The worker stops: report drops not reported yet; close this worker's end."""
        for stream in self._streams.values():
            stream.last_flush()
        self.set_output(0)  # the worker's own streams again
        handler, self._handler = self._handler, None
        self.forwarding = False
        dropped = self._warnings_dropped
        if handler is not None:
            import logging

            logging.getLogger().removeHandler(handler)
            dropped += handler.dropped
        if self._showwarning is not None:
            import warnings

            if warnings.showwarning is self._showwarning:
                warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
            self._showwarning = None
        if dropped:
            # Best effort: a full channel here means main is not draining.
            self._send._send_nowait(("dropped", _core.current_interpreter_id(), dropped))
        self._send.close()


class _Output:
    """A worker's sys.stdout or sys.stderr while main's is redirected: sends whole lines.

    Line-buffered, like a terminal: text is sent at each newline and at
    flush(). A full channel makes the writer wait (output is not dropped),
    except at the worker's shutdown, when main may be exiting (then, as for a
    closed channel, the text goes to the worker's own stream).
    Other attributes (buffer, fileno, encoding) are the worker's own
    stream's: bytes written there go straight to the fd.

    Thread-safety: as a worker's own text stream, without its lock: lines
    written by several threads at once may interleave.
    """

    def __init__(self, send: "Any", name: str, original: "Any") -> None:
        self._send = send
        self._name = name
        self.original = original
        self._pending = ""

    def write(self, text: str) -> int:
        if type(text) is not str:
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if "\n" not in text:
            self._pending += text
            return len(text)
        cut = text.rindex("\n") + 1
        line, self._pending = self._pending + text[:cut], text[cut:]
        self._forward(line)
        return len(text)

    def writelines(self, lines: "Any") -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._pending:
            text, self._pending = self._pending, ""
            self._forward(text)

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> "Any":
        return getattr(self.original, name)

    def _forward(self, text: str, wait: bool = True) -> None:
        item = (OUTPUT, _core.current_interpreter_id(), self._name, text)
        try:
            status = self._send._send_nowait(item)
            while wait and status in (_core.CHAN_WOULDBLOCK, _core.CHAN_INTERRUPTED):
                # Main is behind: wait (an injected cancellation fires between tries).
                status = self._send._send_wait(item, -1.0)
        except Exception:  # noqa: BLE001 - the channel is closed: the pool is gone
            status = _core.CHAN_CLOSED
        if status != _core.CHAN_DONE:
            self.original.write(text)

    def last_flush(self) -> None:
        """The worker stops: send the partial line without waiting (main may be exiting)."""
        if self._pending:
            text, self._pending = self._pending, ""
            self._forward(text, wait=False)


_class: "Any" = None


def _handler_class(logging: "Any") -> "Any":
    """The handler class, made once logging is imported (it subclasses logging.Handler)."""
    global _class
    if _class is not None:
        return _class
    standard = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
    formatter = logging.Formatter()
    from aiosubinterp._inside.worker import load_contextvars

    current_task = load_contextvars().get
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
                    (k, v)
                    for k, v in record.__dict__.items()
                    if k not in standard and type(v) in _NATIVE
                )
                item = (
                    record.name,
                    record.levelno,
                    record.levelname,
                    message,
                    record.created,
                    record.msecs,
                    record.pathname,
                    record.filename,
                    record.module,
                    record.lineno,
                    record.funcName,
                    exc_text or None,
                    record.stack_info,
                    record.thread,
                    record.threadName,
                    record.process,
                    interp_id,
                    current_task(),
                    extras,
                    self.dropped,
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
