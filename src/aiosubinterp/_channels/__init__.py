"""Channels: async streams between the main interpreter, worker interpreters and
worker processes. Used on both sides: imported in workers too (no asyncio at import)."""
