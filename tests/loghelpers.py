"""Main-side helpers of the logging, output and context tests: records and output as lists."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator


class ListHandler(logging.Handler):
    """Keeps every record it is handed, at every level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def captured_records(name: str, level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    """The records main's logger `name` handles meanwhile; its level is `level` meanwhile."""
    logger = logging.getLogger(name)
    handler = ListHandler()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@contextlib.contextmanager
def output_and_records(logger_name: str) -> Iterator[list[str]]:
    """One list, in arrival order, of the lines written to sys.stdout and the
    messages of records main's logger `logger_name` handles meanwhile."""
    events: list[str] = []

    class Sink(io.StringIO):
        def write(self, text: str) -> int:
            events.append(text.strip())
            return len(text)

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            events.append(record.getMessage())

    handler = Keep()
    logging.getLogger(logger_name).addHandler(handler)
    try:
        with contextlib.redirect_stdout(Sink()):
            yield events
    finally:
        logging.getLogger(logger_name).removeHandler(handler)


def record_items(monkeypatch) -> list[tuple[object, ...]]:
    """Every item main's record handling receives from workers (interpreters and
    processes alike), in order, from now until the test ends."""
    from aiosubinterp._engine import logs

    items: list[tuple[object, ...]] = []
    original = logs.RecordSink._handle

    def counting(self, item):
        items.append(item)
        return original(self, item)

    monkeypatch.setattr(logs.RecordSink, "_handle", counting)
    return items
