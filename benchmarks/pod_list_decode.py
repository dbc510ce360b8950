"""Builtin admission's JSON list of the other pods: CPU to decode and count it, json.loads against
the operator's typed decoding (occupancy.decode_page), on the same pages. The operator lists only
the pods not bound to a node this way now; the bound ones come as protobuf (bound_gpus.py,
docs/operator.md), so this measures a list of that many waiting pods, or the decoding before.

    python benchmarks/pod_list_decode.py [--pods 20000] [--page 500] [--reps 3]

The pods are shaped as the API server serves a plain pod that no controller owns (the busy
scenario's unrelated pods in benchmarks/operator_scale.py: one container requesting CPU, bound to
a node), with what the server adds: managed fields, the service-account token volume and its
mount, default tolerations, QoS class, and a Running pod's conditions and container status. Each
row is the process CPU of decoding every page and counting the pods (`occupancy.occupancy`), the
best of --reps; the ratio is the typed decoding's share of json.loads'.
"""

from __future__ import annotations

import argparse
import json
import time

from longctx_operator.occupancy import WAITING_PAGE, decode_page, occupancy


def served_pod(i: int) -> dict:
    name, stamp = f"busy-{i:06d}", "2026-11-28T01:00:00Z"
    mount = "/var/run/secrets/kubernetes.io/serviceaccount"
    return {
        "metadata": {
            "name": name,
            "namespace": "busy",
            "uid": f"2b1f0c7e-{i:012d}",
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": stamp,
            "labels": {"app": "busy"},
            "managedFields": [
                {
                    "manager": "longctx-bench-churn",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {
                            "f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}, "f:resources": {}}},
                            "f:nodeName": {},
                        },
                    },
                }
            ],
        },
        "spec": {
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {}}]}}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "10m"}},
                    "volumeMounts": [{"name": "kube-api-access", "readOnly": True, "mountPath": mount}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "Always",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"node-{i % 2000}",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute"}
                for taint in ("not-ready", "unreachable")
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": stamp}
                for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "podIP": "10.0.0.1",
            "startTime": stamp,
            "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "busybox", "started": True}],
            "qosClass": "Burstable",
        },
    }


def cpu_seconds(decode, pages: list[bytes], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        found = occupancy(pod for page in pages for pod in decode(page)["items"])
        best = min(best, time.process_time() - start)
    assert not found.used and not found.waiting  # no GPUs asked: both decodings counted the same
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--page", type=int, default=WAITING_PAGE)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    pods = [served_pod(i) for i in range(args.pods)]
    pages = [
        json.dumps({"kind": "PodList", "metadata": {"continue": ""}, "items": pods[i : i + args.page]}).encode()
        for i in range(0, args.pods, args.page)
    ]
    size = sum(map(len, pages))
    print(f"{args.pods} pods in {len(pages)} pages, {size / 1e6:.1f} MB ({size // args.pods} bytes a pod)")
    loads = cpu_seconds(json.loads, pages, args.reps)
    typed = cpu_seconds(decode_page, pages, args.reps)
    print(f"json.loads + count   {loads:6.3f} CPU s")
    print(f"typed decode + count {typed:6.3f} CPU s   x{typed / loads:.2f} of json.loads")


if __name__ == "__main__":
    main()
