"""Run a function in N processes that form one gloo process group (torch.multiprocessing spawn).

Workers are module-level functions (spawn imports them by name in the child); each gets its rank
and the arguments, and what it returns is pickled back to the caller, in rank order.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from support.ports import free_port


def _entry(rank: int, world: int, port: int, out: str, fn, args) -> None:
    torch.set_num_threads(1)  # the machine's cores are shared by every rank
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.save(fn(rank, *args), Path(out) / f"rank-{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_gloo(world: int, fn, *args, tmp: Path) -> list:
    """fn(rank, *args) in `world` processes of one gloo group; their results by rank."""
    mp.spawn(_entry, args=(world, free_port(), str(tmp), fn, args), nprocs=world, join=True)
    return [torch.load(tmp / f"rank-{rank}.pt") for rank in range(world)]
