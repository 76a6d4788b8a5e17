"""Label smoothing against eq. 3 of the GI-LS paper."""
import pytest
import torch
import torch.nn.functional as F

from pipeline.methods import parse_method
from pipeline.methods.losses import (SmoothedLoss, smoothed_cross_entropy, smoothed_targets, soft_cross_entropy,
                                     weighted_mean)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.3, 0.5])
def test_targets_follow_eq_3(alpha):
    labels = torch.tensor([0, 3, 4])
    k = 5
    targets = smoothed_targets(labels, k, alpha)
    for row, label in zip(targets, labels.tolist()):
        for j in range(k):
            expected = 1 - alpha if j == label else alpha / (k - 1)
            assert row[j].item() == pytest.approx(expected)
    assert torch.allclose(targets.sum(dim=1), torch.ones(3))


def test_targets_differ_from_pytorch_label_smoothing():
    """PyTorch's built-in gives the true class 1 - alpha + alpha / k; eq. 3 gives 1 - alpha."""
    logits, labels, alpha = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1]), 0.3
    ours = smoothed_cross_entropy(logits, labels, alpha)
    builtin = F.cross_entropy(logits, labels, label_smoothing=alpha, reduction="none")
    assert not torch.allclose(ours, builtin)
    log_p = F.log_softmax(logits, dim=1)
    by_hand = torch.stack([-(1 - alpha) * log_p[i, y] - alpha / 3 * (log_p[i].sum() - log_p[i, y])
                           for i, y in enumerate(labels.tolist())])
    assert torch.allclose(ours, by_hand, atol=1e-6)


def test_alpha_zero_is_plain_cross_entropy():
    logits, labels = torch.randn(5, 3), torch.tensor([0, 1, 2, 1, 0])
    assert torch.allclose(smoothed_cross_entropy(logits, labels, 0.0),
                          F.cross_entropy(logits, labels, reduction="none"))


def test_weighted_mean_is_one_over_b_sum_of_weighted_losses():
    losses, weights = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([0.1, 1.0, 10.0, 2.0])
    assert weighted_mean(losses, weights).item() == pytest.approx((0.1 + 2 + 30 + 8) / 4)
    assert weighted_mean(losses, None).item() == pytest.approx(2.5)


@pytest.mark.parametrize("alpha", [0.1, 0.3])
def test_mixed_targets_are_smoothed_as_eq_3_not_as_pytorch_does(alpha):
    """A Mixup or CutMix target lam e_a + (1 - lam) e_b smoothed as eq. 3 is the same mix of the two labels'
    eq. 3 targets: class a gets lam (1 - alpha) + (1 - lam) alpha / (k - 1), every class in neither alpha / (k - 1)."""
    k, lam = 5, 0.3
    logits, first, second = torch.randn(4, k), torch.tensor([0, 1, 2, 3]), torch.tensor([3, 0, 4, 1])
    one_hot = F.one_hot(first, k).float()
    assert torch.allclose(soft_cross_entropy(logits, one_hot, alpha), smoothed_cross_entropy(logits, first, alpha))
    mixed = lam * one_hot + (1 - lam) * F.one_hot(second, k).float()
    log_p = F.log_softmax(logits, dim=1)
    by_hand = []
    for i, (a, b) in enumerate(zip(first.tolist(), second.tolist())):
        target = [alpha / (k - 1)] * k
        target[a] = lam * (1 - alpha) + (1 - lam) * alpha / (k - 1)
        target[b] = (1 - lam) * (1 - alpha) + lam * alpha / (k - 1)
        by_hand.append(-sum(t * log_p[i, j] for j, t in enumerate(target)))
    assert torch.allclose(soft_cross_entropy(logits, mixed, alpha), torch.stack(by_hand), atol=1e-6)
    pytorch = F.cross_entropy(logits, mixed, label_smoothing=alpha, reduction="none")  # 1 - alpha + alpha / k
    assert not torch.allclose(soft_cross_entropy(logits, mixed, alpha), pytorch, atol=1e-3)


def test_the_erm_loss_part_is_plain_cross_entropy():
    """erm takes no alpha: its loss is cross-entropy on the labels, unsmoothed, also on one-hot float targets."""
    logits, labels = torch.randn(5, 3), torch.tensor([0, 1, 2, 1, 0])
    loss = SmoothedLoss(parse_method("erm").resolve({}))
    assert torch.allclose(loss(logits, labels), F.cross_entropy(logits, labels, reduction="none"))
    assert torch.allclose(loss(logits, F.one_hot(labels, 3).float()), F.cross_entropy(logits, labels, reduction="none"))
