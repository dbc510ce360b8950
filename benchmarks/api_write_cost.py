"""What one write costs the API server: the LongContextJob's status patch against a ConfigMap's
patch and an Event's create, measured in the same run.

    python benchmarks/api_write_cost.py [--writes 300] [--jobs 10]

Starts a private 2-node control plane (hack/cluster/up, no audit log) with the CRD, creates --jobs
LongContextJobs (no operator: nothing else writes them) and as many ConfigMaps, then sends --writes
of each request below, one after another from one client, and prints the API server's CPU seconds
(its process's user and system time) and the round trip per request, each against the ConfigMap
patch's of the same run:
- the status patch the operator sends as a gang starts (phase, message, counts, a condition);
- a label patch of the same LongContextJobs: what any write of one costs;
- a ConfigMap patch carrying that status as JSON, and an Event create: the cheap writes beside it;
- a gang's ConfigMap create with the placement table of 2,000 simulated nodes (hack/cluster/nodes.py)
  as the operator writes it, and with a table of 8 nodes: what the table's size costs;
- the status patch again after the CRD is applied without its CEL rules (every
  x-kubernetes-validations removed): what the rules add to each write, though the spec they check
  does not change.
benchmarks/operator_scale.py shows where these writes fall in a batch of gangs (docs/operator.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from operator_scale import CRD, SCRIPTS, cpu_seconds, stop_cluster

from longctx_operator.api.crd import CRD_NAME
from longctx_operator.names import GROUP, PLURAL, VERSION
from support.cluster import Kubectl
from support.jobs import job_manifest

NAMESPACE = "write-cost"
BASELINE = "ConfigMap patch"


def status(i: int) -> dict:
    """A starting gang's status as the operator patches it, varied so every patch changes it."""
    return {
        "status": {
            "phase": "Starting",
            "message": f"{i % 8} of 8 ranks Ready",
            "observedGeneration": 1,
            "workloadGeneration": 1,
            "currentWorkload": "gang-g1",
            "workers": {"total": 8, "ready": i % 8, "failed": 0, "succeeded": 0},
            "conditions": [
                {
                    "type": "WorkloadCreated",
                    "status": "True",
                    "reason": "Created",
                    "message": f"Job gang-g1 created ({i})",
                    "lastTransitionTime": "2026-11-28T00:00:00Z",
                }
            ],
        }
    }


def config_map(name: str, nodes: int) -> dict:
    """A gang's ConfigMap as the operator creates it, its placement table of `nodes` simulated nodes."""
    from operator_scale import OPERATOR_CONFIG, manifest, rendered

    from longctx_operator.api.validate import parse_job
    from longctx_operator.config import OperatorConfig
    from longctx_operator.placement import PlacementTables, topology_levels

    listed = subprocess.run(
        [sys.executable, str(SCRIPTS / "nodes.py"), "--count", str(nodes)], check=True, capture_output=True, text=True
    )
    cluster_nodes = json.loads(listed.stdout)["items"]
    for node in cluster_nodes:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    _, made, job = rendered(name, NAMESPACE, 8)
    config = OperatorConfig.model_validate(OPERATOR_CONFIG)
    levels = topology_levels(parse_job(manifest(name, NAMESPACE, 8)).spec, config)
    PlacementTables().add(made, job["spec"]["template"], {n["metadata"]["name"]: n for n in cluster_nodes}, levels)
    return made


def without_cel(schema):
    """The CRD with every x-kubernetes-validations removed."""
    if isinstance(schema, dict):
        return {k: without_cel(v) for k, v in schema.items() if k != "x-kubernetes-validations"}
    if isinstance(schema, list):
        return [without_cel(v) for v in schema]
    return schema


def measure(apiserver: int, writes: int, write: Callable[[int], object]) -> tuple[float, float]:
    """CPU seconds of the API server and seconds of round trip, per request."""
    time.sleep(2)  # the previous round's watch fan-out and compaction settle
    cpu, started = cpu_seconds(apiserver), time.perf_counter()
    for i in range(writes):
        write(i)
    return (cpu_seconds(apiserver) - cpu) / writes, (time.perf_counter() - started) / writes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=300, help="requests of each kind")
    parser.add_argument("--jobs", type=int, default=10, help="LongContextJobs (and ConfigMaps) the writes cycle over")
    args = parser.parse_args()
    import kubernetes

    state = Path(tempfile.mkdtemp(prefix="longctx-write-cost-")) / "cluster"
    env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}
    subprocess.run([str(SCRIPTS / "up"), "--nodes", "2"], check=True, env=env, stdout=subprocess.DEVNULL)
    try:
        cluster = Kubectl(state / "kubeconfig")
        crd = yaml.safe_load(CRD.read_text())
        cluster("apply", "--server-side", "-f", "-", input=yaml.safe_dump(crd))
        cluster.wait_established(CRD_NAME)
        cluster.create_namespace(NAMESPACE)
        names = [f"gang-{i:02d}" for i in range(args.jobs)]
        cluster.apply(*(job_manifest(n, namespace=NAMESPACE, resources=(8, 8, "h100-80gb")) for n in names))
        for name in names:
            cluster("create", "configmap", name, "-n", NAMESPACE, "--from-literal=status={}")
        client = kubernetes.config.new_client_from_config(str(state / "kubeconfig"))
        custom, core = kubernetes.client.CustomObjectsApi(client), kubernetes.client.CoreV1Api(client)
        apiserver = int((state / "pids" / "kube-apiserver.pid").read_text())

        def job(i: int) -> str:
            return names[i % len(names)]

        def patch_status(i: int) -> object:
            return custom.patch_namespaced_custom_object_status(GROUP, VERSION, NAMESPACE, PLURAL, job(i), status(i))

        rounds: dict[str, Callable[[int], object]] = {
            "LongContextJob status patch": patch_status,
            "LongContextJob label patch": lambda i: custom.patch_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, job(i), {"metadata": {"labels": {"round": str(i)}}}
            ),
            BASELINE: lambda i: core.patch_namespaced_config_map(
                job(i), NAMESPACE, {"data": {"status": json.dumps(status(i))}}
            ),
            "Event create": lambda i: core.create_namespaced_event(
                NAMESPACE,
                {
                    "metadata": {"generateName": "write-cost-"},
                    "involvedObject": {"kind": "LongContextJob", "name": job(i), "namespace": NAMESPACE},
                    "reason": "Created",
                    "message": f"Job {job(i)}-g1 created",
                    "type": "Normal",
                },
            ),
        }
        for nodes in (2000, 8):
            made = config_map("table", nodes)
            size = len(json.dumps(made)) // 1024

            def create(i: int, made=made, nodes=nodes) -> object:
                return core.create_namespaced_config_map(
                    NAMESPACE, made | {"metadata": {"name": f"table-{nodes}-{i}", "namespace": NAMESPACE}}
                )

            rounds[f"ConfigMap create, {nodes}-node placement table ({size} KiB)"] = create
        results = {label: measure(apiserver, args.writes, write) for label, write in rounds.items()}
        cluster("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(without_cel(crd)))
        cluster.wait_established(CRD_NAME)
        results["LongContextJob status patch, CRD without CEL rules"] = measure(apiserver, args.writes, patch_status)
    finally:
        stop_cluster(state)

    base_cpu, base_trip = results[BASELINE]
    print(f"{args.writes} requests of each kind, one at a time; the API server's CPU and the round trip per request:")
    for label, (cpu, trip) in results.items():
        print(
            f"  {label:52s} CPU {1000 * cpu:5.1f} ms (x{cpu / base_cpu:.2f} the ConfigMap patch's)"
            f"  round trip {1000 * trip:5.1f} ms (x{trip / base_trip:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
