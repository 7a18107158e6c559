"""What runs inside every worker interpreter: the job loop's Python side,
how values cross, and the small runners the engine sends there.

Imported in every worker at start-up: no asyncio, no typing, nothing heavy.
"""
