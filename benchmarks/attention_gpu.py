"""Attention on one GPU: longctx's local kernel against cuDNN flash attention, with and without a
document mask, and its numerics against the fp32 reference there.

    python benchmarks/attention_gpu.py [--seqs 8192 16384 32768] [--heads 32 --kv-heads 8] [--document-tokens 2048]

Causal attention forward + backward (gradients of q, k, v) in bf16, batch 1, head_dim 128, best of
`--reps` after a warm-up. Rows:
- cudnn (peer): `jax.nn.dot_product_attention(implementation="cudnn")`, the fused flash attention
  JAX ships (the kernel Transformer Engine's JAX attention also calls);
- longctx: `context_parallel_attention` at context 1 with FPDT chunks of `--chunk-tokens` (cuDNN on
  the unmasked chunk pairs, the pure-JAX kernel on the diagonal ones, fully masked pairs skipped);
- longctx+offload: the same with K/V chunks and residuals in pinned host memory;
- longctx+docs: documents of random lengths (mean `--document-tokens`), document-masked: chunk
  pairs of different documents are skipped, so it should cost less than the unmasked row;
TFLOP/s count the causal convention's attention FLOPs (6 H Q T^2 for fwd+bwd; for the masked row
the pairs within documents, flops.py). Before timing, each longctx row's output and gradients at
the first length are checked against the fp32 reference (explicit mask) at bf16 tolerance.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from corpus import document_segments
from jax.sharding import AxisType

from longctx_trainer.ops import context_parallel_attention, reference_attention

HEAD_DIM = 128


def _inputs(seq, heads, kv_heads, dtype=jnp.bfloat16):
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (1, seq, heads, HEAD_DIM), dtype)
    k, v = (jax.random.normal(key, (1, seq, kv_heads, HEAD_DIM), dtype) for key in keys[1:3])
    return q, k, v, jax.random.normal(keys[3], q.shape, dtype)


def _grads(attention):
    def loss(q, k, v, do):
        return jnp.sum(attention(q, k, v).astype(jnp.float32) * do.astype(jnp.float32))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _time(fn, args, reps):
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def _check(name, attention, segments, q, k, v, do):
    """Output and gradients against the fp32 reference (bf16 tolerance: 2^-7 relative, 2e-2 of scale)."""
    out_ref, vjp = jax.vjp(
        lambda *x: reference_attention(*x, causal=True, segments=segments), *(x.astype(jnp.float32) for x in (q, k, v))
    )
    expected = (out_ref, *vjp(do.astype(jnp.float32)))

    @jax.jit  # host offload is a placement inside a compiled program
    def run(q, k, v, do):
        out, vjp_impl = jax.vjp(attention, q, k, v)
        return (out, *vjp_impl(do))

    actual = run(q, k, v, do)
    worst = []
    for label, a, e in zip(("out", "dq", "dk", "dv"), actual, expected, strict=True):
        a, e = np.asarray(a, np.float32), np.asarray(e)
        scale = float(np.abs(e).max())
        error = float(np.abs(a - e).max())
        worst.append(f"{label} {error:.2e}/{scale:.2e}")
        if not error <= 2**-7 * scale + 2e-2 * scale:
            raise SystemExit(f"{name}: {label} differs from the fp32 reference by {error} (scale {scale})")
    print(f"  numerics ok vs fp32 reference: {name}: " + ", ".join(worst), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--chunk-tokens", type=int, default=4096)
    parser.add_argument("--document-tokens", type=int, default=2048)
    parser.add_argument("--check-seq", type=int, default=4096, help="length of the numerics check")
    args = parser.parse_args()

    device = jax.devices()[0]
    mesh = jax.make_mesh(
        (1, 1, 1), ("data", "context", "tensor"), axis_types=(AxisType.Auto,) * 3, devices=jax.devices()[:1]
    )
    print(
        f"device {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}; causal fwd+bwd bf16, "
        f"batch 1, heads {args.heads}/{args.kv_heads}, head_dim {HEAD_DIM}, chunks {args.chunk_tokens}"
    )

    def longctx(chunk, offload=False, segments=None):
        def attention(q, k, v):
            return context_parallel_attention(
                q,
                k,
                v,
                mesh=mesh,
                causal=True,
                load_balance="none",
                chunk_tokens=chunk,
                offload=offload,
                segments=segments,
            )

        return attention

    seq = args.check_seq
    q, k, v, do = _inputs(seq, args.heads, args.kv_heads)
    segments = jnp.asarray(document_segments(seq, args.document_tokens // 4))
    chunk = min(args.chunk_tokens, seq // 4)
    _check("longctx", longctx(chunk), None, q, k, v, do)
    _check("longctx+offload", longctx(chunk, offload=True), None, q, k, v, do)
    _check("longctx+docs", longctx(chunk, segments=segments), segments, q, k, v, do)
    _check("longctx+docs+offload", longctx(chunk, offload=True, segments=segments), segments, q, k, v, do)

    header = f"{'seq':>6} {'variant':<16} {'time ms':>9} {'TFLOP/s':>8} {'vs cudnn':>9}"
    print(header + "\n" + "-" * len(header), flush=True)
    for seq in args.seqs:
        q, k, v, do = _inputs(seq, args.heads, args.kv_heads)
        segments = document_segments(seq, args.document_tokens)
        pairs = float(sum(n * n / 2 for n in np.bincount(segments[0])))
        causal_flops = 6 * args.heads * HEAD_DIM * seq * seq
        rows = {
            "cudnn (peer)": (
                lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn"),
                causal_flops,
            ),
            "longctx": (longctx(args.chunk_tokens), causal_flops),
            "longctx+offload": (longctx(args.chunk_tokens, offload=True), causal_flops),
            f"longctx+docs{args.document_tokens}": (
                longctx(args.chunk_tokens, segments=jnp.asarray(segments)),
                12 * args.heads * HEAD_DIM * pairs,
            ),
        }
        peer = None
        for name, (attention, flops) in rows.items():
            try:
                seconds = _time(_grads(attention), (q, k, v, do), args.reps)
            except Exception as error:  # noqa: BLE001 - a row that cannot run says why, the others go on
                print(f"{seq:>6} {name:<16} failed: {str(error).splitlines()[0][:120]}", flush=True)
                continue
            peer = seconds if name.startswith("cudnn") else peer
            ratio = f"{seconds / peer:.2f}x" if peer else "-"
            print(f"{seq:>6} {name:<16} {seconds * 1e3:>9.2f} {flops / seconds / 1e12:>8.1f} {ratio:>9}", flush=True)


if __name__ == "__main__":
    main()
