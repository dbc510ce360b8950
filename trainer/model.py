"""Llama-style decoder: RMSNorm, RoPE, GQA attention, SwiGLU MLP, layers under a scan (ops/loops.py).

Parallelism is expressed with shardings on the (data, context, tensor) mesh:
- activations: batch over data, sequence over context, attention heads and MLP ffn over tensor;
- parameters (and so gradients and optimizer state): the tensor-parallel dim over tensor and
  another dim over (data, context) -- ZeRO-3 / FSDP, XLA gathers them where used.
The sequence is reordered once at input by the load-balance permutation (tokens and targets
alike, so the mean loss is unchanged) and RoPE uses the permuted positions.

`Model` is one run's model: its `ModelConfig` (contract/model.py), the mesh and `ModelOptions`
(how it runs, from the trainer config), with the forward (`final_hidden`) and the loss as methods;
it is frozen and hashable, so the jitted step closes over it.

Packed documents (data.packing, `Documents` from data.py, reordered the same way): with
`document_mask` attention stays within each document and the loss averages over the predictions
that stay within one; with `reset_positions` RoPE uses each token's position in its document.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from . import fp8
from .contract.config import (
    DEFAULT_REMAT_POLICY,
    FP8_MATMULS,
    LOSS_CHUNK_TOKENS,
    Attention,
    Fp8Config,
    LoadBalance,
    PackingConfig,
    ParallelConfig,
    RematPolicy,
    TrainerConfig,
    loss_chunk,
)
from .contract.model import RMS_NORM_EPS, ModelConfig, RopeScaling
from .mesh import ACTIVATION, CONTEXT, FFN, FSDP, HEADS, LOSS_CHUNK, LOSS_LOGITS, TENSOR, TOKENS
from .ops import context_parallel_attention, permutation
from .ops.adaptive import adaptive_attention
from .ops.attention import ATTENTION_RESIDUALS
from .ops.loops import scan
from .ops.offload import host_offload_available

# Partition spec of every parameter before divisibility is checked (see `param_specs`).
# Layer parameters carry a leading `layers` dim (scan), never sharded.
_LAYER_SPECS = {
    "attn_norm": P(None, FSDP),
    "wq": P(None, FSDP, TENSOR, None),
    "wk": P(None, FSDP, TENSOR, None),
    "wv": P(None, FSDP, TENSOR, None),
    "wo": P(None, TENSOR, None, FSDP),
    "mlp_norm": P(None, FSDP),
    "w_gate": P(None, FSDP, TENSOR),
    "w_up": P(None, FSDP, TENSOR),
    "w_down": P(None, TENSOR, FSDP),
}
_TOP_SPECS = {
    "embed": P(TENSOR, FSDP),  # [vocab, hidden]; vocab-parallel logits when tied
    "final_norm": P(FSDP),
    "lm_head": P(FSDP, TENSOR),  # [hidden, vocab]
}


FP8_STATE = "fp8"  # params key of the FP8 scaling state: params["fp8"]["layers"][matmul]

LAYER_INPUT = "layer_input"  # the one residual a remat'ed layer keeps (see remat_policy)
ATTENTION_OUT = "attention_out"  # attention's output, kept by remat policy save_attention


# The trainer config's sections as defaulted: the options below take their defaults from there.
_PARALLEL, _PACKING, _FP8 = ParallelConfig(), PackingConfig(), Fp8Config()


@dataclass(frozen=True)
class Fp8Layout:
    """What FP8 scaling state a run keeps: the history length, and whether the LM head has one."""

    history: int
    lm_head: bool = _FP8.lm_head


@dataclass(frozen=True)
class ModelOptions:
    """How the model runs, beyond its dimensions (taken from the trainer config)."""

    compute_dtype: jnp.dtype
    remat: bool
    offload: bool
    chunk_tokens: int | None
    attention: Attention
    load_balance: LoadBalance
    ulysses: int = _PARALLEL.ulysses  # the Ulysses group size of attention "hybrid"
    document_mask: bool = _PACKING.document_mask  # packed documents: attention and loss stay within each document
    reset_positions: bool = _PACKING.reset_positions  # packed documents: RoPE positions restart in each document
    adaptive_ring: int | None = None  # adaptive context parallelism: this batch's ring part (adaptive_cp.py)
    loss_chunk_tokens: int = LOSS_CHUNK_TOKENS
    fp8: Fp8Layout | None = None  # None: no FP8
    remat_policy: RematPolicy = DEFAULT_REMAT_POLICY  # with remat: what a layer keeps (config.RematPolicy)

    @property
    def laid_out_by_data(self) -> bool:
        """Whether the data path lays the batch out (per-batch layouts, `Documents.order`)."""
        return self.load_balance == "documents" or self.adaptive_ring is not None

    @classmethod
    def from_config(cls, config: TrainerConfig) -> ModelOptions:
        fp8_on = config.precision == "fp8"
        return cls(
            compute_dtype=jnp.float32 if config.precision == "fp32" else jnp.bfloat16,
            fp8=Fp8Layout(config.fp8.amax_history, config.fp8.lm_head) if fp8_on else None,
            remat=config.remat,
            remat_policy=config.remat_policy,
            offload=config.offload.enabled,
            chunk_tokens=config.offload.chunk_tokens,
            attention=config.parallelism.attention,
            load_balance=config.parallelism.load_balance,
            ulysses=config.parallelism.ulysses,
            document_mask=config.data.packing.document_mask,
            reset_positions=config.data.packing.reset_positions,
        )


def param_shapes(config: ModelConfig) -> dict:
    L, H, F, V, D = config.layers, config.hidden, config.ffn, config.vocab, config.head_dim
    layers = {
        "attn_norm": (L, H),
        "wq": (L, H, config.heads, D),
        "wk": (L, H, config.kv_heads, D),
        "wv": (L, H, config.kv_heads, D),
        "wo": (L, config.heads, D, H),
        "mlp_norm": (L, H),
        "w_gate": (L, H, F),
        "w_up": (L, H, F),
        "w_down": (L, F, H),
    }
    shapes = {"embed": (V, H), "layers": layers, "final_norm": (H,)}
    if not config.tie_embeddings:
        shapes["lm_head"] = (H, V)
    return shapes


def _fit(spec: P, shape: tuple[int, ...], mesh: Mesh) -> P:
    """Drop the mesh axes of any dim they do not divide (that dim is then replicated)."""
    fitted = []
    for axes, size in zip(spec, shape, strict=False):
        names = () if axes is None else (axes if isinstance(axes, tuple) else (axes,))
        ways = math.prod(mesh.shape[n] for n in names)
        fitted.append(axes if names and size % ways == 0 else None)
    return P(*fitted)


def fp8_state(config: ModelConfig, layout: Fp8Layout) -> dict:
    """Fresh FP8 scaling state of every FP8 matmul, stacked over layers like the weights (and one
    for an FP8 LM head). Its shapes depend on the model only, not on the layout, so a checkpoint
    restores under any layout."""
    one = fp8.einsum_state(layout.history)
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (config.layers, *x.shape)), one)
    state = {"layers": dict.fromkeys(FP8_MATMULS, stacked)}
    if layout.lm_head:
        state["lm_head"] = one
    return state


def split_fp8_state(params: dict) -> tuple[dict, dict | None]:
    """(the weights, the FP8 scaling state or None)."""
    weights = {k: v for k, v in params.items() if k != FP8_STATE}
    return weights, params.get(FP8_STATE)


def init_params(config: ModelConfig, key: jax.Array) -> dict:
    """fp32 master weights: N(0, 0.02) matrices, residual outputs scaled by 1/sqrt(2 layers), unit norms."""
    shapes = param_shapes(config)
    flat, treedef = jax.tree.flatten_with_path(shapes, is_leaf=lambda x: isinstance(x, tuple))
    keys = jax.random.split(key, len(flat))
    out_scale = 1.0 / math.sqrt(2 * config.layers)
    leaves = []
    for (path, shape), k in zip(flat, keys, strict=False):
        name = path[-1].key
        if name.endswith("norm"):
            leaves.append(jnp.ones(shape, jnp.float32))
            continue
        std = 0.02 * (out_scale if name in ("wo", "w_down") else 1.0)
        leaves.append(std * jax.random.normal(k, shape, jnp.float32))
    return jax.tree.unflatten(treedef, leaves)


def _constrain(x: jax.Array, mesh: Mesh, spec: P) -> jax.Array:
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, _fit(spec, x.shape, mesh)))


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = RMS_NORM_EPS) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * scale.astype(jnp.float32)).astype(x.dtype)


def rope_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None = None) -> jax.Array:
    """Angular frequency of each rotated pair, theta ** (-2i / head_dim), optionally rescaled the
    Llama 3.1 way: wavelengths longer than original_context / low_freq_factor are stretched by
    `factor`, those shorter than original_context / high_freq_factor kept, and in between the
    frequency moves linearly (in original_context / wavelength) from the stretched to the kept."""
    half = head_dim // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    if scaling is None:
        return freqs
    turns = scaling.original_context * freqs / (2 * math.pi)  # periods within the original context
    keep = jnp.clip((turns - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor), 0.0, 1.0)
    return keep * freqs + (1 - keep) * freqs / scaling.factor


def rope(x: jax.Array, positions: jax.Array, theta: float, scaling: RopeScaling | None = None) -> jax.Array:
    """Rotary embedding (rotate-half form) of x [batch, seq, heads, head_dim] at `positions`
    [seq], or [batch, seq] (positions within packed documents)."""
    freqs = rope_frequencies(x.shape[-1], theta, scaling)
    angles = positions.astype(jnp.float32)[..., None] * freqs  # [(batch,) seq, half]
    angles = jnp.broadcast_to(angles, (x.shape[0], *angles.shape[-2:]))[:, :, None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


@jax.custom_vjp
def head_logits(x: jax.Array, head: jax.Array) -> jax.Array:
    """Logits x @ head [..., hidden] x [hidden, vocab] in fp32, from operands in the compute dtype.

    Its backward takes the logits' gradient in x's dtype before its two GEMMs (fp32 accumulation,
    as the forward): autodiff would promote the bf16 operands to the fp32 gradient and run fp32
    GEMMs, which took 13% of a 1b step at 8K on an H200 (2026-11-27, docs/benchmarks.md)."""
    return jnp.einsum("...h,hv->...v", x, head, preferred_element_type=jnp.float32)


def _head_logits_fwd(x, head):
    return head_logits(x, head), (x, head)


def _head_logits_bwd(residuals, g):
    x, head = residuals
    g = g.astype(x.dtype)
    dx = jnp.einsum("...v,hv->...h", g, head, preferred_element_type=jnp.float32)
    dhead = jnp.einsum("...h,...v->hv", x, g, preferred_element_type=jnp.float32)
    return dx.astype(x.dtype), dhead.astype(head.dtype)


head_logits.defvjp(_head_logits_fwd, _head_logits_bwd)


def chunked_cross_entropy(
    x: jax.Array,
    head: jax.Array,
    targets: jax.Array,
    *,
    mesh: Mesh,
    chunk_tokens: int,
    head_scaling: dict | None = None,
    weights: jax.Array | None = None,
) -> jax.Array:
    """Mean cross-entropy of logits x @ head (fp32), never materialising all logits at once;
    with `weights` [batch, seq] (0 or 1: packed documents' loss mask) the mean over the weighted.

    Full logits are [batch, seq, vocab] in fp32 (64 GB at 128K tokens and a 128K vocabulary), so
    every device walks its own sequence shard in chunks of `chunk_tokens`, recomputing each
    chunk's logits in the backward instead of keeping them. With `head_scaling` (the LM head's FP8
    scaling state) each chunk's logits matmul runs in FP8 at the head's scale, and the step's
    update of that state merges the chunks' (`fp8.shared_across`).
    """
    batch, seq, hidden = x.shape
    context = mesh.shape[CONTEXT]
    local = seq // context
    chunk = loss_chunk(local, chunk_tokens)
    # [batch, seq, ...] -> [chunks, batch, context, chunk, ...]: chunks within each device's shard.
    xs = jnp.moveaxis(x.reshape(batch, context, local // chunk, chunk, hidden), 2, 0)
    ts = jnp.moveaxis(targets.reshape(batch, context, local // chunk, chunk), 2, 0)
    ws = None if weights is None else jnp.moveaxis(weights.reshape(batch, context, local // chunk, chunk), 2, 0)

    @jax.checkpoint
    def chunk_loss(x_chunk, t_chunk, w_chunk, scaling):
        x_chunk = _constrain(x_chunk, mesh, LOSS_CHUNK)
        if scaling is None:
            logits = head_logits(x_chunk, head)
        else:  # quantized from fp32 inputs, so the logits come out in fp32 as above
            logits = fp8.fp8_einsum("bxch,hv->bxcv", x_chunk.astype(jnp.float32), head, scaling)
        logits = _constrain(logits, mesh, LOSS_LOGITS)
        logp = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(logp, t_chunk[..., None], axis=-1)[..., 0]
        return jnp.sum(nll if w_chunk is None else nll * w_chunk)

    if head_scaling is not None:
        head_scaling = fp8.shared_across(head_scaling, local // chunk)
    total, _ = scan(
        lambda acc, xts: (acc + chunk_loss(*xts), None), jnp.zeros((), jnp.float32), (xs, ts, ws, head_scaling)
    )
    count = batch * seq if weights is None else jnp.maximum(jnp.sum(weights), 1.0)
    return total / count


@dataclass(frozen=True)
class Model:
    """The model of one run: what it is (`config`), where it runs (`mesh`) and how (`options`).

    Frozen and hashable (all three parts are), so a jitted function closes over it, or takes it
    as a static argument, and compiles once per model."""

    config: ModelConfig
    mesh: Mesh
    options: ModelOptions

    @classmethod
    def from_config(cls, config: TrainerConfig, mesh: Mesh) -> Model:
        return cls(config.model, mesh, ModelOptions.from_config(config))

    def with_adaptive_ring(self, ring: int | None) -> Model:
        """This model with adaptive context parallelism's ring part of one batch (adaptive_cp.py)."""
        return replace(self, options=replace(self.options, adaptive_ring=ring))

    def param_specs(self, *, weights_only: bool = False) -> dict:
        """Partition specs of the parameters (and, with FP8 unless `weights_only`, of the scaling
        state: replicated, a few scalars per matmul)."""
        shapes = param_shapes(self.config)
        specs = {k: _fit(_TOP_SPECS[k], s, self.mesh) for k, s in shapes.items() if k != "layers"}
        specs["layers"] = {k: _fit(_LAYER_SPECS[k], s, self.mesh) for k, s in shapes["layers"].items()}
        if self.options.fp8 is not None and not weights_only:
            state = jax.eval_shape(partial(fp8_state, self.config, self.options.fp8))
            specs[FP8_STATE] = jax.tree.map(lambda _: P(), state)
        return specs

    def param_shardings(self, *, weights_only: bool = False) -> dict:
        return jax.tree.map(lambda s: NamedSharding(self.mesh, s), self.param_specs(weights_only=weights_only))

    def with_fp8_state(self, params: dict) -> dict:
        """params with fresh FP8 scaling state added (FP8 runs), or unchanged."""
        if self.options.fp8 is None or FP8_STATE in params:
            return params
        return {**params, FP8_STATE: fp8_state(self.config, self.options.fp8)}

    def _constrain(self, x: jax.Array, spec: P) -> jax.Array:
        return _constrain(x, self.mesh, spec)

    def _layer(self, x, layer, *, positions, segments):
        config, mesh, options = self.config, self.mesh, self.options
        p, scaling = layer  # this layer's weights and (FP8 runs) its matmuls' scaling state, else None

        def matmul(spec: str, a: jax.Array, name: str) -> jax.Array:
            if scaling is None:
                return jnp.einsum(spec, a, p[name].astype(options.compute_dtype))
            return fp8.fp8_einsum(spec, a, p[name], scaling[name])  # quantized from the fp32 master

        x = checkpoint_name(x, LAYER_INPUT)
        h = rms_norm(x, p["attn_norm"])
        q = self._constrain(matmul("bsh,hnd->bsnd", h, "wq"), HEADS)
        k = self._constrain(matmul("bsh,hnd->bsnd", h, "wk"), HEADS)
        v = self._constrain(matmul("bsh,hnd->bsnd", h, "wv"), HEADS)
        q, k = (rope(t, positions, config.rope_theta, config.rope_scaling) for t in (q, k))
        if options.adaptive_ring is not None:
            ring, shard = options.adaptive_ring, q.shape[1] // mesh.shape[CONTEXT]
            a = adaptive_attention(q, k, v, segments, mesh=mesh, ring=ring, local=shard - ring)
        else:
            a = context_parallel_attention(
                q,
                k,
                v,
                mesh=mesh,
                causal=True,
                impl=options.attention,
                load_balance=options.load_balance,
                chunk_tokens=options.chunk_tokens,
                offload=options.offload,
                ulysses=options.ulysses,
                segments=segments,
            )
        a = self._constrain(checkpoint_name(a, ATTENTION_OUT), HEADS)
        x = self._constrain(x + matmul("bsnd,ndh->bsh", a, "wo"), ACTIVATION)
        h = rms_norm(x, p["mlp_norm"])
        gate = self._constrain(matmul("bsh,hf->bsf", h, "w_gate"), FFN)
        up = self._constrain(matmul("bsh,hf->bsf", h, "w_up"), FFN)
        y = matmul("bsf,fh->bsh", jax.nn.silu(gate) * up, "w_down")
        return self._constrain(x + y, ACTIVATION)

    def remat_policy(self):
        """Which residuals a remat'ed layer keeps: its input (policy "full"), and with policy
        "save_attention" also attention's output (ATTENTION_OUT, for the output projection's
        gradient) and its backward's residuals (ATTENTION_RESIDUALS), so the backward never reruns
        the attention forward (the ring and its collective-permutes); the rest of the layer (norms,
        projections, MLP) is recomputed from the input either way.

        Plain remat keeps these on the device. With offload (where the backend has a separate host
        memory) the input and the attention output, named, are moved to pinned host memory in the
        forward and brought back for the backward, and attention's residuals are already on the
        host (ops/offload.py), so the device holds only the layers in flight (FPDT; the planner
        assumes exactly this).
        """
        offloaded = [LAYER_INPUT]
        saved = []
        if self.options.remat_policy == "save_attention":
            offloaded.append(ATTENTION_OUT)
            saved.append(ATTENTION_RESIDUALS)
        if self.options.offload and host_offload_available(self.mesh.devices.flat[0].platform):
            return jax.checkpoint_policies.save_and_offload_only_these_names(
                names_which_can_be_saved=saved,
                names_which_can_be_offloaded=offloaded,
                offload_src="device",
                offload_dst="pinned_host",
            )
        if saved:
            return jax.checkpoint_policies.save_only_these_names(*saved, *offloaded[1:])
        return jax.checkpoint_policies.nothing_saveable

    def final_hidden(
        self, params: dict, tokens: jax.Array, targets: jax.Array, documents=None
    ) -> tuple[jax.Array, jax.Array]:
        """Final normed hidden states [batch, seq, hidden] and targets, in the load-balanced order
        (`documents`: data.Documents of packed documents, or None). With the documents layout the
        data path has already laid the batch out (`documents.order`: the true positions)."""
        mesh, options = self.mesh, self.options
        if options.laid_out_by_data:
            if documents is None or documents.order is None:
                raise ValueError("documents and adaptive layouts need the batch laid out by data.Batches")
            positions = documents.positions if options.reset_positions else documents.order
            segments = self._constrain(documents.segments, TOKENS)
            tokens, targets, positions = (self._constrain(x, TOKENS) for x in (tokens, targets, positions))
        else:
            perm = permutation(tokens.shape[1], mesh.shape[CONTEXT], options.load_balance)

            def reorder(x):
                return self._constrain(x[:, perm], TOKENS)

            tokens, targets = reorder(tokens), reorder(targets)
            positions = jnp.asarray(perm, jnp.int32)
            segments = None
            if documents is not None and options.reset_positions:
                positions = reorder(documents.positions)
            if documents is not None and options.document_mask:
                segments = reorder(documents.segments)

        table = self._constrain(params["embed"].astype(options.compute_dtype), P())  # for the lookup
        x = self._constrain(table[tokens], ACTIVATION)
        body = partial(self._layer, positions=positions, segments=segments)
        if options.remat:
            body = jax.checkpoint(body, policy=self.remat_policy(), prevent_cse=False)
        scaling = params[FP8_STATE]["layers"] if options.fp8 is not None else None
        x, _ = scan(lambda carry, layer: (body(carry, layer), None), x, (params["layers"], scaling))
        return rms_norm(x, params["final_norm"]), targets

    def loss(self, params: dict, tokens: jax.Array, targets: jax.Array, documents=None) -> jax.Array:
        """Mean next-token cross-entropy (fp32) over all tokens of the batch; with a document mask,
        over the predictions that stay within one document."""
        mesh, options = self.mesh, self.options
        x, targets = self.final_hidden(params, tokens, targets, documents)
        weights = None
        if documents is not None and options.document_mask:
            mask = documents.loss_mask
            if not options.laid_out_by_data:
                mask = mask[:, permutation(tokens.shape[1], mesh.shape[CONTEXT], options.load_balance)]
            weights = self._constrain(mask.astype(jnp.float32), TOKENS)
        head = params["embed"].T if self.config.tie_embeddings else params["lm_head"]
        head_scaling = params[FP8_STATE].get("lm_head") if options.fp8 is not None else None
        return chunked_cross_entropy(
            x,
            head if head_scaling is not None else head.astype(options.compute_dtype),  # FP8: from the fp32 master
            targets,
            mesh=mesh,
            chunk_tokens=options.loss_chunk_tokens,
            head_scaling=head_scaling,
            weights=weights,
        )
