"""operator/kube.py against the real API server: its writes reuse the connections of its pool."""

from __future__ import annotations

import uuid

import kubernetes
import pytest

from longctx_operator.kube import CountingApiClient, Kube

pytestmark = pytest.mark.integration


def opened(api: kubernetes.client.ApiClient) -> int:
    """Connections the client's pool has opened so far, to every host."""
    pools = api.rest_client.pool_manager.pools
    return sum(pools[key].num_connections for key in pools.keys())


def test_writes_reuse_one_connection_whatever_their_answer(cluster, namespace):
    """A response the operator does not read would keep its connection, and every next request
    would open one more (a TLS handshake each). Twenty writes of each kind it sends without reading
    the answer, one at a time, succeeding and refused, must open one connection."""
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=config)
    api = CountingApiClient(config)
    kube = Kube(api)
    owner = {"metadata": {"name": "owner", "namespace": namespace, "uid": str(uuid.uuid4())}}
    for i in range(20):
        kube.post_event(owner, "Normal", "Created", f"write {i}")
        assert kube.create_owned({"kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}, "data": {}}, owner)
        kube.annotate_pod(namespace, "absent", str(uuid.uuid4()), "longctx.io/x", "y")  # 404, ignored
        kube.delete_job(namespace, "absent", str(uuid.uuid4()))  # 404, ignored
    assert opened(api) == 1
