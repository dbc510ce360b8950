"""The hardware catalogue (longctx_trainer.contract.hardware) is the one place a GPU or a fabric is added:
everything else derives from it, and what cannot (a fabric's pod settings) is checked here."""

import json
import os
import subprocess
import sys
from pathlib import Path

from longctx_operator.api.spec import NetworkSpec
from longctx_operator.render.fabrics import PROFILES
from longctx_trainer.contract.hardware import FABRICS, GPUS

ROOT = Path(__file__).resolve().parents[3]

# Run in a fresh interpreter: the API types are built from the catalogue at import, so the fake
# GPU goes into the catalogue before anything else is imported, and nowhere else.
FAKE_GPU_EVERYWHERE = r"""
import json, types
from longctx_trainer.contract import hardware
hardware.GPUS["fake-96gb"] = hardware.Gpu(
    "fake-96gb", "FAKE-GPU-96GB", "FAKE", 1234 * hardware.TERA, None, 96 * hardware.GIB,
    5000 * hardware.GB, "Fake link", 50 * hardware.GB, 600 * hardware.GB)

from longctx_operator.api import parse_job
from longctx_operator.api.crd import crd
from longctx_operator.names import API_VERSION, KIND
from longctx_operator.planner import format_table, plan
from longctx_operator.render import render_workload
from longctx_operator.resolve import plan_request, resolve_layout
from longctx_trainer.peak import peak_flops

job = parse_job({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "fake"},
                 "spec": {"model": {"preset": "llama3-8b"}, "sequenceLength": 65536,
                          "resources": {"nodes": 2, "gpuType": "fake-96gb"}}})
schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
resources = schema["properties"]["spec"]["properties"]["resources"]["properties"]
planned = plan(plan_request(job.spec))
layout, _ = resolve_layout(job.spec)
pod = render_workload(job, layout).job["spec"]["template"]["spec"]
print(json.dumps({
    "crd_enum": resources["gpuType"]["enum"],
    "planned_devices": planned.chosen.layout.devices,
    "plan_names_link": "Fake link" in format_table(planned),
    "node_selector": pod["nodeSelector"],
    "peak": peak_flops(types.SimpleNamespace(device_kind="NVIDIA FAKE 96GB")),
}))
"""


def test_a_gpu_added_to_the_catalogue_is_known_everywhere():
    env = {k: v for k, v in os.environ.items() if k != "LONGCTX_PEAK_FLOPS"}
    result = subprocess.run(
        [sys.executable, "-c", FAKE_GPU_EVERYWHERE], capture_output=True, text=True, cwd=ROOT / "tests", env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert "fake-96gb" in seen["crd_enum"]  # the API server accepts it (parse_job did offline)
    assert seen["planned_devices"] == 16 and seen["plan_names_link"]
    assert seen["node_selector"]["nvidia.com/gpu.product"] == "FAKE-GPU-96GB"
    assert seen["peak"] == 1234e12


def test_every_fabric_has_one_render_profile():
    assert set(PROFILES) == set(FABRICS)


def test_the_api_describes_every_fabric():
    description = NetworkSpec.model_fields["fabric"].description
    assert [f for f in FABRICS if f not in description] == []


def test_names_and_fabric_gpu_types_are_consistent():
    assert all(name == gpu.name for name, gpu in GPUS.items())
    assert all(name == fabric.name for name, fabric in FABRICS.items())
    assert all(set(f.gpu_types) <= set(GPUS) for f in FABRICS.values() if f.gpu_types)
