"""The pod's placement for the trainer's ring order (operator/render/env.py topology_env): the
node's name and each topology level's label through the downward API, the rank order, and the
placement annotation's file beside the trainer's config (render/workload.py)."""

import kubernetes_validate

from longctx_operator import names
from longctx_operator.api import parse_job
from longctx_operator.config import OperatorConfig
from longctx_operator.layout import ResolvedLayout
from longctx_operator.render import render_workload
from longctx_trainer.contract import podenv
from support.jobs import job_manifest
from support.manifests import apply_case

BASE = job_manifest(preset="llama3-8b", sequence_length=131072, layout=(1, 8, 4), resources=(4, 8, "h100-80gb"))
LAYOUT = ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=1)


def pod_spec(scheduling: dict | None = None, config: OperatorConfig | None = None) -> dict:
    job = parse_job(apply_case(BASE, {"set": {"spec.scheduling": scheduling or {}}}))
    workload = render_workload(job, LAYOUT, 1, config).job
    kubernetes_validate.validate(workload, "1.36", strict=True)
    return workload["spec"]["template"]["spec"]


def env(scheduling: dict | None = None, config: OperatorConfig | None = None) -> dict:
    container = pod_spec(scheduling, config)["containers"][0]
    return {
        v["name"]: v.get("value", v.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")) for v in container["env"]
    }


def test_levels_are_the_zone_then_the_topology_key_then_the_node():
    e = env()
    assert e[podenv.TOPOLOGY_LEVELS] == "topology.kubernetes.io/zone,nvidia.com/gpu.clique"
    assert e[podenv.topology_level(0)] == "metadata.labels['topology.kubernetes.io/zone']"
    assert e[podenv.topology_level(1)] == "metadata.labels['nvidia.com/gpu.clique']"
    assert podenv.topology_level(2) not in e
    assert e[podenv.NODE_NAME] == "spec.nodeName"
    assert e[podenv.RANK_ORDER] == "topology"


def test_a_zone_topology_key_is_one_level():
    e = env({"topologyKey": "topology.kubernetes.io/zone"})
    assert e[podenv.TOPOLOGY_LEVELS] == "topology.kubernetes.io/zone"
    assert podenv.topology_level(1) not in e


def test_kueue_topology_keeps_the_index_order_kueue_placed():
    kueue = {"admission": "kueue", "queueName": "q", "topologyKey": "example.com/rack"}
    assert env({**kueue, "kueueTopology": "required"})[podenv.RANK_ORDER] == "index"
    assert env(kueue)[podenv.RANK_ORDER] == "topology"  # kueue without TAS: the pods' own affinity


def test_the_operators_topology_labels_are_levels_and_the_placement_file_is_beside_the_config():
    e = env(config=OperatorConfig(topology_labels=["example.com/rack"]))
    assert e[podenv.TOPOLOGY_LEVELS] == "topology.kubernetes.io/zone,example.com/rack,nvidia.com/gpu.clique"
    assert e[podenv.topology_level(1)] == "metadata.labels['example.com/rack']"
    assert e[podenv.PLACEMENT_FILE] == f"{names.CONFIG_MOUNT}/{names.PLACEMENT_FILE}"
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == "trainer-config")
    assert volume["projected"]["sources"] == [
        {"configMap": {"name": "job-trainer"}},
        {
            "downwardAPI": {
                "items": [
                    {
                        "path": "placement.json",
                        "fieldRef": {"fieldPath": "metadata.annotations['longctx.io/placement']"},
                    }
                ]
            }
        },
    ]


def test_no_placement_file_where_the_operator_cannot_read_nodes():
    config = OperatorConfig(read_nodes=False)
    assert podenv.PLACEMENT_FILE not in env(config=config)
    volume = next(v for v in pod_spec(config=config)["volumes"] if v["name"] == "trainer-config")
    assert volume["projected"]["sources"] == [{"configMap": {"name": "job-trainer"}}]
