"""The work of examples/fastapi_app.py: a JSON body validated by pydantic and scored, in a worker.

Workers import functions by module name, so this module imports only what
runs in a worker interpreter: pydantic (whose compiled core, pydantic-core,
refuses own-GIL interpreters: the app's pool loads a private copy of it in
each interpreter, ``fallback="copy"``), never fastapi or starlette (anyio
would bring in asyncio, which aborts CPython 3.12.1 at exit when a worker
imported it). The main interpreter imports it too, for the models' JSON
schema (the OpenAPI document) and nothing else: validation happens where
the work does.

``score(body)`` takes the request's raw bytes and returns plain data, an
HTTP status and a JSON body as bytes, so nothing of pydantic crosses
between interpreters (a ``ValidationError`` could not be rebuilt in main,
whose pydantic-core is another copy).
"""

import os

from _web_work import count_primes
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aiosubinterp import get_current

MAX_ITEMS = 64
MAX_N = 10**7  # an item's n, and the items' n added up (the work of one request)


class Item(BaseModel):
    """One item of a batch: its score counts the primes below ``n``, times ``weight``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    n: int = Field(ge=0, le=MAX_N)
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)


class Batch(BaseModel):
    """The body of ``POST /score``: items to score."""

    model_config = ConfigDict(extra="forbid")

    id: int
    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)

    @model_validator(mode="after")
    def _bounded_work(self) -> "Batch":
        total = sum(item.n for item in self.items)
        if total > MAX_N:
            raise ValueError(f"the items' n add up to {total}, more than {MAX_N}")
        return self


class ItemScore(BaseModel):
    name: str
    primes: int  # below the item's n
    score: float  # primes * weight


class Scored(BaseModel):
    """The answer: each item's score, the total, the best item, and where it was computed."""

    id: int
    items: list[ItemScore]
    total: float
    best: str  # the name of the highest-scoring item (the first of equals)
    interpreter_id: int  # the worker interpreter that validated and computed (0: main)
    pid: int  # the process it ran in


def score(body: bytes) -> tuple[int, bytes]:
    """Validate ``body`` (JSON of a ``Batch``) and score it: ``(status, JSON bytes)``.

    200 and a ``Scored`` (``model_dump_json``), or 422 and pydantic's error
    list as ``{"detail": [...]}`` (FastAPI's shape for a body that does not
    validate; each error has ``type``, ``loc``, ``msg`` and ``input``).
    """
    try:
        batch = Batch.model_validate_json(body)
    except ValidationError as exc:
        return 422, b'{"detail":' + exc.json(include_url=False).encode() + b"}"
    scores = []
    for item in batch.items:
        primes = count_primes(item.n)  # the CPU work: trial division, pure Python
        scores.append(ItemScore(name=item.name, primes=primes, score=primes * item.weight))
    best = max(scores, key=lambda s: s.score)  # max keeps the first of equals
    scored = Scored(
        id=batch.id,
        items=scores,
        total=sum(s.score for s in scores),
        best=best.name,
        interpreter_id=get_current().id,
        pid=os.getpid(),
    )
    return 200, scored.model_dump_json().encode()


def warm_up() -> int:
    """Import this module and pydantic (its private copy) before the first request needs it."""
    status, _ = score(b'{"id": 0, "items": [{"name": "warm-up", "n": 10}]}')
    return status
