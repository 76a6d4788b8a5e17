"""The adversarial generators against their definitions, in [0, 1] pixel space, and against torchattacks 3.5.1 (the
package they were taken from, where it is installed) bit for bit; and the GI-LS + attack chain of the GI-LS paper's
Table 7."""
import pytest
import torch
import torch.nn.functional as F

from pipeline.methods import parse_method
from pipeline.methods.context import PartContext, global_rng_from
from pipeline.methods.declarations import GENERATORS
from pipeline.methods.generators import GilsAscent, features_and_logits
from pipeline.methods.updates import build_update
from pipeline.training.models import build_model

MEAN, STD = (0.3,), (0.2,)


def setting(seed: int = 0):
    """A small CNN in eval mode and a batch of normalised images whose pixels lie in [0, 1]."""
    torch.manual_seed(seed)
    model = build_model("small_cnn", "none", 1, 4).eval()
    pixels = torch.rand(16, 1, 8, 8)
    return model, (pixels - MEAN[0]) / STD[0], pixels, torch.arange(16) % 4


def context(seed: int = 0) -> PartContext:
    return PartContext(torch.Generator().manual_seed(seed), 4, MEAN, STD)


def attack(name: str, model, seed: int = 0, **given):
    return GENERATORS.load(name)(parse_method(name).resolve(given), context(seed), model)


def pixel_loss(model, pixels, labels) -> torch.Tensor:
    return F.cross_entropy(model((pixels - MEAN[0]) / STD[0]), labels)


def test_pgd_stays_in_the_eps_ball_in_pixel_space_and_raises_the_loss():
    model, images, pixels, labels = setting()
    generated, _ = attack("pgd", model).generate(model, images, labels)
    adversarial = generated * STD[0] + MEAN[0]
    assert (adversarial - pixels).abs().max() <= 8 / 255 + 1e-5
    assert adversarial.min() >= -1e-6 and adversarial.max() <= 1 + 1e-6
    assert (adversarial - pixels).abs().max() > 4 / 255  # it moved
    assert pixel_loss(model, adversarial, labels) > pixel_loss(model, pixels, labels)


def test_pgd_random_start_comes_from_the_run_generator():
    model, images, _, labels = setting()
    state = torch.get_rng_state()
    first, _ = attack("pgd", model, seed=1, pgd_steps=1).generate(model, images, labels)
    second, _ = attack("pgd", model, seed=1, pgd_steps=1).generate(model, images, labels)
    other, _ = attack("pgd", model, seed=2, pgd_steps=1).generate(model, images, labels)
    assert torch.equal(first, second) and not torch.equal(first, other)
    assert torch.equal(torch.get_rng_state(), state)


def test_fgsm_is_eps_times_the_sign_of_the_input_gradient_clipped():
    model, images, pixels, labels = setting()
    generated, _ = attack("fgsm", model, fgsm_eps=0.1).generate(model, images, labels)
    x = pixels.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(pixel_loss(model, x, labels), x)
    expected = (pixels + 0.1 * gradient.sign()).clamp(0, 1)
    assert torch.allclose(generated * STD[0] + MEAN[0], expected, atol=1e-5)


def test_pgdl2_stays_in_the_l2_ball():
    model, images, pixels, labels = setting()
    generated, _ = attack("pgdl2", model).generate(model, images, labels)
    norms = (generated * STD[0] + MEAN[0] - pixels).flatten(1).norm(dim=1)
    assert norms.max() <= 0.5 + 1e-4 and norms.max() > 0.1


def test_cw_returns_misclassified_examples_or_the_original():
    """Carlini-Wagner keeps the closest adversarial example found, and the original where it found none."""
    _, images, _, labels = setting()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))  # a model it can fool in 50 steps
    generated, _ = attack("cw", model, cw_c=10.0, cw_lr=0.1).generate(model, images, labels)
    changed = (generated - images).flatten(1).abs().amax(dim=1) > 1e-4
    with torch.no_grad():
        wrong = model(generated).argmax(dim=1) != labels
    assert changed.any() and wrong[changed].all()


def test_gils_pgd_applies_pgd_to_the_gils_ascent_output():
    model, images, _, labels = setting()
    params = parse_method("gils+pgd").resolve({"T": 3, "eta": 1.0})
    generated, start_losses = build_update(parse_method("gils+pgd"), params, context(5), model).generate(
        model, images, labels)
    ascended, _ = GilsAscent(params).ascend(features_and_logits(model), images, labels)
    expected, _ = GENERATORS.load("pgd")(params, context(5), model).generate(model, ascended, labels)
    assert torch.equal(generated, expected)
    assert start_losses is not None and start_losses.shape == (16,)


def test_attacks_leave_batchnorm_statistics_and_parameters_alone():
    model, images, _, labels = setting()
    model.train()
    before = [t.clone() for t in model.state_dict().values()]
    update = build_update(parse_method("pgd"), parse_method("pgd").resolve({}), context(), model)
    update.generate(model, images, labels)
    assert model.training
    assert all(torch.equal(a, b) for a, b in zip(before, model.state_dict().values()))
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("name, constructor, given", [
    ("pgd", "PGD", dict(eps="pgd_eps", alpha="pgd_step", steps="pgd_steps")),
    ("fgsm", "FGSM", dict(eps="fgsm_eps")),
    ("pgdl2", "PGDL2", dict(eps="pgdl2_eps", alpha="pgdl2_step", steps="pgdl2_steps")),
    ("cw", "CW", dict(c="cw_c", steps="cw_steps", lr="cw_lr")),
])
def test_each_attack_gives_torchattacks_numbers_bit_for_bit(name, constructor, given):
    """The attacks were torchattacks' until it was dropped as a dependency (it pins a `requests` with published
    advisories): the same draws from the global RNG and the same operations, so stored runs keep their meaning.
    `make test` installs torchattacks for this test alone, without its dependencies."""
    torchattacks = pytest.importorskip("torchattacks")
    torch.manual_seed(3)
    model = build_model("small_cnn", "none", 3, 4).eval()  # three channels: the normalisation is per channel
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    pixels = torch.rand(8, 3, 8, 8)
    images = (pixels - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    labels = torch.arange(8) % 4
    params = parse_method(name).resolve({"cw_c": 5.0, "cw_steps": 20, "cw_lr": 0.05} if name == "cw" else {})
    ours, _ = GENERATORS.load(name)(params, PartContext(torch.Generator().manual_seed(7), 4, mean, std),
                                    model).generate(model, images, labels)
    theirs = getattr(torchattacks, constructor)(model, **{keyword: params[p] for keyword, p in given.items()})
    theirs.set_normalization_used(mean=list(mean), std=list(std))
    with global_rng_from(torch.Generator().manual_seed(7)):
        expected = theirs(images, labels)
    assert torch.equal(ours, expected)
    assert not torch.equal(ours, images)  # the attack moved something
