"""serve: an ASGI application served from the interpreters of one process."""
