"""Orbax checkpoints of the train state (params, optimizer state, step) and the data position.

Saves are synchronous: the step that follows may donate the state's buffers, and the timing the
trainer reports is the full save. Every process calls save/restore (orbax coordinates them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from .contract.config import CheckpointConfig, is_url


def checkpoint_location(path: str) -> str | Path:
    """Object-store URLs (gs://, s3://) go to orbax as they are; local paths are made absolute."""
    return path if is_url(path) else Path(path).absolute()


class Checkpoints:
    def __init__(self, config: CheckpointConfig):
        self.interval = config.interval_steps
        self.manager = ocp.CheckpointManager(
            checkpoint_location(config.path),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=config.keep, enable_async_checkpointing=False, create=True
            ),
            item_names=("state", "meta"),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def due(self, step: int, final_step: int) -> bool:
        return step % self.interval == 0 or step == final_step

    def save(self, step: int, state: Any, meta: dict) -> None:
        self.manager.save(
            step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        )
        self.manager.wait_until_finished()

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
        """Restore into the shapes, dtypes and shardings of `abstract_state` (ShapeDtypeStructs)."""
        restored = self.manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore())
        )
        return restored["state"], restored["meta"]

    def close(self) -> None:
        self.manager.close()
