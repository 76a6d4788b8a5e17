"""Mixers against their definitions: Mixup, CutMix (torchvision) and Cutout, drawn from the run's generator."""
import torch
import torch.nn.functional as F

from pipeline.methods import parse_method
from pipeline.methods.context import PartContext
from pipeline.methods.declarations import MIXERS
from pipeline.methods.mixers import cutout

CLASSES = 4


def mixer(name: str, seed: int = 0, **given):
    context = PartContext(torch.Generator().manual_seed(seed), CLASSES, (0.0,), (1.0,))
    return MIXERS.load(name)(parse_method(name).resolve(given), context)


def batch():
    """Six 2x8x8 images whose every pixel differs from the previous image's, neighbours of other classes."""
    images = torch.arange(6 * 2 * 8 * 8, dtype=torch.float32).view(6, 2, 8, 8) + 1
    return images, torch.tensor([0, 1, 2, 3, 0, 1])


def test_mixup_mixes_images_and_targets_with_one_lambda_and_the_previous_example():
    images, labels = batch()
    mixed, targets = mixer("mixup", mix_alpha=0.4).mix(images.clone(), labels)
    lam = targets[0, labels[0]].item()
    assert 0 < lam < 1
    one_hot = F.one_hot(labels, CLASSES).float()
    assert torch.allclose(targets, lam * one_hot + (1 - lam) * one_hot.roll(1, 0))
    assert torch.allclose(mixed, lam * images + (1 - lam) * images.roll(1, 0))


def test_cutmix_lambda_is_one_minus_the_pasted_box_area_share():
    images, labels = batch()
    for seed in range(5):
        mixed, targets = mixer("cutmix", seed=seed).mix(images.clone(), labels)
        pasted = (mixed != images).any(dim=1, keepdim=True).expand_as(mixed)  # where the previous image shows
        assert torch.equal(mixed[pasted], images.roll(1, 0)[pasted])
        assert torch.equal(pasted, pasted[:1].expand_as(pasted))  # one box for the batch
        share = pasted[0, 0].float().mean().item()
        assert abs(targets[0, labels[0]].item() - (1 - share)) < 1e-6


def test_cutout_zeroes_exactly_the_square_clipped_at_the_border():
    images = torch.rand(50, 1, 9, 9) + 1
    out = cutout(images, 4, torch.Generator().manual_seed(3))
    twin = torch.Generator().manual_seed(3)
    cy, cx = torch.randint(0, 9, (50, 1), generator=twin), torch.randint(0, 9, (50, 1), generator=twin)
    for i in range(50):
        expected = images[i].clone()
        top, left = max(cy[i].item() - 2, 0), max(cx[i].item() - 2, 0)
        expected[:, top:cy[i].item() + 2, left:cx[i].item() + 2] = 0
        assert torch.equal(out[i], expected)
    holes = [(out[i] == 0).sum().item() for i in range(50)]
    assert max(holes) == 16 and min(holes) < 16  # whole squares and squares cut by the border


def test_cutout_default_is_half_the_side_and_labels_stay():
    images, labels = batch()
    out, targets = mixer("cutout").mix(images, labels)
    holes = (out == 0).sum(dim=(2, 3))
    assert targets is labels and (holes <= 4 * 4).all() and (holes > 0).all()


def test_the_same_seed_gives_the_same_mix_and_leaves_the_global_rng_alone():
    images, labels = batch()
    state = torch.get_rng_state()
    for name in ("mixup", "cutmix", "cutout"):
        first = mixer(name, seed=7).mix(images.clone(), labels)
        second = mixer(name, seed=7).mix(images.clone(), labels)
        assert all(torch.equal(a, b) for a, b in zip(first, second))
        assert not torch.equal(mixer(name, seed=8).mix(images.clone(), labels)[0], first[0])
    assert torch.equal(torch.get_rng_state(), state)
