"""The operator -> trainer contract, both ways.

Operator side: every field of the trainer's config schema is either set from the spec (and a change
of that spec field shows up in the rendered config) or declared trainer-only below; adding a field
to TrainerConfig fails this test until the renderer maps it or it is declared here.
Trainer side: the rendered ConfigMap parses with the trainer's own loader. (tests/integration/
test_local_run.py runs real trainer processes on a rendered config.)
"""

import pytest
import yaml
from pydantic import BaseModel

from longctx_operator.api import parse_job
from longctx_operator.layout import ResolvedLayout
from longctx_operator.render import render_workload
from longctx_operator.resolve import resolve_layout
from longctx_trainer.contract.config import TrainerConfig, load_config
from support.jobs import job_manifest
from support.manifests import apply_case

TRAINER_ONLY = {
    "remat",
    "seed",
    "log_every",
    "optimizer.beta1",
    "optimizer.beta2",
    "data.seed",
    "checkpoint.keep",
    "metrics.probe_every_steps",
}
BASE = job_manifest("c", sequence_length=1024, layout=(1, 2, 2), resources=(1, 4, "cpu"))
LAYOUT = ResolvedLayout(data=1, context=2, tensor=2, processes_per_node=1)
# (spec change, layout, config path, expected value)
MAPPING = [
    ({"metadata.name": "other"}, LAYOUT, "job_name", "other"),
    ({"metadata.name": "other"}, LAYOUT, "metrics.job", "other"),
    (
        {
            "spec.model": {
                "layers": 3,
                "hidden": 64,
                "heads": 4,
                "kvHeads": 2,
                "ffn": 96,
                "vocab": 300,
                "tieEmbeddings": True,
                "ropeTheta": 1000.0,
            }
        },
        LAYOUT,
        "model",
        {
            "preset": None,
            "layers": 3,
            "hidden": 64,
            "heads": 4,
            "kv_heads": 2,
            "ffn": 96,
            "vocab": 300,
            "tie_embeddings": True,
            "rope_theta": 1000.0,
            "rope_scaling": None,
        },
    ),
    (
        {"spec.model": {"preset": "tiny", "ropeTheta": 2.0e6, "ropeScaling": {"factor": 8, "originalContext": 4096}}},
        LAYOUT,
        "model",
        {
            "preset": "tiny",
            "layers": 2,
            "hidden": 128,
            "heads": 8,
            "kv_heads": 2,
            "ffn": 384,
            "vocab": 256,
            "tie_embeddings": True,
            "rope_theta": 2.0e6,
            "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 4096},
        },
    ),
    ({"spec.sequenceLength": 2048}, LAYOUT, "sequence_length", 2048),
    ({"spec.globalBatchTokens": 4096}, LAYOUT, "global_batch_tokens", 4096),
    ({"spec.steps": 7}, LAYOUT, "steps", 7),
    ({"spec.precision": "fp32"}, LAYOUT, "precision", "fp32"),
    ({"spec.precision": "fp8", "spec.fp8.amaxHistory": 32}, LAYOUT, "fp8.amax_history", 32),
    ({"spec.precision": "fp8", "spec.fp8.lmHead": True}, LAYOUT, "fp8.lm_head", True),
    (
        {"spec.globalBatchTokens": 2048},
        ResolvedLayout(data=2, context=1, tensor=2, processes_per_node=1),
        "parallelism.data",
        2,
    ),
    ({}, ResolvedLayout(data=1, context=4, tensor=1, processes_per_node=1), "parallelism.context", 4),
    ({}, ResolvedLayout(data=1, context=4, tensor=1, processes_per_node=1), "parallelism.tensor", 1),
    # None: the layout resolve_layout makes of the spec (which carries the attention kind)
    ({"spec.parallelism.attention": "allGather"}, None, "parallelism.attention", "all_gather"),
    ({"spec.parallelism.attention": "ulysses"}, None, "parallelism.attention", "ulysses"),
    ({"spec.parallelism.attention": "auto"}, None, "parallelism.attention", "ring"),  # CPU: no planner
    (
        {
            "spec.parallelism.attention": "hybrid",
            "spec.parallelism.ulysses": 2,
            "spec.parallelism.context": 4,
            "spec.parallelism.tensor": 1,
        },
        None,
        "parallelism.ulysses",
        2,
    ),
    ({"spec.parallelism.loadBalance": "striped"}, None, "parallelism.load_balance", "striped"),
    ({}, None, "parallelism.load_balance", "dual_chunk_swap"),  # auto without a document mask
    # auto with the document mask: the documents layout (status.layout.loadBalance says so)
    ({"spec.data.packing": {"documentMask": True, "separator": 7}}, None, "parallelism.load_balance", "documents"),
    (
        {"spec.parallelism.adaptive": True, "spec.data.packing": {"documentMask": True, "separator": 7}},
        None,
        "parallelism.load_balance",
        "dual_chunk_swap",  # auto under adaptive: its ring stream is dual-chunk-swap's
    ),
    (
        {"spec.parallelism.adaptive": True, "spec.data.packing": {"documentMask": True, "separator": 7}},
        LAYOUT,
        "parallelism.adaptive",
        True,
    ),
    ({}, ResolvedLayout(data=1, context=2, tensor=2, processes_per_node=1, offload=True), "offload.enabled", True),
    (
        {},
        ResolvedLayout(data=1, context=2, tensor=2, processes_per_node=1, offload=True, chunk_tokens=256),
        "offload.chunk_tokens",
        256,
    ),
    (
        {},
        ResolvedLayout(data=1, context=2, tensor=2, processes_per_node=1, remat_policy="save_attention"),
        "remat_policy",
        "save_attention",
    ),
    ({"spec.optimizer.learningRate": 0.01}, LAYOUT, "optimizer.learning_rate", 0.01),
    ({"spec.optimizer.warmupSteps": 3}, LAYOUT, "optimizer.warmup_steps", 3),
    ({"spec.optimizer.weightDecay": 0.0}, LAYOUT, "optimizer.weight_decay", 0.0),
    ({"spec.optimizer.gradClip": 0.5}, LAYOUT, "optimizer.grad_clip", 0.5),
    ({"spec.optimizer.schedule": "constant"}, LAYOUT, "optimizer.schedule", "constant"),
    ({"spec.data": {"kind": "text", "path": "/data/x.txt"}}, LAYOUT, "data.kind", "text"),
    ({"spec.data": {"kind": "text", "path": "/data/x.txt"}}, LAYOUT, "data.path", "/data/x.txt"),
    ({"spec.data.packing": {"documentMask": True, "separator": 7}}, LAYOUT, "data.packing.document_mask", True),
    ({"spec.data.packing": {"resetPositions": True, "separator": 7}}, LAYOUT, "data.packing.reset_positions", True),
    ({"spec.data.packing": {"documentMask": True, "separator": 7}}, LAYOUT, "data.packing.separator", 7),
    ({"spec.checkpoint.path": "/ckpt"}, LAYOUT, "checkpoint.path", "/ckpt"),
    ({"spec.checkpoint.intervalSteps": 9}, LAYOUT, "checkpoint.interval_steps", 9),
    ({"spec.metrics.port": 9500}, LAYOUT, "metrics.port", 9500),
    (
        {"spec.initFrom": {"path": "/weights/llama", "persistentVolumeClaim": "w"}},
        LAYOUT,
        "init_from",
        "/weights/llama",
    ),
]
# communication needs a GPU job; it is covered by its own test below.
COMMUNICATION = "communication"


def rendered_config(changes: dict, layout: ResolvedLayout | None) -> dict:
    job = parse_job(apply_case(BASE, {"set": changes}))
    config_map = render_workload(job, layout or resolve_layout(job.spec)[0]).config_map
    return yaml.safe_load(config_map["data"]["trainer.yaml"])


def _get(config: dict, dotted: str):
    for name in dotted.split("."):
        config = config[name]
    return config


def _leaves(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel) and name != "model":
            out |= _leaves(kind, f"{prefix}{name}.")
        else:
            out.add(prefix + name)
    return out


@pytest.mark.parametrize("changes,layout,path,expected", MAPPING, ids=[m[2] for m in MAPPING])
def test_spec_field_reaches_the_trainer_config(changes, layout, path, expected):
    assert _get(rendered_config(changes, layout), path) == expected


def test_every_trainer_config_field_is_mapped_or_trainer_only():
    mapped = {m[2] for m in MAPPING} | {COMMUNICATION}
    assert mapped | TRAINER_ONLY == _leaves(TrainerConfig)
    assert not mapped & TRAINER_ONLY


def test_communication_reaches_the_trainer_config():
    job = parse_job(
        apply_case(
            BASE,
            {
                "set": {
                    "spec.resources": {"nodes": 1, "gpusPerNode": 4, "gpuType": "h100-80gb"},
                    "spec.communication.collectivePermute": "nvshmem",
                }
            },
        )
    )
    config_map = render_workload(job, ResolvedLayout(data=1, context=2, tensor=2, processes_per_node=4)).config_map
    assert yaml.safe_load(config_map["data"]["trainer.yaml"])["communication"] == "nvshmem"


def test_trainer_loads_the_rendered_config_file(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump(rendered_config({}, LAYOUT)))
    config = load_config(path)
    assert (config.parallelism.context, config.parallelism.tensor) == (2, 2)
    assert config.model.param_count() > 0


def test_preset_rope_scaling_is_kept_unless_the_spec_sets_its_own():
    def model_of(model: dict) -> dict:
        return rendered_config({"spec.model": model}, LAYOUT)["model"]

    assert model_of({"preset": "1b"})["rope_scaling"] == {
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_context": 8192,
    }
    assert model_of({"preset": "1b", "ropeTheta": 1.0e6})["rope_scaling"]["factor"] == 32.0
    assert model_of({"preset": "1b", "ropeScaling": {"factor": 64}})["rope_scaling"]["factor"] == 64.0
    assert model_of({"preset": "llama3-8b"})["rope_scaling"] is None
