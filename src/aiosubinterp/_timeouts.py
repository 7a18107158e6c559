"""The one rule for every timeout the public API accepts.

A timeout is a number of seconds: an int or a float, zero or more.
``math.inf`` means "no time limit", and so does any value past what a
thread's wait can represent (``threading.TIMEOUT_MAX``, about 292 years):
where ``None`` is accepted such a value becomes ``None``; elsewhere (the
pools' ``cancel_grace``) it is clamped to that maximum, which every waiter
below us (a ``threading`` wait, an asyncio timer, the C core's condition
variables) treats as a wait without end. NaN, negative numbers, booleans and
non-numbers are refused with a ``ValueError`` naming the parameter.

Before this rule, ``math.inf`` reached the C core's condition variables as
an undefined ``time_t`` conversion, and the waiter spun forever holding a
process-wide mutex (the whole process froze), or reached a ``threading``
wait on a helper thread as an ``OverflowError`` nobody saw.

Worker-safe: imported inside worker interpreters (no asyncio, no threading).
"""

from __future__ import annotations

import _thread

__all__ = ["TIMEOUT_MAX", "executor_timeout", "optional_seconds", "seconds"]

#: The longest wait any waiter here can express; longer means "no limit".
TIMEOUT_MAX: float = _thread.TIMEOUT_MAX


def _checked(value: object, name: str, accepted: str) -> int | float:
    """value if it is an int or float, not a bool, not NaN, >= 0; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be {accepted}, got {value!r}")
    return value


def seconds(value: object, name: str) -> float:
    """Validate a timeout-like number of seconds; inf (or anything huge) becomes TIMEOUT_MAX.

    Raises:
        ValueError: value is not an int or float, is a bool, NaN or negative.
    """
    limit = _checked(value, name, "a non-negative number of seconds (math.inf for no limit)")
    if limit >= TIMEOUT_MAX:  # compared before float(): an int may be too large for one
        return TIMEOUT_MAX
    return float(limit)


def optional_seconds(value: object, name: str = "timeout") -> float | None:
    """As seconds(), where None is allowed: None (no limit) for None, inf or anything huge."""
    if value is None:
        return None
    limit = _checked(
        value, name, "None or a non-negative number of seconds (None or math.inf for no limit)"
    )
    return None if limit >= TIMEOUT_MAX else float(limit)


def executor_timeout(value: object) -> float | None:
    """optional_seconds() for the concurrent.futures interface (Executor.map, Future.result).

    As there, a negative timeout means "do not wait" (the standard library's
    executors accept it), so existing callers keep working; NaN and
    non-numbers are refused, and inf or anything huge means no limit.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return 0.0
    return optional_seconds(value, "timeout")
