"""The weights parts (class-balanced, Group DRO, Learning to Reweight) against their formulas, and the
hardness sampler's options: draws without replacement and the distinct-examples statistic."""
import copy
import json
import math

import pytest
from conftest import markdown_rows
import torch
import torch.nn as nn

from pipeline.config import TrainConfig
from pipeline.data import Dataset, Split
from pipeline.methods import parse_method
from pipeline.methods.context import PartContext
from pipeline.methods.losses import SmoothedLoss
from pipeline.methods.samplers import DistinctCounter, HardnessWeightedSampler, UniformSampler, distinct_count
from pipeline.methods.updates import OneDescentUpdate
from pipeline.methods.weights import (ClassBalanced, GroupDro, LearningToReweight, NoWeights, batch_weigh,
                                      carve_clean_set, class_balanced_weights, l2rw_weights)
from pipeline.training.models import build_model, make_optimizer
from pipeline.training.trainer import prepare, train


def context(num_classes: int) -> PartContext:
    return PartContext(torch.Generator().manual_seed(0), num_classes, (0.0,), (1.0,))


def labelled(counts: list[int]) -> Split:
    """A split whose image i holds the number i everywhere, so every example can be told apart."""
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
    ids = torch.arange(len(labels), dtype=torch.float32)
    return Split(ids[:, None, None, None].expand(-1, 1, 8, 8).clone(), labels)


def test_class_balanced_weights_are_inverse_frequencies_with_mean_1_over_the_training_set():
    counts = torch.tensor([10, 30, 60, 0])
    weights = class_balanced_weights(counts, 1.0)
    # frequency^-1 = N / n_c, scaled so that sum_c n_c w_c = N: w_c = N / (K n_c) with K = 3 classes present
    assert weights.tolist() == pytest.approx([100 / 30, 100 / 90, 100 / 180, 0.0])
    assert (counts * weights).sum().item() == pytest.approx(100.0)
    half = class_balanced_weights(counts, 0.5)
    scale = 100 / (10 * 10 ** -0.5 + 30 * 30 ** -0.5 + 60 * 60 ** -0.5)
    assert half.tolist() == pytest.approx([scale * 10 ** -0.5, scale * 30 ** -0.5, scale * 60 ** -0.5, 0.0])
    assert class_balanced_weights(counts, 0.0).tolist() == pytest.approx([1.0, 1.0, 1.0, 0.0])


def test_class_balanced_weighs_labels_and_mixes_the_weights_of_mixed_examples():
    part = ClassBalanced({"cb_power": 1.0}, context(3), labelled([10, 30, 60]), None, None)
    w = part.class_weights.tolist()
    assert part.weigh(None, torch.tensor([2, 0, 1]), torch.ones(3)).tolist() == pytest.approx([w[2], w[0], w[1]])
    lam = 0.3  # Mixup's target for a mix of a class-0 and a class-2 image
    mixed = torch.tensor([[lam, 0.0, 1 - lam]])
    assert part.weigh(None, mixed, torch.ones(1)).item() == pytest.approx(lam * w[0] + (1 - lam) * w[2])


def test_groupdro_one_step_of_q_by_hand():
    eta, part = 0.5, GroupDro({"groupdro_eta": 0.5}, context(3), labelled([1, 1, 1]), None, None)
    labels, losses = torch.tensor([0, 0, 1, 0]), torch.tensor([1.0, 3.0, 2.5, 2.0])
    weights = part.weigh(None, labels, losses)
    # group means: class 0 (1 + 3 + 2) / 3 = 2, class 1 2.5, class 2 absent (its q only renormalised)
    raw = [math.exp(eta * 2.0) / 3, math.exp(eta * 2.5) / 3, 1 / 3]
    q = [r / sum(raw) for r in raw]
    assert part.q.tolist() == pytest.approx(q)
    # the step minimises sum_g q_g (group g's mean loss) = (1/b) sum_i w_i loss_i
    assert (weights * losses).mean().item() == pytest.approx(q[0] * 2.0 + q[1] * 2.5)
    assert weights.tolist() == pytest.approx([4 * q[0] / 3] * 2 + [4 * q[1]] + [4 * q[0] / 3])
    # a mixed example belongs to its two classes in proportion to its target
    part = GroupDro({"groupdro_eta": 0.5}, context(3), labelled([1, 1, 1]), None, None)
    part.weigh(None, torch.tensor([[0.25, 0.75, 0.0], [0.0, 1.0, 0.0]]), torch.tensor([4.0, 1.0]))
    group = [4.0, (0.75 * 4.0 + 1.0) / 1.75, 0.0]
    raw = [math.exp(eta * g) for g in group]
    assert part.q.tolist() == pytest.approx([r / sum(raw) for r in raw])


def clean_loss_after_look_ahead(model, images, labels, clean, rates, epsilon):
    """Algorithm 1, lines 5-9, written out: one SGD step on sum_i eps_i loss_i, then the clean loss."""
    params = dict(model.named_parameters())
    losses = nn.functional.cross_entropy(model(images), labels, reduction="none")
    grads = torch.autograd.grad((epsilon * losses).sum(), list(params.values()))
    ahead = {name: p - rates[name] * g for (name, p), g in zip(params.items(), grads)}
    logits = clean.images @ ahead["weight"].T + ahead["bias"]
    return nn.functional.cross_entropy(logits, clean.labels).item()


def test_l2rw_weights_match_a_finite_difference_of_the_clean_loss_then_clamp_and_normalise():
    generator = torch.Generator().manual_seed(1)
    model = nn.Linear(4, 3).double()
    images, labels = torch.randn(6, 4, generator=generator, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    labels[4] = 0  # a mislabelled-looking example or two, so that some gradients point the wrong way
    clean = Split(torch.randn(5, 4, generator=generator, dtype=torch.float64), torch.tensor([0, 1, 2, 1, 0]))
    rates = {"weight": 0.5, "bias": 0.2}  # the head and the rest may move at different learning rates
    h, slope = 1e-5, []
    for i in range(6):
        step = torch.zeros(6, dtype=torch.float64)
        step[i] = h
        slope.append((clean_loss_after_look_ahead(model, images, labels, clean, rates, step)
                      - clean_loss_after_look_ahead(model, images, labels, clean, rates, -step)) / (2 * h))
    expected = torch.tensor(slope).neg().clamp(min=0)
    assert 0 < (expected == 0).sum() < 6  # the clamp matters in this case
    weights = l2rw_weights(model, images, labels, clean, rates, alpha=0.0)
    assert weights.tolist() == pytest.approx((expected / expected.sum()).tolist(), rel=1e-5, abs=1e-9)
    assert weights.sum().item() == pytest.approx(1.0)
    assert model.weight.grad is None  # the look-ahead ran on a copy: no parameter gradient accumulated
    frozen = l2rw_weights(model, images, labels, clean, {"weight": 0.0, "bias": 0.0}, alpha=0.0)
    assert frozen.tolist() == [0.0] * 6  # no look-ahead movement: every weight 0, and all zero stays zero



def test_l2rw_weights_on_a_batchnorm_network_match_the_look_ahead_differentiated_through_a_backward_pass():
    """The forward-mode weights against Algorithm 1 differentiated as written (the gradient of the clean loss after
    the look-ahead with respect to epsilon, through the look-ahead's backward pass) on the small CNN in training
    mode, where BatchNorm ties every example's loss to the whole batch."""
    from torch.func import functional_call

    torch.manual_seed(0)
    model = build_model("small_cnn", "none", 1, 10).double().train()
    generator = torch.Generator().manual_seed(2)
    images, labels = torch.randn(16, 1, 8, 8, generator=generator, dtype=torch.float64), torch.arange(16) % 10
    clean = Split(torch.randn(10, 1, 8, 8, generator=generator, dtype=torch.float64), torch.arange(10))
    rates = {name: 0.5 if name.startswith("head") else 0.1 for name, _ in model.named_parameters()}
    params = dict(model.named_parameters())
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    losses = nn.functional.cross_entropy(functional_call(model, (params, buffers), (images,)), labels, reduction="none")
    epsilon = torch.zeros(16, dtype=torch.float64, requires_grad=True)
    grads = torch.autograd.grad((epsilon * losses).sum(), list(params.values()), create_graph=True)
    ahead = {name: p - rates[name] * g for (name, p), g in zip(params.items(), grads)}
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    clean_loss = nn.functional.cross_entropy(functional_call(model, (ahead, buffers), (clean.images,)), clean.labels)
    (slope,) = torch.autograd.grad(clean_loss, epsilon)
    expected = slope.neg().clamp(min=0)
    assert 0 < (expected == 0).sum() < 16  # the clamp matters in this case
    before = {name: b.clone() for name, b in model.named_buffers()}
    weights = l2rw_weights(model, images, labels, clean, rates, alpha=0.0)
    assert weights.tolist() == pytest.approx((expected / expected.sum()).tolist(), rel=1e-9, abs=1e-12)
    assert all(torch.equal(b, before[name]) for name, b in model.named_buffers())

def test_the_clean_set_is_carved_from_training_only_balanced_and_never_all_of_a_class():
    train = labelled([30, 12, 5, 1])
    rest, clean = carve_clean_set(train, 10, 4, torch.Generator().manual_seed(0))
    assert clean.class_counts(4) == [10, 6, 2, 1]  # min(10, half the class), at least one
    rest_ids, clean_ids = rest.images[:, 0, 0, 0].tolist(), clean.images[:, 0, 0, 0].tolist()
    assert sorted(rest_ids + clean_ids) == list(range(48)) and not set(rest_ids) & set(clean_ids)
    assert all(train.labels[int(i)] == label for i, label in zip(clean_ids, clean.labels.tolist()))


def test_the_clean_set_of_uint8_pixels_keeps_their_normalisation():
    pixels = torch.arange(8, dtype=torch.uint8).view(8, 1, 1, 1).expand(8, 3, 2, 2).contiguous()
    mean, std = torch.full((1, 3, 1, 1), 0.5), torch.full((1, 3, 1, 1), 0.25)
    train = Split(pixels, torch.tensor([0, 1] * 4), mean, std)
    rest, clean = carve_clean_set(train, 1, 2, torch.Generator().manual_seed(0))
    assert clean.images.dtype == torch.uint8 and len(clean) == 2 and len(rest) == 6
    assert torch.equal(clean.inputs(), (clean.images.float() / 255 - 0.5) / 0.25)
    assert torch.equal(rest.inputs(), (rest.images.float() / 255 - 0.5) / 0.25)


def test_l2rw_training_never_sees_validation_or_test_in_its_clean_set():
    split = labelled([20, 20, 20])
    ids = split.images[:, 0, 0, 0].long()
    parts = [Split(split.images[ids % 3 == r], split.labels[ids % 3 == r]) for r in range(3)]
    dataset = Dataset("ids", ["a", "b", "c"], *parts)
    run = prepare(TrainConfig(method="l2rw", device="cpu", params={"l2rw_clean_per_class": 2}), dataset)
    clean, kept = (set(s.images[:, 0, 0, 0].tolist()) for s in (run.weights.clean, run.train))
    train_ids, held_out = set(parts[0].images[:, 0, 0, 0].tolist()), set(
        parts[1].images[:, 0, 0, 0].tolist()) | set(parts[2].images[:, 0, 0, 0].tolist())
    assert len(clean) == 6 and clean <= train_ids and not clean & held_out
    assert kept == train_ids - clean and run.sampler.num_examples == len(kept)


def test_batch_weights_are_the_samplers_importance_weights_times_the_parts():
    sampler = HardnessWeightedSampler(4, 2, {"beta": 1.0, "importance_sampling": True},
                                      torch.Generator().manual_seed(0), initial_loss=1.0)
    part = ClassBalanced({"cb_power": 1.0}, context(2), labelled([1, 3]), None, None)
    weigh = batch_weigh(sampler, part, torch.tensor([0, 3]), None, torch.tensor([0, 1]))
    weights = weigh(torch.tensor([1.5, 0.5]))
    assert weights.tolist() == pytest.approx([math.exp(0.5) * 2.0, math.exp(-0.5) * 2 / 3])
    assert sampler.stale_losses.tolist() == [1.5, 1.0, 1.0, 0.5]
    assert batch_weigh(UniformSampler(4, 2, {}, torch.Generator()), NoWeights({}, None, None, None, None),
                       torch.tensor([0, 1]), None, None)(torch.ones(2)) is None


def skewed(replacement: bool) -> HardnessWeightedSampler:
    s = HardnessWeightedSampler(50, 32, {"beta": 1000.0, "importance_sampling": False,
                                         "hws_replacement": replacement}, torch.Generator().manual_seed(0))
    s.stale_losses = torch.linspace(0.0, 1.0, 50)  # at beta = 1000, softmax puts nearly all mass on the last
    return s


def test_hws_without_replacement_never_repeats_an_example_in_a_batch():
    batches = list(skewed(replacement=False).epoch())
    assert len(batches) == 2 and all(len(b) == 32 and len(b.unique()) == 32 for b in batches)
    small = HardnessWeightedSampler(5, 32, {"beta": 1.0, "importance_sampling": False, "hws_replacement": False},
                                    torch.Generator().manual_seed(0))
    assert sorted(next(iter(small.epoch())).tolist()) == [0, 1, 2, 3, 4]  # a batch larger than the data: all once


def test_the_distinct_examples_statistic_counts_repeats():
    assert distinct_count(torch.tensor([3, 3, 1, 2, 2, 2])).item() == 3
    counter = DistinctCounter()
    assert counter.mean_distinct_per_batch() is None
    list(counter.count(iter([torch.tensor([0, 1, 2]), torch.tensor([1, 1, 1]), torch.tensor([4, 0, 4])])))
    assert counter.mean_distinct_per_batch() == 2.0
    iid, without = skewed(replacement=True), skewed(replacement=False)
    list(iid.epoch()), list(without.epoch())
    assert iid.mean_distinct_per_batch() <= 3 and without.mean_distinct_per_batch() == 32.0  # degenerate vs full


def test_a_run_reports_distinct_examples_per_batch(digits):
    config = TrainConfig(method="hws", device="cpu", params={"epochs": 1, "batch_size": 64, "beta": 1000.0})
    result = train(config, digits)
    assert 1 <= result.distinct_per_batch < 64 and result.to_dict()["distinct_per_batch"] == result.distinct_per_batch


@pytest.mark.parametrize("method, param, message", [
    ("cb", "cb_power=1.5", "parameter cb_power must be in [0, 1]"),
    ("groupdro", "groupdro_eta=-1", "parameter groupdro_eta must be in [0, inf)"),
    ("l2rw", "l2rw_clean_per_class=0", "parameter l2rw_clean_per_class must be in [1, 1000]"),
    ("hws", "hws_replacement=maybe", "parameter hws_replacement must be true or false"),
    ("cb", "groupdro_eta=0.1", "unknown parameter 'groupdro_eta' for method cb"),
])
def test_bad_values_are_one_line_and_exit_2(cli, method, param, message):
    code, out, err = cli("train", "--method", method, "--param", param)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and message in lines[0]


def test_train_prints_the_distinct_examples_per_batch(cli):
    code, out, err = cli("train", "--method", "cb+hws", "--param", "epochs=1", "--param", "beta=1000",
                         "--param", "hws_replacement=false", "--device", "cpu")
    assert code == 0, err
    assert "distinct examples per batch: 32.0 on average (batch size 32)" in out


@pytest.mark.parametrize("method", ["gils+cb", "mixup+l2rw"])
def test_weights_compose_with_a_generator_and_a_mixer_from_the_cli(cli, method):
    code, out, err = cli("train", "--method", method, "--param", "epochs=2", "--param", "batch_size=128",
                         "--param", "T=1" if method == "gils+cb" else "mix_alpha=1", "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["settings"]["method"] == method and len(result["epoch_train_loss"]) == 2
    assert all(math.isfinite(loss) for loss in result["epoch_train_loss"])


def test_the_bench_measures_every_weights_part_against_erm(cli):
    code, out, err = cli("bench", "steps", "--setting", "digits", "--rounds", "1", "--steps", "2",
                         "--format", "markdown", "--method", "cb", "--method", "groupdro", "--method", "l2rw")
    assert code == 0, err
    cases = [row[1] for row in markdown_rows(out)]
    assert cases == ["erm", "cb", "groupdro", "l2rw", "plain DataLoader loop (ERM)"]
    code, _, err = cli("bench", "steps", "--method", "sgd")
    assert code == 2 and "no benchmark case for method 'sgd'" in err


def test_hws_without_replacement_fills_each_batch_as_its_floored_distribution_implies():
    """At beta = 1000 the softmax underflows: floored at 1e-4 / n and renormalised, the last example holds nearly
    all the mass and the 49 others share the rest equally, so every batch of 32 is the last example and 31 of
    the 49 others drawn uniformly: each of them in a batch with probability 31/49, batches all different."""
    sampler = skewed(replacement=False)
    batches = [sampler.draw() for _ in range(200)]
    assert all(49 in b.tolist() for b in batches)
    counts = torch.bincount(torch.cat(batches), minlength=50)[:49].float()
    expected, spread = 200 * 31 / 49, math.sqrt(200 * 31 / 49 * 18 / 49)  # binomial: 126.5 and 6.8
    assert ((counts - expected).abs() < 5 * spread).all()
    assert len({tuple(sorted(b.tolist())) for b in batches}) == 200


def test_the_floor_raises_each_probability_to_1e_4_over_n_and_renormalises():
    sampler, n = skewed(replacement=False), 50
    raised = torch.tensor([max(p, 1e-4 / n) for p in sampler.probabilities().tolist()], dtype=torch.float64)
    floored = sampler.floored_probabilities()
    assert floored.double().tolist() == pytest.approx((raised / raised.sum()).tolist(), rel=1e-5, abs=0)
    # the 49 underflowed examples hold 1e-4 / n each before renormalising: a tail of about 1e-4 in all
    assert floored[:49].sum().item() == pytest.approx(49 * 1e-4 / n / (1 + 49 * 1e-4 / n), rel=1e-4)
    mild = HardnessWeightedSampler(4, 2, {"beta": 1.0, "importance_sampling": False, "hws_replacement": False},
                                   torch.Generator().manual_seed(0))
    mild.stale_losses = torch.tensor([0.0, 1.0, 2.0, 3.0])
    assert torch.allclose(mild.floored_probabilities(), mild.probabilities())  # nothing below the floor: unchanged


def test_l2rw_look_ahead_leaves_batchnorm_statistics_to_the_real_forward_passes(digits):
    """Only the real step's forward pass moves BatchNorm's running statistics: after each step they are exactly
    those of a twin network that did one plain training-mode forward pass on each batch at the same parameters."""
    torch.manual_seed(0)
    model = build_model("small_cnn", "none", 1, 10)
    twin = copy.deepcopy(model)
    params = parse_method("l2rw").resolve({"l2rw_clean_per_class": 2})
    optimizer, _ = make_optimizer(model, params)
    part = LearningToReweight(params, context(10), digits.train, model, optimizer)
    update = OneDescentUpdate(SmoothedLoss(params))
    for start in (0, 32, 64):
        indices = torch.arange(start, start + 32)
        images, labels = part.train.inputs(indices), part.train.labels[indices]
        with torch.no_grad():
            for mine, its in zip(twin.parameters(), model.parameters()):
                mine.copy_(its)
            twin(images)
        update.step(model, optimizer, images, labels, lambda losses: part.weigh(images, labels, losses))
        for (name, buffer), (_, expected) in zip(model.named_buffers(), twin.named_buffers()):
            assert torch.equal(buffer, expected), name
    assert {b.item() for n, b in model.named_buffers() if n.endswith("num_batches_tracked")} == {3}


def test_l2rw_steps_on_algorithm_1s_sum_of_weighted_losses():
    """Ren et al.'s step minimises sum_i w_i C_i with weights summing to 1: as a per-example weight on the
    mean (1/b) sum_i w'_i C_i, each example weighs b w_i."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    part = LearningToReweight({"l2rw_clean_per_class": 2}, context(3), labelled([6, 6, 6]), model, optimizer)
    images, labels = part.train.inputs(), part.train.labels  # 12 examples; the clean set (6) is one batch
    losses = nn.functional.cross_entropy(model(images), labels, reduction="none").detach()
    weights = part.weigh(images, labels, losses)
    w = l2rw_weights(model, images, labels, part.clean, {"1.weight": 0.5, "1.bias": 0.5}, alpha=0.0)
    assert w.sum().item() == pytest.approx(1.0)
    assert (weights * losses).mean().item() == pytest.approx((w * losses).sum().item(), rel=1e-6)
