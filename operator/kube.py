"""Thin, synchronous Kubernetes client helpers of the operator (run in worker threads).

Children are created with create-or-get (deterministic names, 409 Conflict means it is there), so
a restarted operator never duplicates them. Only the kinds the renderer makes are created, always
in the owner's own namespace whatever the object says, and an object that is there already is
used (or, for the ConfigMap, updated) only when this job owns it. Every request is counted in
longctx_operator_api_requests_total.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

import kubernetes
from kubernetes.client.exceptions import ApiException

from . import metrics
from .names import GROUP, KIND, PLURAL, VERSION
from .observe import controller_of, timestamp

COMPONENT = "longctx-operator"


class NotOwned(Exception):
    """A child's name is taken by an object this job does not own: it is neither used nor changed.
    `transient`: the object is on its way out (being deleted, or left by an earlier LongContextJob
    of the same name, which the garbage collector removes), so a retry may succeed."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


def user_agent() -> str:
    """The operator's requests say who sent them (the API server's audit log, its user agent)."""
    try:
        return f"{COMPONENT}/{package_version('longctx')}"
    except PackageNotFoundError:
        return COMPONENT


class CountingApiClient(kubernetes.client.ApiClient):
    """Counts every HTTP request its REST client sends; sends them as the operator's user agent."""

    def __init__(self, configuration: kubernetes.client.Configuration):
        super().__init__(configuration)
        self.user_agent = user_agent()
        send = self.rest_client.request

        def counted(method, url, *args, **kwargs):
            metrics.API_REQUESTS.labels(verb=method.lower()).inc()
            return send(method, url, *args, **kwargs)

        self.rest_client.request = counted


def load_client(connections: int) -> CountingApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig ($KUBECONFIG). It keeps up
    to `connections` connections open: one per thread that calls it, or each burst of concurrent
    requests beyond the pool opens new TLS connections and drops them (a handshake each, on the
    API server too)."""
    config = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=config)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(client_configuration=config)
    config.connection_pool_maxsize = connections
    return CountingApiClient(config)


def owner_reference(owner: dict) -> dict:
    meta = owner["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _drained(response) -> bytes:
    """The body of a response asked for with `_preload_content=False`, read to its end, which puts
    its connection back in the pool. A response left unread keeps its connection, so the next
    request opened a new one: a TLS handshake for every create, Event and delete, about 8 ms of the
    client's CPU against 1.7 for the request itself (docs/operator.md, "Connections kept")."""
    return response.data


def _json(response) -> dict:
    return json.loads(_drained(response))


class Kube:
    def __init__(self, api: kubernetes.client.ApiClient):
        self.core = kubernetes.client.CoreV1Api(api)
        self.batch = kubernetes.client.BatchV1Api(api)
        self.networking = kubernetes.client.NetworkingV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    def _calls(self, kind: str):
        """(create, read, patch) of a kind the renderer makes; any other kind is refused."""
        calls = {
            "Service": (
                self.core.create_namespaced_service,
                self.core.read_namespaced_service,
                self.core.patch_namespaced_service,
            ),
            "ConfigMap": (
                self.core.create_namespaced_config_map,
                self.core.read_namespaced_config_map,
                self.core.patch_namespaced_config_map,
            ),
            "Job": (self.batch.create_namespaced_job, self.batch.read_namespaced_job, self.batch.patch_namespaced_job),
            "NetworkPolicy": (  # only with the configuration's gangNetworkPolicy
                self.networking.create_namespaced_network_policy,
                self.networking.read_namespaced_network_policy,
                self.networking.patch_namespaced_network_policy,
            ),
        }
        if kind not in calls:
            raise ValueError(f"the operator does not create {kind!r} objects")
        return calls[kind]

    def create_owned(self, obj: dict, owner: dict) -> bool:
        """Create-or-get a Service or Job, create-or-update a ConfigMap or NetworkPolicy (the next
        generation reads the current spec), in the owner's namespace and owned by `owner`. True when
        it was created now; NotOwned when the name belongs to an object of someone else."""
        create, read, patch = self._calls(obj["kind"])
        namespace, name = owner["metadata"]["namespace"], obj["metadata"]["name"]
        obj["metadata"]["namespace"] = namespace
        obj["metadata"]["ownerReferences"] = [owner_reference(owner)]
        try:
            _drained(create(namespace, obj, _preload_content=False))
            return True
        except ApiException as e:
            if e.status != 409:
                raise
        existing = _json(read(name, namespace, _preload_content=False))
        controller = controller_of(existing) or {}
        if controller.get("uid") != owner["metadata"]["uid"]:
            leftover = controller.get("kind") == KIND and controller.get("name") == owner["metadata"]["name"]
            raise NotOwned(
                f"{obj['kind']} {name} already exists and is not owned by LongContextJob "
                f"{owner['metadata']['name']}: rename the job or remove that {obj['kind']}",
                transient=leftover or bool(existing["metadata"].get("deletionTimestamp")),
            )
        if obj["kind"] == "ConfigMap":
            _drained(patch(name, namespace, {"data": obj.get("data", {})}, _preload_content=False))
        elif obj["kind"] == "NetworkPolicy":  # the metrics ports follow the spec
            _drained(patch(name, namespace, {"spec": obj["spec"]}, _preload_content=False))
        return False

    def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Deletes a generation's Job, only the one with `uid` (a Job this job created: the API
        server refuses the delete of any other object of that name); foreground propagation keeps it
        until its pods are gone, so "Job absent" means the gang's GPUs are free."""
        if not uid:
            raise ValueError(f"deleting Job {namespace}/{name} needs the uid of the Job this job created")
        options = kubernetes.client.V1DeleteOptions(
            propagation_policy="Foreground", preconditions=kubernetes.client.V1Preconditions(uid=uid)
        )
        try:
            _drained(self.batch.delete_namespaced_job(name, namespace, body=options, _preload_content=False))
        except ApiException as e:
            if e.status not in (404, 409):  # 409: the uid precondition failed, the name is another Job's
                raise

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int) -> None:
        """Deletes a pod of a generation's Job (only the one with `uid`) within `grace_seconds`,
        shorter than its own grace period: 0 for a pod on a lost node (no kubelet will confirm its
        end), a few seconds for the pods of a broken gang (lifecycle.DeleteWorkload.broken)."""
        options = kubernetes.client.V1DeleteOptions(
            grace_period_seconds=grace_seconds, preconditions=kubernetes.client.V1Preconditions(uid=uid)
        )
        try:
            _drained(self.core.delete_namespaced_pod(name, namespace, body=options, _preload_content=False))
        except ApiException as e:
            if e.status not in (404, 409):  # 409: the uid precondition failed, the name is another pod's
                raise

    def annotate_pod(self, namespace: str, name: str, uid: str, key: str, value: str) -> None:
        """Sets one annotation of the pod with `uid` (merge patch; the API server refuses it when the
        name is now another pod's); a pod already gone is left alone."""
        body = {"metadata": {"uid": uid, "annotations": {key: value}}}
        try:
            _drained(self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False))
        except ApiException as e:
            if e.status not in (404, 409, 422):  # gone, or the uid is another pod's
                raise

    def read_config_map(self, namespace: str, name: str) -> dict:
        return _json(self.core.read_namespaced_config_map(name, namespace, _preload_content=False))

    def patch_status(self, namespace: str, name: str, status: dict) -> dict:
        """Merge-patches status fields (None removes one); returns the updated object."""
        return _json(
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": status}, _preload_content=False
            )
        )

    def post_event(self, owner: dict, type_: str, reason: str, message: str) -> None:
        meta = owner["metadata"]
        now = timestamp(datetime.now(UTC))
        event = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": os.environ.get("HOSTNAME", COMPONENT),
        }
        _drained(self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False))
