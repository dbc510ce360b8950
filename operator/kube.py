"""Thin, synchronous Kubernetes client helpers of the operator (run in worker threads).

Children are created with create-or-get (deterministic names, 409 Conflict means it is there), so
a restarted operator never duplicates them. Every request is counted in
longctx_operator_api_requests_total.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone

import kubernetes
from kubernetes.client.exceptions import ApiException

from . import metrics
from .lifecycle import timestamp

GROUP, VERSION, PLURAL, KIND = "longctx.io", "v1alpha1", "longcontextjobs", "LongContextJob"
COMPONENT = "longctx-operator"
# Test hook (docs/operator.md): set to NAMESPACE/NAME, the operator exits right after creating that
# job's Service, before its Job, to prove that a restarted operator creates exactly one of each.
EXIT_AFTER_SERVICE_ENV = "LONGCTX_OPERATOR_TEST_EXIT_AFTER_SERVICE"
EXIT_AFTER_SERVICE_CODE = 17


class CountingApiClient(kubernetes.client.ApiClient):
    """Counts every HTTP request its REST client sends."""

    def __init__(self, configuration: kubernetes.client.Configuration):
        super().__init__(configuration)
        send = self.rest_client.request

        def counted(method, url, *args, **kwargs):
            metrics.API_REQUESTS.labels(verb=method.lower()).inc()
            return send(method, url, *args, **kwargs)

        self.rest_client.request = counted


def load_client() -> CountingApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig ($KUBECONFIG)."""
    config = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=config)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(client_configuration=config)
    config.connection_pool_maxsize = 16
    return CountingApiClient(config)


def owner_reference(owner: dict) -> dict:
    meta = owner["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _json(response) -> dict:
    return json.loads(response.data)


class Kube:
    def __init__(self, api: kubernetes.client.ApiClient):
        self.core = kubernetes.client.CoreV1Api(api)
        self.batch = kubernetes.client.BatchV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    def _create(self, obj: dict, replace_on_conflict: bool = False) -> bool:
        """Creates `obj`; True if created, False if it was there (then patched if asked)."""
        ns, kind, name = obj["metadata"]["namespace"], obj["kind"], obj["metadata"]["name"]
        create, patch = {
            "Service": (self.core.create_namespaced_service, self.core.patch_namespaced_service),
            "ConfigMap": (self.core.create_namespaced_config_map, self.core.patch_namespaced_config_map),
            "Job": (self.batch.create_namespaced_job, self.batch.patch_namespaced_job),
        }[kind]
        try:
            create(ns, obj, _preload_content=False)
            return True
        except ApiException as e:
            if e.status != 409:
                raise
        if replace_on_conflict:
            patch(name, ns, {"data": obj.get("data", {})}, _preload_content=False)
        return False

    def create_owned(self, obj: dict, owner: dict) -> bool:
        """Create-or-get a Service or Job, create-or-update a ConfigMap (the next generation reads
        the current spec), owned by `owner`. True when it was created now."""
        obj["metadata"]["ownerReferences"] = [owner_reference(owner)]
        created = self._create(obj, replace_on_conflict=obj["kind"] == "ConfigMap")
        owner_key = f"{owner['metadata']['namespace']}/{owner['metadata']['name']}"
        if created and obj["kind"] == "Service" and os.environ.get(EXIT_AFTER_SERVICE_ENV) == owner_key:
            os._exit(EXIT_AFTER_SERVICE_CODE)
        return created

    def delete_job(self, namespace: str, name: str) -> None:
        """Deletes a generation's Job; foreground propagation keeps it until its pods are gone, so
        "Job absent" means the gang's GPUs are free."""
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground",
                                             _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    def patch_status(self, namespace: str, name: str, status: dict) -> dict:
        """Merge-patches status fields (None removes one); returns the updated object."""
        return _json(self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}, _preload_content=False))

    def post_event(self, owner: dict, type_: str, reason: str, message: str) -> None:
        meta = owner["metadata"]
        now = timestamp(datetime.now(timezone.utc))
        event = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"],
                               "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason, "message": message[:1024], "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": os.environ.get("HOSTNAME", COMPONENT),
        }
        self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False)
