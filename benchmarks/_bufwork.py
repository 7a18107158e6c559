"""Worker functions of bench_buffer.py (imported inside interpreters: no asyncio)."""

from __future__ import annotations


def nbytes(x):
    """'return len': the task reads only the size of what it got."""
    return memoryview(x).nbytes


def echo(x):
    """'echo': the task sends back what it got."""
    return x


def shm_len(name):
    from multiprocessing import resource_tracker, shared_memory

    shm = shared_memory.SharedMemory(name=name)
    try:
        return shm.size
    finally:
        shm.close()
        resource_tracker.unregister(shm._name, "shared_memory")  # the parent owns it


def shm_echo(name):
    from multiprocessing import resource_tracker, shared_memory

    shm = shared_memory.SharedMemory(name=name)
    shm.close()
    resource_tracker.unregister(shm._name, "shared_memory")
    return name
