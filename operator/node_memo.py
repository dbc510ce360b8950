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
from typing import Generic, TypeVar

MAX_SHAPES = 64  # shapes remembered (the least recently used is forgotten)

T = TypeVar("T")


class NodeMemo(Generic[T]):
    def __init__(self):
        self._shapes: OrderedDict[str, dict[str, tuple[dict, T]]] = OrderedDict()

    def __contains__(self, shape: str) -> bool:
        return shape in self._shapes

    def __len__(self) -> int:
        return len(self._shapes)

    def values(
        self, shape: str, nodes: Iterable[dict], value: Callable[[dict], T]
    ) -> tuple[list[tuple[dict, T]], bool]:
        """Each of `nodes` with its `value(node)`, computed only for node objects this shape has not
        seen; and whether anything differs from the shape's last call (a node new, replaced or gone;
        True on its first)."""
        known = self._shapes.pop(shape, None)
        changed = known is None
        known = known or {}
        current: dict[str, tuple[dict, T]] = {}
        for node in nodes:
            seen = known.get(name := node["metadata"]["name"])
            if seen is None or seen[0] is not node:
                seen, changed = (node, value(node)), True
            current[name] = seen
        changed = changed or len(current) != len(known)
        self._shapes[shape] = current  # the nodes gone since are forgotten with the old map
        while len(self._shapes) > MAX_SHAPES:
            self._shapes.popitem(last=False)
        return list(current.values()), changed
