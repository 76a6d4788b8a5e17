"""On-device batch augmentation: what it does to images, and that training with it stays deterministic."""
import torch
import torch.nn.functional as F

from pipeline.config import DataConfig, TrainConfig
from pipeline.data.augment import augment_batch, make_augment
from pipeline.training.trainer import train

IMAGES = torch.arange(4 * 2 * 5 * 6, dtype=torch.float32).view(4, 2, 5, 6) + 1  # no zeros: padding shows


def test_augmentation_is_off_by_default():
    assert make_augment(DataConfig(), torch.Generator())(IMAGES) is IMAGES


def test_flip_mirrors_some_images_and_leaves_the_others():
    out = augment_batch(IMAGES, torch.Generator().manual_seed(0), flip=True, padding=0)
    kept = [torch.equal(o, i) for o, i in zip(out, IMAGES)]
    mirrored = [torch.equal(o, i.flip(2)) for o, i in zip(out, IMAGES)]
    assert all(k or m for k, m in zip(kept, mirrored)) and any(kept) and any(mirrored)


def test_crop_is_a_shift_of_the_padded_image_by_at_most_the_padding():
    padding = 2
    out = augment_batch(IMAGES, torch.Generator().manual_seed(3), flip=False, padding=padding)
    assert out.shape == IMAGES.shape and out.is_contiguous()
    shifts = []
    for o, image in zip(out, IMAGES):
        padded = F.pad(image, (padding,) * 4)
        found = [(dy, dx) for dy in range(2 * padding + 1) for dx in range(2 * padding + 1)
                 if torch.equal(padded[:, dy:dy + 5, dx:dx + 6], o)]
        assert found
        shifts.append(found[0])
    assert len(set(shifts)) > 1


def test_the_same_generator_seed_gives_the_same_batch():
    first = augment_batch(IMAGES, torch.Generator().manual_seed(7), flip=True, padding=1)
    again = augment_batch(IMAGES, torch.Generator().manual_seed(7), flip=True, padding=1)
    assert torch.equal(first, again)


def test_training_with_augmentation_is_deterministic_on_cpu_and_differs_from_without(digits):
    data = DataConfig(augment_flip=True, augment_crop_padding=1)
    config = TrainConfig(data=data, device="cpu", params={"epochs": 1})
    first, second = train(config, digits), train(config, digits)
    assert [e.train_loss for e in first.epochs] == [e.train_loss for e in second.epochs]
    plain = train(TrainConfig(device="cpu", params={"epochs": 1}), digits)
    assert [e.train_loss for e in plain.epochs] != [e.train_loss for e in first.epochs]
