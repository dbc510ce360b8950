"""operator/planner/adaptive.py: adaptive context parallelism's bytes over the context axis,
modelled from a sample of document lengths (data.packing.documentLengths), and `longctx plan`
showing them."""

import json
import subprocess
import sys
from pathlib import Path

from longctx_operator.planner import PlanRequest, plan
from longctx_operator.planner.adaptive import _window, adaptive_saving
from longctx_trainer.contract.adaptive import LENGTH_SAMPLES, length_sample, ring_bytes, variants
from longctx_trainer.contract.presets import PRESETS
from support.jobs import job_manifest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "benchmarks"))
from adaptive_cp import numpy_source_lengths  # noqa: E402  (the benchmark's long tail: numpy's sources)

MIB = 2**20


def _plan(seq: int, lengths, *, attention="ring", context=8, batch=1, adaptive=True):
    return plan(
        PlanRequest(
            model=PRESETS["llama3-8b"],
            sequence_length=seq,
            global_batch_tokens=batch * seq,
            nodes=context // 8,
            gpus_per_node=8,
            gpu="h200-141gb",
            fabric="infiniband",
            data=1,
            context=context,
            tensor=1,
            attention=attention,
            adaptive=adaptive,
            document_lengths=tuple(lengths),
        )
    )


def test_the_long_tail_moves_at_least_2x_fewer_bytes_at_1m_tokens():
    """numpy's source files (407 in numpy 2.4.6; median ~1.3K tokens, p99 ~49K), as the 256-length
    sample `longctx tokenize` records: at 1M tokens over 8 GPUs most steps need no ring or a
    small one; at 128K every step needs the whole shard in the ring (no saving)."""
    sample = length_sample(numpy_source_lengths())
    assert len(sample) == LENGTH_SAMPLES
    long = adaptive_saving(_plan(MIB, sample))
    assert long.ratio >= 2.0 and long.enabled
    m, shard = PRESETS["llama3-8b"], MIB // 8
    assert long.fixed_bytes == m.layers * ring_bytes(shard, 8, m.kv_heads, m.head_dim, 2)  # bf16 K/V
    assert {ring for ring, _ in long.ring_parts} <= {v.ring for v in variants(MIB, 8)}
    short = adaptive_saving(_plan(131072, sample))
    assert short.ratio == 1.0 and short.ring_parts == ((131072 // 8, short.steps),)


def test_short_documents_never_ring_and_one_spanning_document_always_does():
    assert adaptive_saving(_plan(131072, [64, 500, 1000])).adaptive_bytes == 0
    spanning = adaptive_saving(_plan(131072, [131072]))
    assert spanning.adaptive_bytes == spanning.fixed_bytes > 0


def test_windows_start_inside_long_documents_as_often_as_their_tokens_say():
    """A random offset lands in a document with probability proportional to its length: with one
    document of 10,000 tokens per 100 of 10, a window's first piece comes from it ~91% of the time.
    Fails when the first document is drawn uniformly (~1%)."""
    import random

    rng = random.Random(1)
    sample = [10] * 100 + [10_000]
    firsts = [_window(sample, 20_000, rng)[0] for _ in range(2000)]
    assert 0.85 < sum(n > 10 for n in firsts) / len(firsts) < 0.97
    window = _window(sample, 20_000, rng)
    assert sum(window) == 20_000 and min(window) >= 1


def test_no_model_where_adaptive_cannot_run_or_without_lengths():
    sample = [1000, 2000]
    assert adaptive_saving(_plan(131072, [])) is None
    assert adaptive_saving(_plan(131072, sample, attention="all_gather")) is None
    off = adaptive_saving(_plan(131072, sample, adaptive=False))
    assert off is not None and not off.enabled  # what turning it on would save


def test_length_sample_keeps_the_tail():
    lengths = list(range(1, 10_001))
    sample = length_sample(lengths)
    assert len(sample) == LENGTH_SAMPLES and sample == sorted(sample)
    assert sample[0] < 30 and sample[-1] > 9_970  # both ends, not the first 256
    assert length_sample([5, 3, 9]) == [3, 5, 9]


def test_longctx_plan_shows_it_without_numpy(tmp_path):
    """The operator image has no numpy: the model is plain Python, and `longctx plan` prints it."""
    manifest = job_manifest(
        "adaptive",
        preset="llama3-8b",
        sequence_length=131072,
        parallelism={"mode": "manual", "data": 1, "context": 8, "tensor": 1, "adaptive": True},
        resources=(1, 8, "h200-141gb"),
        data={
            "kind": "tokens",
            "path": "/data/corpus.bin",
            "packing": {"documentMask": True, "documentLengths": [100, 300, 2000]},
        },
    )
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(manifest))
    script = (
        "import sys; sys.modules['numpy'] = None; from longctx_operator.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    text = subprocess.run([sys.executable, "-c", script, "plan", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert text.returncode == 0, text.stderr
    assert "Adaptive context parallelism moves 0.00 GiB per GPU and step" in text.stdout
    assert "no ring at all" in text.stdout
    js = subprocess.run(
        [sys.executable, "-c", script, "plan", str(path), "--output", "json"], capture_output=True, text=True, cwd=ROOT
    )
    adaptive = json.loads(js.stdout)["adaptive"]
    assert adaptive["enabled"] and adaptive["adaptiveBytesPerStep"] == 0 and adaptive["ratio"] is None
    assert adaptive["fixedBytesPerStep"] > 0
