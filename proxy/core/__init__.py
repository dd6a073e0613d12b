"""The sans-I/O core: pure state machines fed with events, returning commands.

Nothing in this package may import asyncio, aiohttp, websockets, redis, or read the
clock or a random source: time (``now``) and ids come in from the runtime. A test in
``tests/core/test_sans_io.py`` enforces the import rule.
"""
