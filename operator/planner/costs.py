"""Bytes per GPU of a Llama-style model (formulas in docs/planner.md); FLOPs per token are
`longctx_trainer.contract.flops`, shared with the trainer.

Everything here is arithmetic over `ModelConfig` and a few layout numbers; no layout search.
Conventions:
- `b` is the byte width of the compute precision (2 for bf16, 4 for fp32; 2 for fp8, whose
  activations stay bf16: only the layer matmuls' operands are FP8, quantized as they are used).
- Model state is sharded ZeRO-3 style over all data*context*tensor devices.
- "tokens" in the activation formulas are the tokens a device holds at once: its sequences
  times the sequence shard (or times the offload chunk for the per-layer working set).
"""

from __future__ import annotations

from dataclasses import dataclass

from longctx_trainer.contract.config import FP8_MATMULS, Fp8Config
from longctx_trainer.contract.model import ModelConfig

FP32 = 4
FP8 = 1
ADAM_MOMENT_BYTES = 2 * FP32  # m and v in fp32


def dtype_bytes(precision: str) -> int:
    return {"bf16": 2, "fp32": 4, "fp8": 2}[precision]


def fp8_scaling_bytes(model: ModelConfig, precision: str, history: int = Fp8Config().amax_history) -> int:
    """FP8 delayed-scaling state, replicated: per layer and FP8 matmul, three operands (input,
    weight, output gradient) with an fp32 scale and amax history each (the default history)."""
    if precision != "fp8":
        return 0
    return model.layers * len(FP8_MATMULS) * 3 * (history + 1) * FP32


def kv_dim(model: ModelConfig) -> int:
    """Width of K (or V) per token: kv_heads * head_dim."""
    return model.kv_heads * model.head_dim


# --- model state ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateBytes:
    params: int  # compute copy in the compute precision
    master_weights: int  # fp32 copy kept for the optimizer (none when computing in fp32)
    optimizer_moments: int
    gradients: int


def state_bytes_per_device(model: ModelConfig, precision: str, devices: int) -> StateBytes:
    """ZeRO-3: every piece of model state split evenly over all devices (rounded up).

    Gradients are fp32: the trainer differentiates with respect to the fp32 master weights and
    casts to the compute precision inside each layer. The compute copy is counted as if it were
    kept whole, which is conservative by b bytes per parameter.
    """
    n = model.param_count()
    b = dtype_bytes(precision)
    master = FP32 if precision != "fp32" else 0

    def shard(bytes_per_param: int) -> int:
        return -(-n * bytes_per_param // devices)

    return StateBytes(
        params=shard(b), master_weights=shard(master), optimizer_moments=shard(ADAM_MOMENT_BYTES), gradients=shard(FP32)
    )


def gathered_params_bytes(model: ModelConfig, precision: str, tensor: int) -> int:
    """ZeRO-3 gathers full (tensor-sharded) weights just in time: two layers in flight (the one
    computing, the one prefetched) plus the LM head for the loss. fp8 adds the FP8 copies of the
    two layers' weights that their GEMMs read."""
    b = dtype_bytes(precision)
    per_layer = b + (FP8 if precision == "fp8" else 0)
    return -(-(2 * model.params_per_layer() * per_layer + model.vocab * model.hidden * b) // tensor)


def embedding_lookup_bytes(model: ModelConfig, precision: str, tokens: int) -> int:
    """Peak of the token lookup, which the trainer does on the whole table gathered to every device
    in the compute precision. Forward: the table (V*h*b) and the looked-up tokens (b*h each).
    Backward, the larger: the table's cotangent (a scatter-add of the tokens' gradients into V*h
    values of b bytes), its fp32 cast for the master weights' gradient before that is
    reduce-scattered (none when b is already fp32), and the tokens' gradient."""
    b = dtype_bytes(precision)
    cast = FP32 if b != FP32 else 0
    return model.vocab * model.hidden * (b + cast) + b * model.hidden * tokens


# --- activations --------------------------------------------------------------------------------


def layer_activation_bytes_per_token(model: ModelConfig, precision: str, tensor: int) -> int:
    """Bytes one layer saves per token for its backward pass without recomputation.

    Replicated over tensor ranks (no sequence parallelism): the inputs and outputs of the two
    RMSNorms (4h). Split over tensor ranks: Q and the attention output (2h), K and V (2*kv_dim),
    the SwiGLU gate, up and gate*up tensors (3*ffn). Plus the fp32 log-sum-exp per query head
    that flash/ring attention keeps instead of the score matrix.
    """
    b = dtype_bytes(precision)
    replicated = 4 * model.hidden
    split = 2 * model.hidden + 2 * kv_dim(model) + 3 * model.ffn
    return b * replicated + -(-b * split // tensor) + FP32 * model.heads // tensor


def layer_input_bytes_per_token(model: ModelConfig, precision: str) -> int:
    """What a recomputed layer keeps: its input, h values per token."""
    return dtype_bytes(precision) * model.hidden


def saved_attention_bytes_per_token(model: ModelConfig, precision: str, tensor: int) -> int:
    """What remat policy save_attention keeps per layer beyond the input (trainer/model.py): the
    attention output twice (named for the output projection, and as a residual of attention's
    backward), q, k and v, and the fp32 log-sum-exp per query head; split over tensor ranks."""
    split = 3 * model.hidden + 2 * kv_dim(model)
    return -(-dtype_bytes(precision) * split // tensor) + FP32 * model.heads // tensor


def loss_chunk_bytes_per_token(model: ModelConfig, tensor: int) -> int:
    """fp32 logits of the vocabulary-parallel LM head and their gradient (softmax - one-hot) for
    one token of the loss chunk: the trainer recomputes a chunk's logits in the backward, so no
    other chunk's logits exist at the same time."""
    return 2 * FP32 * -(-model.vocab // tensor)


@dataclass(frozen=True)
class ActivationBytes:
    device: int
    host: int


def activation_bytes(
    model: ModelConfig,
    precision: str,
    *,
    tensor: int,
    resident_tokens: int,
    loss_tokens: int,
    recompute: bool,
    offload: bool,
    save_attention: bool = False,
) -> ActivationBytes:
    """Saved activations of all layers plus one layer's working set and the loss chunk's logits.

    resident_tokens: tokens a device holds at once (local sequences * shard); the trainer runs
    each layer's matmuls over all of them (only attention is chunked), so the recompute working
    set is over the shard, with or without offload. loss_tokens: local sequences * loss chunk.
    With offload the saved layer inputs live in host memory; the device keeps two layers of them
    (the one being copied out or in, and the one in use). With remat policy save_attention a
    recomputed layer also keeps `saved_attention_bytes_per_token`, offloaded the same way.
    """
    full_layer = layer_activation_bytes_per_token(model, precision, tensor)
    saved_per_token_layer = layer_input_bytes_per_token(model, precision) if recompute else full_layer
    if recompute and save_attention:
        saved_per_token_layer += saved_attention_bytes_per_token(model, precision, tensor)
    saved_layers_on_device = 2 if offload else model.layers
    saved_device = saved_layers_on_device * saved_per_token_layer * resident_tokens
    saved_host = model.layers * saved_per_token_layer * resident_tokens if offload else 0
    recompute_working = full_layer * resident_tokens if recompute else 0
    logits = loss_chunk_bytes_per_token(model, tensor) * loss_tokens
    return ActivationBytes(device=saved_device + recompute_working + logits, host=saved_host)


def attention_working_set_bytes(
    model: ModelConfig, precision: str, *, tensor: int, query_tokens: int, kv_tokens: int, kv_buffers: int
) -> int:
    """Peak extra memory of the backward pass of one block of attention.

    kv_buffers blocks of K and V of kv_tokens each (the one in use and the one arriving, for the
    ring or the offload prefetch), as many fp32 dK/dV accumulators, and the fp32 dQ accumulator
    of the query_tokens.
    """
    b = dtype_bytes(precision)
    kv = 2 * kv_dim(model) // tensor * kv_tokens
    query_accumulator = FP32 * model.hidden // tensor * query_tokens
    return kv_buffers * kv * (b + FP32) + query_accumulator


def kv_bytes(model: ModelConfig, precision: str, *, tensor: int, tokens: int) -> int:
    """K and V of `tokens` tokens on one tensor rank."""
    return 2 * kv_dim(model) // tensor * tokens * dtype_bytes(precision)
