"""operator/kube.py against the real API server: its writes reuse the connections of its pool."""

from __future__ import annotations

import uuid

import kubernetes
import pytest

from longctx_operator.kube import CountingApiClient, Kube
from support import operator_harness as h
from support.jobs import job_manifest

pytestmark = pytest.mark.integration


def opened(api: kubernetes.client.ApiClient) -> int:
    """Connections the client's pool has opened so far, to every host."""
    pools = api.rest_client.pool_manager.pools
    return sum(pools[key].num_connections for key in pools.keys())


def config_map(i: int) -> dict:
    return {"kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}}


def network_policy() -> dict:
    return {"kind": "NetworkPolicy", "metadata": {"name": "np"}, "spec": {"podSelector": {}}}


def test_writes_reuse_one_connection_whatever_their_answer(admin_kubectl, kubectl, namespace):
    """A response the operator does not read would keep its connection, and every next request
    would open one more (a TLS handshake each). Twenty writes of each kind it sends without reading
    the answer, one at a time, succeeding and refused, must open one connection: an Event, a create,
    the update of an existing ConfigMap and NetworkPolicy, a pod's annotation, a Job's and a pod's
    delete."""
    h.install_crd(admin_kubectl)
    kubectl.apply(job_manifest("owner"))  # a real owner, so the garbage collector keeps its children
    owner = kubectl.json("get", "longcontextjob", "owner")
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubectl.kubeconfig), client_configuration=config)
    api = CountingApiClient(config)
    kube = Kube(api)
    pod = {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "absent-node"}
    for i in range(20):
        kube.post_event(owner, "Normal", "Created", f"write {i}")
        assert kube.create_owned(config_map(i), owner)
        assert not kube.create_owned(config_map(i), owner)  # the existing one patched
        assert kube.create_owned(network_policy(), owner) == (i == 0)  # then patched
        kube.annotate_pod(namespace, "absent", str(uuid.uuid4()), "longctx.io/x", "y")  # 404, ignored
        kube.delete_job(namespace, "absent", str(uuid.uuid4()))  # 404, ignored
        created = kube.core.create_namespaced_pod(namespace, {"metadata": {"name": f"p-{i}"}, "spec": pod})
        kube.delete_pod(namespace, f"p-{i}", created.metadata.uid, grace_seconds=0)
        kube.delete_pod(namespace, "absent", str(uuid.uuid4()), grace_seconds=0)  # 404, ignored
    assert opened(api) == 1
