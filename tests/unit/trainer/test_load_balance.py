"""Load-balancing layouts: valid permutations, the documented chunk placement, balanced causal work."""

import numpy as np
import pytest

from longctx_trainer.ops import inverse_permutation, permutation


@pytest.mark.parametrize("scheme", ["dual_chunk_swap", "striped", "none"])
@pytest.mark.parametrize("context", [1, 2, 4, 8])
def test_is_a_permutation_with_its_inverse(scheme, context):
    seq = 64
    perm = permutation(seq, context, scheme)
    assert sorted(perm.tolist()) == list(range(seq))
    tokens = np.random.default_rng(0).integers(0, 1000, size=(3, seq))
    np.testing.assert_array_equal(tokens[:, perm][:, inverse_permutation(seq, context, scheme)], tokens)


def test_dual_chunk_swap_gives_device_i_chunks_i_and_2c_minus_1_minus_i():
    seq, context = 32, 4
    chunk = seq // (2 * context)
    shards = permutation(seq, context, "dual_chunk_swap").reshape(context, -1)
    for device, shard in enumerate(shards):
        first, second = shard[:chunk], shard[chunk:]
        np.testing.assert_array_equal(first, np.arange(device * chunk, (device + 1) * chunk))
        late = 2 * context - 1 - device
        np.testing.assert_array_equal(second, np.arange(late * chunk, (late + 1) * chunk))


def test_striped_is_round_robin():
    shards = permutation(12, 3, "striped").reshape(3, -1)
    np.testing.assert_array_equal(shards, [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]])


def _causal_pairs_per_device(perm, context):
    """Visible (query, key) pairs whose query lives on each device: its share of causal work."""
    return [int((shard[:, None] + 1).sum()) for shard in perm.reshape(context, -1)]


@pytest.mark.parametrize("scheme", ["dual_chunk_swap", "striped"])
def test_balanced_schemes_even_out_causal_work(scheme):
    seq, context = 256, 8
    work = _causal_pairs_per_device(permutation(seq, context, scheme), context)
    contiguous = _causal_pairs_per_device(permutation(seq, context, "none"), context)
    assert max(contiguous) / min(contiguous) > 10  # the imbalance being fixed
    assert max(work) / min(work) < 1.1


@pytest.mark.parametrize("scheme,seq", [("dual_chunk_swap", 20), ("striped", 10), ("bogus", 16)])
def test_rejects_indivisible_lengths_and_unknown_schemes(scheme, seq):
    with pytest.raises(ValueError):
        permutation(seq, 4, scheme)


@pytest.mark.parametrize("scheme", ["dual_chunk_swap", "striped", "none"])
@pytest.mark.parametrize("context", [1, 2, 3])
def test_accepts_exactly_the_lengths_the_trainer_config_accepts(scheme, context):
    """One divisibility rule (config.sequence_split) for the config, the planner and the layout,
    at context 1 too (dual-chunk-swap still wants two pieces there)."""
    from longctx_trainer.contract.config import sequence_split

    for seq in range(1, 25):
        if seq % sequence_split(scheme, context):
            with pytest.raises(ValueError, match="not divisible"):
                permutation(seq, context, scheme)
        else:
            assert len(permutation(seq, context, scheme)) == seq
