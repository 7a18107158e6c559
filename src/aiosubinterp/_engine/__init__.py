"""The engine, on the caller's side: the one pool lifecycle, the interpreter
backend, tasks, the event-loop hub, the executor facade, the process fallback.

Imported in the main interpreter only (pools refuse to be made in a worker).
"""
