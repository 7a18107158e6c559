"""A FastAPI application for tests/test_serve.py: pydantic-core refuses
interpreters, so `serve` loads it from a private copy in each interpreter."""

from fastapi import FastAPI
from pydantic import BaseModel

import aiosubinterp

app = FastAPI()


class Item(BaseModel):
    name: str
    price: float


@app.get("/")
async def root():
    return {"interpreter": aiosubinterp.get_current().id}


@app.post("/items")
async def items(item: Item):
    return {"name": item.name, "double": item.price * 2}


@app.get("/sync")
def sync_view():  # FastAPI runs it on a thread of the interpreter
    return {"sync": True, "interpreter": aiosubinterp.get_current().id}
