"""Tests of operator/kube.py: how the operator's client identifies itself to the API server."""

import kubernetes

from longctx_operator.kube import COMPONENT, CountingApiClient


def test_the_operators_requests_carry_its_user_agent():
    # The API server's audit log tells clients apart by user agent (benchmarks/operator_scale.py).
    client = CountingApiClient(kubernetes.client.Configuration())
    assert client.user_agent.split("/")[0] == COMPONENT
    assert client.default_headers.get("User-Agent", client.user_agent) == client.user_agent
