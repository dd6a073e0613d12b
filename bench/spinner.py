"""A task beside the code measured that spins ``spin`` seconds of CPU per loop turn and
counts its turns: how many turns of the event loop a store command takes
(bench/redis_turns.py, bench/persist_turns.py)."""

import asyncio
import time


class Spinner:
    def __init__(self, spin: float) -> None:
        self.spin = spin
        self.turns = 0
        self._stop = False
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._stop = True
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not self._stop:
            t = time.perf_counter()
            while time.perf_counter() - t < self.spin:
                pass
            self.turns += 1
            await asyncio.sleep(0)
