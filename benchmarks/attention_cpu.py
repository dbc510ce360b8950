"""Ring, all-gather, Ulysses, hybrid and TokenRing context-parallel attention vs the single-device reference,
on 8 CPU devices.

    python benchmarks/attention_cpu.py [--seqs 4096 8192 16384 32768] [--reps 3] [--heads 2 --kv-heads 1]

For each sequence length: causal attention forward + backward (gradients of q, k, v), timed as
the best of `--reps` runs after a warm-up, and the compiled temporary memory per device
(`memory_analysis().temp_size_in_bytes`). The reference runs on one device; ring and all-gather
split the same total work over a context axis of 8 (the 8 "devices" share this machine's cores,
so equal total work means the times are directly comparable). References that would not fit
in this machine's memory are compiled (for their memory figure) but not run.

Ulysses (all-to-alls over the 8 devices) needs the heads to split over 8 (`--heads 8`); its row is
left out, with a note, when they do not. Hybrid runs Ulysses groups of 2 in a ring of 4.

A document-masked ring row ("ring+docsN") packs documents of random lengths (mean N tokens,
`--document-tokens`) into the sequence: chunk pairs of different documents are skipped, so it must
cost less than the plain ring. Beside it, the load balance under the mask: the causal pairs within
documents that each device's queries need, max/mean over the devices (1.00 = even; the
dual-chunk-swap layout balances one document, not many short ones), and the same in the documents
layout (`loadBalance: documents`, trainer/doc_balance.py), whose row "ring+docsN bal" times it.

The reference computes every logit and masks half of them; the ring skips fully masked blocks.
The "one-device" row runs the ring's own chunked kernel on a single device with the same chunk
size and the same skipping: the ratio to it (time/1dev) is the cost of going parallel at equal
arithmetic.

The "peer" row is the fastest public JAX ring attention installable from PyPI, `ringattention`
(Hao Liu's RingAttention, `pip install 'longctx[bench]'`; its blockwise JAX kernel, the one it
runs on CPU), called as its README shows: inside `jax.shard_map` over the same context axis of 8,
query/key chunks of 512 (or the shard, if shorter), token-level causal mask (`causal_block_size=1`),
fp32. It has no GQA (K/V heads are repeated to the query heads before it, inside the differentiated
function) and no load balancing: it runs on the natural token order, so each row's `time/peer` is
against a peer that computes the same causal attention (it skips fully masked chunk pairs too) on
the same mesh; `ring lb=none` is our ring on that same natural order. The peer's outputs and
gradients are checked against the ring's (max abs error printed). Absent the package, the row says
how to install it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from corpus import document_segments  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402

from longctx_trainer.doc_balance import device_work, document_permutation  # noqa: E402
from longctx_trainer.mesh import HEADS, TOKENS  # noqa: E402
from longctx_trainer.ops import context_parallel_attention, permutation, reference_attention  # noqa: E402

HEAD_DIM = 64
CONTEXT = 8
MIB = 2**20


def _inputs(seq, heads, kv_heads):
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (1, seq, heads, HEAD_DIM))
    k, v = (jax.random.normal(key, (1, seq, kv_heads, HEAD_DIM)) for key in keys[1:3])
    return q, k, v, jax.random.normal(keys[3], q.shape)


def device_imbalance(segments: np.ndarray, context: int, perm: np.ndarray) -> float:
    """max/mean over devices of the causal pairs within documents that each device's queries
    need, in the layout `perm` (natural-order `segments` [1, seq])."""
    per_device = device_work(segments[0], perm, context)
    return float(per_device.max() / per_device.mean())


PEER_CHUNK = 512


def load_peer():
    """`ringattention`'s blockwise JAX ring attention module, or None when not installed.

    Its package `__init__` probes `jax.lib.xla_bridge`, gone from current JAX, so the module file
    is loaded on its own (it imports nothing from the package)."""
    try:
        dist = importlib.metadata.distribution("ringattention")
    except importlib.metadata.PackageNotFoundError:
        return None
    path = next(f for f in dist.files if str(f).endswith("ringattention_jax.py")).locate()
    spec = importlib.util.spec_from_file_location("_ringattention_jax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, dist.version


def peer_attention(peer, mesh, seq):
    """The peer's causal ring attention on global arrays in natural token order."""
    chunk = min(PEER_CHUNK, seq // CONTEXT)
    options = dict(
        causal_block_size=1,
        query_chunk_size=chunk,
        key_chunk_size=chunk,
        deterministic=True,
        dropout_rng=None,
        attn_pdrop=0.0,
        dtype=jnp.float32,
        policy=jax.checkpoint_policies.nothing_saveable,
        precision=None,
        prevent_cse=True,
    )

    def local(q, k, v):
        return peer.ring_attention(q, k, v, None, None, None, "context", True, options)

    sharded = jax.shard_map(local, mesh=mesh, in_specs=(HEADS,) * 3, out_specs=HEADS, check_vma=False)

    def attention(q, k, v):
        repeat = q.shape[2] // k.shape[2]
        return sharded(q, jnp.repeat(k, repeat, axis=2), jnp.repeat(v, repeat, axis=2))

    return attention


def _grad_fn(attention):
    def loss(q, k, v, do):
        return jnp.sum(attention(q, k, v) * do)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def _measure(fn, args, reps, run, keep=None):
    """(best time or None, temp bytes); the last result is stored in `keep` when given."""
    compiled = fn.lower(*args).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    if not run:
        return None, temp
    result = jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    if keep is not None:
        keep.append(result)
    return min(times), temp


def _max_error(peer_grads, ring_grads, layout):
    """Max abs difference of (dq, dk, dv), the peer's in natural order, the ring's in `layout`."""
    return max(
        float(jnp.max(jnp.abs(np.asarray(a)[:, layout] - np.asarray(b))))
        for a, b in zip(peer_grads, ring_grads, strict=True)
    )


ROWS = (
    "reference",
    "one-device",
    "ring",
    "ring lb=none",
    "ring+chunk",
    "all_gather",
    "hybrid",
    "ulysses",
    "token_ring",
    "docs",
    "peer",
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--heads", type=int, default=2, help="query heads (Ulysses needs a multiple of 8)")
    parser.add_argument("--kv-heads", type=int, default=1)
    parser.add_argument(
        "--max-reference-seq",
        type=int,
        default=16384,
        help="longest sequence whose single-device reference is run, not just compiled",
    )
    parser.add_argument("--chunk-tokens", type=int, default=512, help="FPDT chunk for the extra chunked-ring row")
    parser.add_argument("--document-tokens", type=int, default=2048, help="mean document length of the masked row")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS), help="rows to run (default: all)")
    args = parser.parse_args()
    rows_wanted = set(args.rows)

    mesh = jax.make_mesh((1, CONTEXT, 1), ("data", "context", "tensor"), axis_types=(AxisType.Auto,) * 3)
    one_device = jax.make_mesh(
        (1, 1, 1), ("data", "context", "tensor"), axis_types=(AxisType.Auto,) * 3, devices=jax.devices()[:1]
    )
    sharding = NamedSharding(mesh, HEADS)
    variants = {
        "ring": ("ring", dict(impl="ring")),
        "ring lb=none": ("ring lb=none", dict(impl="ring", load_balance="none")),
        f"ring+chunk{args.chunk_tokens}": ("ring+chunk", dict(impl="ring", chunk_tokens=args.chunk_tokens)),
        "all_gather": ("all_gather", dict(impl="all_gather")),
        "hybrid 2x4": ("hybrid", dict(impl="hybrid", ulysses=2)),
        "token_ring": ("token_ring", dict(impl="token_ring")),
    }
    if args.heads % CONTEXT == 0:
        variants["ulysses"] = ("ulysses", dict(impl="ulysses"))
    elif "ulysses" in rows_wanted:
        print(f"(no ulysses row: {args.heads} heads do not split over {CONTEXT} devices; try --heads 8)")
    variants = {name: options for name, (row, options) in variants.items() if row in rows_wanted}
    peer = load_peer() if "peer" in rows_wanted else None
    if "peer" in rows_wanted and peer is None:
        print("(peer row: ringattention not installed: pip install 'longctx[bench]')")
    elif peer is not None:
        print(f"peer: ringattention {peer[1]} (blockwise JAX kernel, chunks {PEER_CHUNK}, natural token order)")
    print(
        f"causal attention fwd+bwd, batch 1, heads {args.heads}/{args.kv_heads}, head_dim {HEAD_DIM}, fp32, "
        f"{len(jax.devices())} CPU devices, context {CONTEXT}, dual-chunk-swap layout unless lb=none"
    )
    header = (
        f"{'seq':>6} {'variant':<16} {'time s':>8} {'time/ref':>9} {'time/1dev':>10} {'time/peer':>10} "
        f"{'temp MiB/dev':>13} {'temp/ref':>9}"
    )
    print(header)
    print("-" * len(header))
    for seq in args.seqs:
        q, k, v, do = _inputs(seq, args.heads, args.kv_heads)
        layout = permutation(seq, CONTEXT, "dual_chunk_swap")
        rows = []
        ref_time = ref_temp = one_device_time = peer_time = None
        if "reference" in rows_wanted:
            ref_time, ref_temp = _measure(
                _grad_fn(lambda q, k, v: reference_attention(q, k, v, causal=True)),
                (q, k, v, do),
                args.reps,
                seq <= args.max_reference_seq,
            )
            rows.append(("reference", ref_time, ref_temp))

        def same_kernel(q, k, v, chunk=seq // (2 * CONTEXT)):
            return context_parallel_attention(
                q, k, v, mesh=one_device, causal=True, load_balance="none", chunk_tokens=chunk
            )

        if "one-device" in rows_wanted:
            rows.append(("one-device", *_measure(_grad_fn(same_kernel), (q, k, v, do), args.reps, True)))
            one_device_time = rows[-1][1]
        natural = [jax.device_put(x, sharding) for x in (q, k, v, do)]
        sharded = [jax.device_put(x[:, layout], sharding) for x in (q, k, v, do)]
        errors = []
        if peer is not None:
            peer_grads = []
            rows.append(
                ("peer", *_measure(_grad_fn(peer_attention(peer[0], mesh, seq)), natural, args.reps, True, peer_grads))
            )
            peer_time = rows[-1][1]
        for name, options in variants.items():

            def attention(q, k, v, o=options):
                o = dict(dict(load_balance="dual_chunk_swap"), **o)
                return context_parallel_attention(q, k, v, mesh=mesh, causal=True, **o)

            natural_order = options.get("load_balance") == "none"
            grads = []
            rows.append(
                (name, *_measure(_grad_fn(attention), natural if natural_order else sharded, args.reps, True, grads))
            )
            if peer is not None and name in ("ring", "ring lb=none"):
                errors.append((name, _max_error(peer_grads[0], grads[0], slice(None) if natural_order else layout)))
        segments = document_segments(seq, args.document_tokens)
        if "docs" in rows_wanted:
            layout_segments = jax.device_put(segments[:, layout], NamedSharding(mesh, TOKENS))

            def masked(q, k, v, segments=layout_segments):
                return context_parallel_attention(
                    q, k, v, mesh=mesh, causal=True, load_balance="dual_chunk_swap", segments=segments
                )

            rows.append((f"ring+docs{args.document_tokens}", *_measure(_grad_fn(masked), sharded, args.reps, True)))
            balanced = document_permutation(segments[0], CONTEXT)
            balanced_segments = jax.device_put(segments[:, balanced], NamedSharding(mesh, TOKENS))

            def balanced_masked(q, k, v, segments=balanced_segments):
                return context_parallel_attention(
                    q, k, v, mesh=mesh, causal=True, load_balance="documents", segments=segments
                )

            laid_out = [jax.device_put(x[:, balanced], sharding) for x in (q, k, v, do)]
            timed = _measure(_grad_fn(balanced_masked), laid_out, args.reps, True)
            rows.append((f"ring+docs{args.document_tokens} bal", *timed))
        for name, seconds, temp in rows:
            time_text = "not run" if seconds is None else f"{seconds:.3f}"

            def ratio(base, seconds=seconds):
                return "-" if seconds is None or base is None else f"{seconds / base:.2f}"

            temp_ratio = "-" if ref_temp is None else f"{temp / ref_temp:.3f}"
            print(
                f"{seq:>6} {name:<16} {time_text:>8} {ratio(ref_time):>9} {ratio(one_device_time):>10} "
                f"{ratio(peer_time):>10} {temp / MIB:>13.1f} {temp_ratio:>9}",
                flush=True,
            )
        for name, error in errors:
            print(f"{seq:>6} peer vs {name}: max abs error of dq, dk, dv {error:.2e}", flush=True)
        if "docs" in rows_wanted:
            documents = int(segments.max()) + 1
            imbalance = device_imbalance(segments, CONTEXT, layout)
            one_document = device_imbalance(segments * 0, CONTEXT, layout)
            balanced = device_imbalance(segments, CONTEXT, document_permutation(segments[0], CONTEXT))
            print(
                f"{seq:>6} ring+docs{args.document_tokens}: {documents} documents; per-device work under the mask "
                f"max/mean {imbalance:.2f} (one document: {one_document:.2f}; documents layout: {balanced:.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
