"""This process's place in the job, from the pod environment the operator renders (and `longctx
run` reproduces): the planned layout (LONGCTX_DATA_PARALLEL, _CONTEXT_PARALLEL, _TENSOR_PARALLEL,
_SEQUENCE_LENGTH) and torch.distributed's identity (RANK, WORLD_SIZE; MASTER_ADDR and MASTER_PORT
are read by init_process_group itself).

Ranks are laid out context-major: rank = data_index * context + context_index, so the ranks of
one context-parallel ring are neighbours (on one node, where a node holds a whole ring).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch.distributed as dist

from ..contract import podenv


class LayoutError(ValueError):
    """The environment does not describe a job this trainer can run."""


@dataclass(frozen=True)
class Layout:
    data: int
    context: int
    rank: int
    sequence_length: int

    @property
    def world_size(self) -> int:
        return self.data * self.context

    @property
    def data_index(self) -> int:
        return self.rank // self.context

    @property
    def context_index(self) -> int:
        return self.rank % self.context

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Layout:
        def number(name: str) -> int:
            if name not in environ:
                raise LayoutError(f"{name} is not set (the operator and `longctx run` set it)")
            return int(environ[name])

        data, context, tensor = (
            number(n) for n in (podenv.DATA_PARALLEL, podenv.CONTEXT_PARALLEL, podenv.TENSOR_PARALLEL)
        )
        if tensor != 1:
            raise LayoutError(f"{podenv.TENSOR_PARALLEL}={tensor}: the PyTorch example has no tensor parallelism")
        world, rank = number(podenv.WORLD_SIZE), number(podenv.RANK)
        if world != data * context:
            raise LayoutError(f"{podenv.WORLD_SIZE}={world} is not data {data} x context {context} processes")
        sequence_length = number(podenv.SEQUENCE_LENGTH)
        if sequence_length % context:
            raise LayoutError(f"{podenv.SEQUENCE_LENGTH}={sequence_length} does not divide over context {context}")
        return cls(data=data, context=context, rank=rank, sequence_length=sequence_length)


@dataclass(frozen=True)
class Groups:
    """This rank's context-parallel ring and data-parallel group (every rank creates every group,
    as torch.distributed requires, and keeps its own two)."""

    context: dist.ProcessGroup
    data: dist.ProcessGroup

    @classmethod
    def create(cls, layout: Layout) -> Groups:
        mine = {}
        for d in range(layout.data):
            group = dist.new_group([d * layout.context + c for c in range(layout.context)])
            if d == layout.data_index:
                mine["context"] = group
        for c in range(layout.context):
            group = dist.new_group([d * layout.context + c for d in range(layout.data)])
            if c == layout.context_index:
                mine["data"] = group
        return cls(**mine)
