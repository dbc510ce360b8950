"""One asyncio task per Running job: what the progress poller and the health watchdog share. `run`
starts `follow(key)` for each Running job that has no task (checking every FOLLOW_CHECK_SECONDS,
or the progress interval if shorter), a task ends when its job stops Running or is forgotten, and
cancelling `run` cancels them all."""

from __future__ import annotations

import asyncio

from .api.status import RUNNING
from .config import OperatorConfig

FOLLOW_CHECK_SECONDS = 1.0
"""How often `run` looks for Running jobs without a task (a walk over the cache)."""


class RunningJobTasks:
    task_name = "job"
    """Names each task `<task_name> <namespace>/<name>`."""

    def __init__(self, cache, config: OperatorConfig):
        self.cache, self.config = cache, config
        self._tasks: dict = {}  # job key -> the task following it

    async def follow(self, key) -> None:
        raise NotImplementedError

    def _running(self, key) -> dict | None:
        obj = self.cache.jobs_of.get(key)
        return obj if obj is not None and (obj.get("status") or {}).get("phase") == RUNNING else None

    def _cancel(self, key) -> None:
        if (task := self._tasks.pop(key, None)) is not None:
            task.cancel()

    def _ended(self, key) -> None:
        """Called by a task as it ends (in `finally`): it leaves the table unless already replaced."""
        if self._tasks.get(key) is asyncio.current_task():
            del self._tasks[key]

    async def run(self) -> None:
        try:
            while True:
                for key in list(self.cache.jobs_of):
                    if key not in self._tasks and self._running(key) is not None:
                        name = f"{self.task_name} {key[0]}/{key[1]}"
                        self._tasks[key] = asyncio.create_task(self.follow(key), name=name)
                await asyncio.sleep(min(FOLLOW_CHECK_SECONDS, self.config.progress_interval_seconds))
        finally:
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
