"""operator/watch.py against the real API server: the label selector is applied by the server, a
relist reports what vanished as deleted (410 Gone: tests/unit/operator/test_watch.py)."""

from __future__ import annotations

import asyncio
import time

import kubernetes
import pytest

from longctx_operator.names import JOB_NAME_LABEL
from longctx_operator.watch import Watch

pytestmark = pytest.mark.integration


def pod(name: str, labels: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeSelector": {"no-such-node": "x"}},
    }


@pytest.fixture
def core(cluster):
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))


def test_only_labelled_pods_are_delivered_and_a_relist_reports_deletions(core, kubectl, namespace):
    delivered: list[tuple[str, bool]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        watch = Watch(
            "pods",
            core.list_namespaced_pod,
            lambda obj, deleted: delivered.append((obj["metadata"]["name"], deleted)),
            loop,
            args=(namespace,),
            label_selector=JOB_NAME_LABEL,
        )
        kubectl.apply(pod("ours-before", {JOB_NAME_LABEL: "a"}))
        watch.start()
        for i in range(5):
            kubectl.apply(pod(f"other-{i}", {"app": "unrelated"}))
        kubectl.apply(pod("ours-after", {JOB_NAME_LABEL: "b"}))
        kubectl.run("delete", "pod", "ours-after", "other-0", "--grace-period=0", "--force")
        deadline = time.monotonic() + 30
        while ("ours-after", True) not in delivered and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        watch.stop()
        # Deleted while nobody watched: the next list reports it.
        kubectl.run("delete", "pod", "ours-before", "--grace-period=0", "--force")
        await loop.run_in_executor(None, watch.relist)
        await asyncio.sleep(0.2)  # the relist's deliveries run on the loop

    asyncio.run(scenario())
    names = {name for name, _ in delivered}
    assert names == {"ours-before", "ours-after"}, delivered  # never other-*: filtered by the API server
    assert ("ours-after", True) in delivered and delivered[-1] == ("ours-before", True)
