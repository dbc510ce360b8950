"""A de-duplicating work queue of job keys (client-go's workqueue semantics), event-loop only."""

from __future__ import annotations

import asyncio


class WorkQueue:
    """Keys waiting for a worker; a key is never processed twice at once, and adding a key that is
    already waiting is a no-op (client-go's workqueue semantics). Event-loop only."""

    def __init__(self):
        self._queue: asyncio.Queue = asyncio.Queue()
        self._dirty: set = set()
        self._processing: set = set()
        self._timers: dict = {}

    def add(self, key) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, key, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key) -> None:
        del self._timers[key]
        self.add(key)

    async def get(self):
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)
