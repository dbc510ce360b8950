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
    assert [v for _, v in memo.values("s", [a, b], value)] == ["A", "B"] and computed == ["a", "b"]
    computed.clear()
    assert memo.values("s", [a, b], value) == [(a, "A"), (b, "B")] and computed == []
    b2 = node("b")  # replaced by the cache: computed again
    assert memo.values("s", [a, b2], value) == [(a, "A"), (b2, "B")] and computed == ["b"]
    computed.clear()
    assert memo.values("s", [b2], value) == [(b2, "B")] and computed == []  # a is gone
    assert memo.values("other", [b2], value) == [(b2, "B")] and computed == ["b"]  # another shape, its own


def test_a_summary_is_made_again_only_when_a_node_is_new_replaced_or_gone():
    summaries: list[list[str]] = []
    memo: NodeMemo[str] = NodeMemo()

    def summarize(found):
        summaries.append(names := [value for _, value in found])
        return ",".join(names)

    def summary(*nodes):
        return memo.summary("s", nodes, lambda n: n["metadata"]["name"], summarize)

    a, b = node("a"), node("b")
    assert summary(a, b) == "a,b" and summary(a, b) == "a,b" and len(summaries) == 1
    assert summary(a, node("b")) == "a,b" and len(summaries) == 2  # replaced
    assert summary(a) == "a" and summary(a, b, node("c")) == "a,b,c" and len(summaries) == 4  # gone, new
    assert memo.summary("t", [a], lambda n: "x", summarize) == "x" and summary(a, b, node("c")) == "a,b,c"
    assert len(summaries) == 6  # c replaced again; shape t made its own


def test_a_bounded_number_of_shapes_is_remembered():
    memo: NodeMemo[bool] = NodeMemo()
    for i in range(MAX_SHAPES + 5):
        memo.values(str(i), [node("a")], lambda n: True)
    assert len(memo) == MAX_SHAPES and "0" not in memo and str(MAX_SHAPES + 4) in memo
