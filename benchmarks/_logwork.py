"""What bench_logging.py's workers run: a loop of log calls (imported in interpreters too).

Stdlib only, no asyncio: it loads in every worker interpreter and process.
"""

import logging

__all__ = ["LOGGER", "log_n"]

LOGGER = "bench.logging"
_log = logging.getLogger(LOGGER)


def log_n(n: int, level: int) -> int:
    """n records at level, each with one argument to format; returns n."""
    log = _log.log
    for i in range(n):
        log(level, "record %d of the benchmark", i)
    return n
