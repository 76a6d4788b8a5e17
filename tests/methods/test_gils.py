"""GI-LS (Algorithm 1 of the GI-LS paper): the ascent, its closed form and its descent steps."""

import copy

import pytest
import torch
import torch.nn as nn

from pipeline.methods.losses import SmoothedLoss, smoothed_cross_entropy, smoothed_targets
from pipeline.methods import parse_method
from pipeline.methods.context import PartContext
from pipeline.methods.generators import GilsAscent, features_and_logits
from pipeline.methods.updates import OneDescentUpdate, TwoDescentUpdate, build_update
from pipeline.training.models import build_model, make_optimizer
from pipeline.params import TRAINING_PARAMS, resolve


def ascent(**given) -> GilsAscent:
    return GilsAscent(parse_method("gils").resolve(given))


def gils(**given) -> TwoDescentUpdate:
    params = parse_method("gils").resolve(given)
    return TwoDescentUpdate(SmoothedLoss(params), [GilsAscent(params)])


def training_params(**given) -> dict:
    return resolve(TRAINING_PARAMS, given, "erm")


def small_model(seed: int = 0, in_channels: int = 1, classes: int = 4):
    torch.manual_seed(seed)
    return build_model("small_cnn", "none", in_channels, classes)


def twins(seed: int):
    """Two identical models with their optimisers: one for the update, one for the by-hand steps."""
    return [(model, make_optimizer(model, training_params())[0]) for model in (small_model(seed), small_model(seed))]


def assert_same_parameters(a: nn.Module, b: nn.Module, atol: float = 1e-6) -> None:
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=atol)


def test_feature_ascent_first_step_matches_eq_16_closed_form():
    """At z' the transport cost has zero gradient, so z1 - z0 = eta * grad_z l_LS; for a linear
    head W, with the sign of a cross-entropy gradient: grad = sum_j p_j w_j - sum_j y_j w_j."""
    torch.manual_seed(0)
    k, d, alpha, eta = 5, 7, 0.3, 2.0
    head = nn.Linear(d, k)
    z0, labels = torch.randn(6, d), torch.tensor([0, 1, 2, 3, 4, 0])
    update = ascent(alpha=alpha, T=1, eta=eta)
    z1, _ = update.ascend(lambda z: (z, head(z)), z0, labels)  # autograd
    assert torch.allclose(update.ascend_features(head, z0, labels), z1, atol=1e-6)  # closed form
    p = torch.softmax(head(z0), dim=1)
    y = smoothed_targets(labels, k, alpha)
    closed_form = p @ head.weight - y @ head.weight  # rows: sum_j p_j w_j - sum_j y_j w_j
    assert torch.allclose((z1 - z0) / eta, closed_form.detach(), atol=1e-6)
    # eq. 16 as the paper writes it is the negative: (1-a) w_i + a/(k-1) sum_{j!=i} w_j - sum_j p_j w_j
    i = labels[0].item()
    paper = (1 - alpha) * head.weight[i] + alpha / (k - 1) * (head.weight.sum(0) - head.weight[i]) - p[0] @ head.weight
    assert torch.allclose(-(z1[0] - z0[0]) / eta, paper.detach(), atol=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_feature_ascent_includes_the_transport_cost_gradient(alpha):
    """From the second step on, -gamma * (z - z0) pulls the point back towards the original;
    the closed form and autograd on the objective take the same path."""
    torch.manual_seed(1)
    head = nn.Linear(3, 4)
    z0, labels = torch.randn(4, 3), torch.tensor([0, 1, 2, 3])
    gamma, eta = 0.5, 1.0
    update = ascent(T=3, eta=eta, gamma=gamma, alpha=alpha)
    z3 = update.ascend_features(head, z0, labels)
    assert torch.allclose(update.ascend(lambda z: (z, head(z)), z0, labels)[0], z3, atol=1e-5)
    z = z0.clone()
    for _ in range(3):
        z.requires_grad_(True)
        objective = smoothed_cross_entropy(head(z), labels, alpha) - gamma * 0.5 * (z - z0).pow(2).sum(1)
        (g,) = torch.autograd.grad(objective.sum(), z)
        z = (z + eta * g).detach()
    assert torch.allclose(z3, z, atol=1e-5)


def test_input_ascent_is_batched_exactly_like_one_example_at_a_time():
    model = small_model()
    images, labels = torch.randn(5, 1, 8, 8), torch.tensor([0, 1, 2, 3, 0])
    update = ascent(T=3, eta=0.5, alpha=0.2, gamma=0.01)
    model.eval()
    forward = features_and_logits(model)
    batched, _ = update.ascend(forward, images, labels)
    one_by_one = torch.cat([update.ascend(forward, images[i:i + 1], labels[i:i + 1])[0] for i in range(5)])
    assert torch.allclose(batched, one_by_one, atol=1e-5)
    assert not torch.allclose(batched, images)


def test_input_step_ascends_without_touching_parameters_or_batchnorm_statistics():
    model = small_model()
    update = ascent(T=4, eta=1.0)
    bn = model.features[0][1]
    before = (bn.running_mean.clone(), [p.clone() for p in model.parameters()])
    model.eval()
    update.ascend(features_and_logits(model), torch.randn(8, 1, 8, 8), torch.arange(8) % 4)
    assert torch.equal(bn.running_mean, before[0])
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before[1]))


def test_gils_with_T_zero_equals_two_clean_label_smoothing_steps():
    images, labels = torch.randn(8, 1, 8, 8), torch.arange(8) % 4
    (a, opt_a), (b, opt_b) = twins(seed=3)
    gils(T=0, alpha=0.2).step(a, opt_a, images, labels, lambda losses: None)
    ls = OneDescentUpdate(SmoothedLoss({"alpha": 0.2}))
    for _ in range(2):
        ls.step(b, opt_b, images, labels, lambda losses: None)
    assert_same_parameters(a, b)


def test_input_step_trains_on_the_generated_batch_then_the_original():
    """Reproduce one GI-LS step by hand: ascent in eval mode, then two LS descent steps."""
    images, labels = torch.randn(8, 1, 8, 8), torch.arange(8) % 4
    (a, opt_a), (b, opt_b) = twins(seed=4)
    update = gils(T=2, eta=1.5, alpha=0.3)
    update.step(a, opt_a, images, labels, lambda losses: None)

    b.eval()
    x, anchor = images.clone(), None
    for _ in range(2):
        x.requires_grad_(True)
        z = b.features(x)
        anchor = z.detach() if anchor is None else anchor
        objective = smoothed_cross_entropy(b.head(z), labels, 0.3) - 1e-3 * 0.5 * (z - anchor).pow(2).sum(1)
        (g,) = torch.autograd.grad(objective.sum(), x)
        x = (x + 1.5 * g).detach()
    b.train()
    for batch in (x, images):
        opt_b.zero_grad()
        smoothed_cross_entropy(b(batch), labels, 0.3).mean().backward()
        opt_b.step()
    assert_same_parameters(a, b, atol=1e-5)


def test_feature_step_moves_only_the_head_on_the_generated_batch():
    images, labels = torch.randn(8, 1, 8, 8), torch.arange(8) % 4
    (a, opt_a), (b, opt_b) = twins(seed=5)
    gils(T=3, eta=2.0, alpha=0.1, perturb="feature").step(a, opt_a, images, labels, lambda losses: None)

    z = b.features(images)
    generated, _ = ascent(T=3, eta=2.0, alpha=0.1).ascend(lambda f: (f, b.head(f)), z, labels)  # autograd
    opt_b.zero_grad(set_to_none=True)
    smoothed_cross_entropy(b.head(generated), labels, 0.1).mean().backward()
    assert all(p.grad is None for p in b.features.parameters())
    opt_b.step()
    opt_b.zero_grad(set_to_none=True)
    smoothed_cross_entropy(b(images), labels, 0.1).mean().backward()  # backbone unchanged: same z
    opt_b.step()
    assert_same_parameters(a, b, atol=1e-5)


def test_weights_from_the_sampler_multiply_both_descent_losses():
    images, labels = torch.randn(6, 1, 8, 8), torch.arange(6) % 4
    (a, opt_a), (b, opt_b) = twins(seed=6)
    seen = []
    ones = lambda losses: seen.append(losses) or torch.ones_like(losses)  # noqa: E731
    gils(T=2).step(a, opt_a, images, labels, ones)
    gils(T=2).step(b, opt_b, images, labels, lambda losses: None)
    assert len(seen) == 1 and seen[0].shape == (6,)
    assert_same_parameters(a, b)
    (doubled, opt_d), _ = twins(seed=6)
    gils(T=2).step(doubled, opt_d, images, labels, lambda losses: torch.full_like(losses, 2.0))
    assert not all(torch.allclose(p, q) for p, q in zip(doubled.parameters(), b.parameters()))


def generator_update(method: str, model: nn.Module, **given) -> TwoDescentUpdate:
    """The two-descent update of `method` (GI-LS, an attack, or both) for `model`, as a run builds it."""
    parsed = parse_method(method)
    params = parsed.resolve(given)
    context = PartContext(torch.Generator().manual_seed(0), 4, (0.0,), (1.0,))
    return build_update(parsed, params, context, model)


def weighted_descent(model, optimizer, logits_of, labels, weights, alpha) -> None:
    """One SGD step on (1/b) sum_i w_i loss_i, the loss eq. 3's cross-entropy."""
    optimizer.zero_grad(set_to_none=True)
    (weights * smoothed_cross_entropy(logits_of(model), labels, alpha)).mean().backward()
    optimizer.step()


@pytest.mark.parametrize("method, given", [("gils", {"T": 2, "eta": 1.5, "alpha": 0.2}), ("fgsm", {}),
                                           ("gils+fgsm", {"T": 1, "alpha": 0.2})])
def test_the_weights_multiply_the_generated_descent_and_the_original_descent(method, given):
    """Algorithm 1's two descents (on the generated batch, then on the original), each on the weighted loss."""
    images, labels = torch.randn(6, 1, 8, 8), torch.arange(6) % 4
    weights = torch.tensor([0.2, 3.0, 1.0, 0.5, 2.0, 0.3])
    (a, opt_a), (b, opt_b) = twins(seed=7)
    generator_update(method, a, **given).step(a, opt_a, images, labels, lambda losses: weights)
    b.eval()
    generated, _ = generator_update(method, b, **given).generate(b, images, labels)
    b.train()
    alpha = given.get("alpha", 0.0)
    for batch in (generated, images):
        weighted_descent(b, opt_b, lambda model: model(batch), labels, weights, alpha)
    assert_same_parameters(a, b, atol=1e-5)


def test_the_weights_multiply_both_descents_of_the_feature_step():
    images, labels = torch.randn(6, 1, 8, 8), torch.arange(6) % 4
    weights = torch.tensor([0.2, 3.0, 1.0, 0.5, 2.0, 0.3])
    (a, opt_a), (b, opt_b) = twins(seed=8)
    gils(T=2, eta=2.0, alpha=0.1, perturb="feature").step(a, opt_a, images, labels, lambda losses: weights)
    z = b.features(images)
    generated = ascent(T=2, eta=2.0, alpha=0.1).ascend_features(b.head, z.detach(), labels)
    weighted_descent(b, opt_b, lambda model: model.head(generated), labels, weights, 0.1)
    weighted_descent(b, opt_b, lambda model: model(images), labels, weights, 0.1)
    assert_same_parameters(a, b, atol=1e-5)


@pytest.mark.parametrize("method", ["fgsm", "gils+fgsm", "gils"])
def test_the_weights_get_the_original_batchs_losses_even_with_T_zero(method):
    """updates.py's contract: `weigh` sees the original batch's losses at the current parameters (eval mode, as
    the generators run), never the generated batch's, also when GI-LS with T = 0 is followed by an attack."""
    model, images, labels = small_model(seed=9), torch.randn(6, 1, 8, 8), torch.arange(6) % 4
    optimizer = make_optimizer(model, training_params())[0]
    update = generator_update(method, model, T=0, alpha=0.2) if "gils" in method else generator_update(method, model)
    alpha = 0.2 if "gils" in method else 0.0
    with torch.no_grad():
        original = smoothed_cross_entropy(model.eval()(images), labels, alpha)
        model.train()
    seen = []
    update.step(model, optimizer, images, labels, lambda losses: seen.append(losses) or None)
    assert len(seen) == 1 and torch.allclose(seen[0], original, atol=1e-6)


def test_one_descent_steps_on_the_weighted_mean_of_the_batchs_losses():
    """Without a generator, one SGD step on (1/b) sum_i w_i loss_i, the weights from the batch's own losses
    at the current parameters."""
    images, labels = torch.randn(6, 1, 8, 8), torch.arange(6) % 4
    weights = torch.tensor([0.2, 3.0, 1.0, 0.5, 2.0, 0.3])
    (a, opt_a), (b, opt_b) = twins(seed=10)
    with torch.no_grad():
        before = smoothed_cross_entropy(copy.deepcopy(b)(images), labels, 0.2)  # train mode, as the step's forward
    seen = []
    OneDescentUpdate(SmoothedLoss({"alpha": 0.2})).step(a, opt_a, images, labels,
                                                         lambda losses: seen.append(losses) or weights)
    assert len(seen) == 1 and torch.allclose(seen[0], before, atol=1e-6)
    weighted_descent(b, opt_b, lambda model: model(images), labels, weights, 0.2)
    assert_same_parameters(a, b, atol=1e-6)
