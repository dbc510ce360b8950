"""operator/workqueue.py: the reconciler's work queue (deduplication, one run per key at once, delays)."""

import asyncio

from longctx_operator.workqueue import WorkQueue


def test_work_queue_deduplicates_and_never_runs_a_key_twice_at_once():
    async def scenario():
        q = WorkQueue()
        q.add("a"), q.add("a"), q.add("b")
        first = await q.get()
        q.add("a")  # re-added while processing: queued again only when done
        second = await q.get()
        assert (first, second) == ("a", "b")
        assert q._queue.empty()
        q.done("a")
        assert await asyncio.wait_for(q.get(), 1) == "a"
        q.add_after("c", 0.05)
        q.add_after("c", 10)  # a later deadline does not replace an earlier one
        assert await asyncio.wait_for(q.get(), 1) == "c"
        q.done("c")
        q.add_after("c", 0.01)  # a fired timer does not block the next one
        assert await asyncio.wait_for(q.get(), 1) == "c"

    asyncio.run(scenario())
