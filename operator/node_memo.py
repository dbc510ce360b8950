"""A value per node, remembered per node object, for a few shapes of pod or gang at a time.

The cache replaces a node's object only when what the operator reads of it changes
(cache.Cache.put_node), so a value computed from a node object stands for as long as that object is
the cached one. At 2,000 nodes, matching every node's labels and taints was most of an admission
count, and walking them for a gang's placement table took 40 ms per gang in the admission thread
(docs/operator.md, "The node walks remembered"): with the memo, a count or a table computes only
for the nodes that changed since the last one of the same shape. Used by the admission thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

MAX_SHAPES = 64  # shapes remembered (the least recently used is forgotten)

T = TypeVar("T")
S = TypeVar("S")


class _Shape(Generic[T]):
    """What one shape remembers: each node's object and value, and a summary of them."""

    __slots__ = ("nodes", "summary")

    def __init__(self, nodes: dict[str, tuple[dict, T]]):
        self.nodes = nodes
        self.summary: Any = None


class NodeMemo(Generic[T]):
    def __init__(self):
        self._shapes: OrderedDict[str, _Shape[T]] = OrderedDict()

    def __contains__(self, shape: str) -> bool:
        return shape in self._shapes

    def __len__(self) -> int:
        return len(self._shapes)

    def values(self, shape: str, nodes: Iterable[dict], value: Callable[[dict], T]) -> list[tuple[dict, T]]:
        """Each of `nodes` with its `value(node)`, computed only for node objects this shape has not
        seen."""
        return list(self._walk(shape, nodes, value)[0].nodes.values())

    def summary(
        self,
        shape: str,
        nodes: Iterable[dict],
        value: Callable[[dict], T],
        summarize: Callable[[list[tuple[dict, T]]], S],
    ) -> S:
        """`summarize(self.values(shape, nodes, value))`, computed again only when a node is new,
        replaced or gone since the shape's last call."""
        entry, changed = self._walk(shape, nodes, value)
        if changed:
            entry.summary = summarize(list(entry.nodes.values()))
        return entry.summary

    def _walk(self, shape: str, nodes: Iterable[dict], value: Callable[[dict], T]) -> tuple[_Shape[T], bool]:
        """The shape's entry brought up to `nodes` (a new one, without summary, when anything
        changed), and whether anything did (True on the shape's first call)."""
        entry = self._shapes.pop(shape, None)
        known = entry.nodes if entry is not None else {}
        changed = entry is None
        current: dict[str, tuple[dict, T]] = {}
        for node in nodes:
            seen = known.get(name := node["metadata"]["name"])
            if seen is None or seen[0] is not node:
                seen, changed = (node, value(node)), True
            current[name] = seen
        changed = changed or len(current) != len(known)
        if changed:
            entry = _Shape(current)  # the nodes gone since are forgotten with the old map
        self._shapes[shape] = entry
        while len(self._shapes) > MAX_SHAPES:
            self._shapes.popitem(last=False)
        return entry, changed
