from longctx_operator.node_memo import MAX_SHAPES, NodeMemo


def node(name: str) -> dict:
    return {"metadata": {"name": name}}


def test_a_value_is_computed_once_per_node_object_and_shape():
    computed: list[str] = []
    memo: NodeMemo[str] = NodeMemo()

    def value(n):
        computed.append(n["metadata"]["name"])
        return n["metadata"]["name"].upper()

    a, b = node("a"), node("b")
    found, changed = memo.values("s", [a, b], value)
    assert ([v for _, v in found], changed, computed) == (["A", "B"], True, ["a", "b"])
    computed.clear()
    assert memo.values("s", [a, b], value) == ([(a, "A"), (b, "B")], False) and computed == []
    b2 = node("b")  # replaced by the cache: computed again
    assert memo.values("s", [a, b2], value) == ([(a, "A"), (b2, "B")], True) and computed == ["b"]
    computed.clear()
    assert memo.values("s", [b2], value) == ([(b2, "B")], True) and computed == []  # a is gone
    assert memo.values("other", [b2], value)[1] is True and computed == ["b"]  # another shape, its own


def test_a_bounded_number_of_shapes_is_remembered():
    memo: NodeMemo[bool] = NodeMemo()
    for i in range(MAX_SHAPES + 5):
        memo.values(str(i), [node("a")], lambda n: True)
    assert len(memo) == MAX_SHAPES and "0" not in memo and str(MAX_SHAPES + 4) in memo
