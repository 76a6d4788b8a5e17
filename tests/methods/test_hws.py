"""DRO with hardness-weighted sampling (Algorithm 1 of the hardness paper)."""
import math

import pytest
import torch

from pipeline.methods.samplers import HardnessWeightedSampler, UniformSampler, importance_weights


def sampler(n=6, batch_size=3, beta=1.0, importance_sampling=False, seed=0) -> HardnessWeightedSampler:
    return HardnessWeightedSampler(n, batch_size, {"beta": beta, "importance_sampling": importance_sampling},
                                   torch.Generator().manual_seed(seed), initial_loss=math.log(10))


def test_probabilities_are_softmax_of_beta_times_stale_losses():
    s = sampler(beta=2.5)
    s.stale_losses = torch.tensor([0.1, 0.5, 2.0, 0.0, 3.0, 1.0])
    expected = [math.exp(2.5 * v) for v in s.stale_losses.tolist()]
    expected = [e / sum(expected) for e in expected]
    assert s.probabilities().tolist() == pytest.approx(expected, rel=1e-5)


def test_probabilities_tend_to_uniform_as_beta_goes_to_zero():
    losses = torch.tensor([0.1, 0.5, 2.0, 0.0, 3.0, 1.0])
    gaps = []
    for beta in (1.0, 0.1, 0.01, 1e-4):
        s = sampler(beta=beta)
        s.stale_losses = losses.clone()
        gaps.append((s.probabilities() - 1 / 6).abs().max().item())
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[-1] < 1e-4


def test_initial_probabilities_are_uniform():
    assert torch.allclose(sampler(n=10, beta=100.0).probabilities(), torch.full((10,), 0.1))


def test_batches_are_drawn_from_the_hardness_weights():
    s = sampler(n=4, batch_size=1000, beta=1.0)
    s.stale_losses = torch.tensor([0.0, 1.0, 2.0, 3.0])
    counts = torch.bincount(torch.cat(list(s.epoch())), minlength=4).float()
    frequencies = counts / counts.sum()
    assert torch.allclose(frequencies, s.probabilities(), atol=0.02)
    assert s.batches_per_epoch == 1


def test_stale_losses_change_only_for_drawn_indices():
    s = sampler(n=6)
    before = s.stale_losses.clone()
    s.weigh(torch.tensor([1, 4]), torch.tensor([0.25, 7.0]))
    after = s.stale_losses
    assert after[1].item() == 0.25 and after[4].item() == 7.0
    untouched = [0, 2, 3, 5]
    assert torch.equal(after[untouched], before[untouched])


def test_importance_weights_are_exp_beta_gap_clipped_to_0_1_and_10():
    losses, stale = torch.tensor([1.0, 1.1, 0.9, 5.0, 0.0]), torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0])
    beta = 2.0
    weights = importance_weights(losses, stale, beta)
    assert weights[0].item() == pytest.approx(1.0)
    assert weights[1].item() == pytest.approx(math.exp(0.2))
    assert weights[2].item() == pytest.approx(math.exp(-0.2))
    assert weights[3].item() == 10.0  # exp(8) clipped
    assert weights[4].item() == pytest.approx(0.1)  # exp(-4) clipped
    huge = importance_weights(torch.tensor([1000.0]), torch.tensor([0.0]), 1000.0)
    assert huge.item() == 10.0 and math.isfinite(huge.item())


def test_weigh_returns_importance_weights_against_the_old_stale_losses():
    s = sampler(n=3, beta=0.5, importance_sampling=True)
    s.stale_losses = torch.tensor([1.0, 2.0, 3.0])
    weights = s.weigh(torch.tensor([0, 2]), torch.tensor([2.0, 1.0]))
    assert weights.tolist() == pytest.approx([math.exp(0.5), math.exp(-1.0)])
    assert s.stale_losses.tolist() == [2.0, 2.0, 1.0]
    assert sampler(importance_sampling=False).weigh(torch.tensor([0]), torch.tensor([1.0])) is None


def test_uniform_sampler_visits_every_example_once_and_never_leaves_a_batch_of_one():
    s = UniformSampler(10, 3, {}, torch.Generator().manual_seed(0))
    batches = list(s.epoch())
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert min(len(b) for b in batches) > 1 and len(batches) == s.batches_per_epoch == 3
