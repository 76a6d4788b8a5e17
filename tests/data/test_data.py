"""The embedded digits data set: stratified seeded splits and the imbalance protocol."""
import pytest
import torch

from pipeline.config import DataConfig
from pipeline.data import load_dataset
from pipeline.errors import UserError

CPU = torch.device("cpu")


def test_digits_split_is_stratified_disjoint_and_complete(digits):
    assert digits.num_classes == 10 and digits.in_channels == 1
    assert digits.train.images.shape[1:] == (1, 8, 8) and digits.train.images.dtype == torch.float32
    sizes = len(digits.train), len(digits.val), len(digits.test)
    assert sum(sizes) == 1797
    assert abs(len(digits.val) / 1797 - 0.2) < 0.01 and abs(len(digits.test) / 1797 - 0.2) < 0.01
    for split in (digits.train, digits.val, digits.test):
        counts = split.class_counts(10)
        assert max(counts) - min(counts) <= max(counts) * 0.1  # each class in about the same share
    rows = torch.cat([digits.train.images, digits.val.images, digits.test.images]).flatten(1)
    assert len(torch.unique(rows, dim=0)) >= 1797 - 20  # a handful of real duplicate digits at most


def test_split_is_deterministic_for_a_seed_and_changes_with_it(digits):
    again = load_dataset(DataConfig(), CPU)
    assert torch.equal(again.test.images, digits.test.images) and torch.equal(again.train.labels, digits.train.labels)
    other = load_dataset(DataConfig(split_seed=1), CPU)
    assert not torch.equal(other.test.images, digits.test.images)


def test_imbalance_in_train_keeps_validation_and_test_at_their_natural_shares(digits):
    """The hardness paper's protocol: only training loses examples of the rare class."""
    rare = load_dataset(DataConfig(imbalance_class="3", imbalance_keep=0.05), CPU)
    assert DataConfig().imbalance_in == "train"
    full_train = digits.train.class_counts(10)
    train = rare.train.class_counts(10)
    assert train[3] == round(0.05 * full_train[3])
    assert [c for i, c in enumerate(train) if i != 3] == [c for i, c in enumerate(full_train) if i != 3]
    assert torch.equal(rare.val.labels, digits.val.labels)  # the same examples (standardised with train statistics)
    assert torch.equal(rare.test.labels, digits.test.labels)
    assert rare.val.class_counts(10)[3] >= 20  # enough for a validation objective to see the rare class


def test_imbalance_in_train_and_val_skews_validation_too(digits):
    rare = load_dataset(DataConfig(imbalance_class="3", imbalance_keep=0.05, imbalance_in="train+val"), CPU)
    full_train, full_val = digits.train.class_counts(10), digits.val.class_counts(10)
    train, val = rare.train.class_counts(10), rare.val.class_counts(10)
    assert train[3] == round(0.05 * full_train[3]) and val[3] == max(1, round(0.05 * full_val[3]))
    assert [c for i, c in enumerate(val) if i != 3] == [c for i, c in enumerate(full_val) if i != 3]
    assert torch.equal(rare.test.labels, digits.test.labels)


def test_imbalance_keeps_at_least_one_example():
    rare = load_dataset(DataConfig(imbalance_class="7", imbalance_keep=0.001, imbalance_in="train+val"), CPU)
    assert rare.train.class_counts(10)[7] == 1 and rare.val.class_counts(10)[7] == 1


def test_bad_data_options():
    with pytest.raises(UserError, match=r"data.imbalance_class: unknown class '11' \(did you mean 1\?\); classes: 0"):
        load_dataset(DataConfig(imbalance_class="11"), CPU)
    with pytest.raises(UserError, match="name must be one of digits, images, idx, medmnist, got 'mnist'"):
        DataConfig(name="mnist")
    from pipeline.data import LOADERS
    from pipeline.config import DATA_SETS

    assert tuple(LOADERS) == DATA_SETS


def test_bad_fractions():
    with pytest.raises(UserError, match="imbalance_keep"):
        DataConfig(imbalance_keep=0)
    with pytest.raises(UserError, match="imbalance_in must be one of train, train\\+val, got 'val'"):
        DataConfig(imbalance_in="val")
    with pytest.raises(UserError, match="val_fraction"):
        DataConfig(val_fraction=0.6, test_fraction=0.5)


def test_the_digits_are_scikit_learns_to_the_bit_read_without_importing_it():
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from pipeline.data.digits import shipped_digits

    images, target = shipped_digits()
    bunch = load_digits()
    assert np.array_equal(images, bunch.images) and images.dtype == bunch.images.dtype
    assert np.array_equal(target, bunch.target) and list(bunch.target_names) == list(range(10))
    # a process that trains on digits does not pay scikit-learn's import (about 0.9 s)
    code = ("import sys; from pipeline.config import DataConfig; from pipeline.data import load_dataset; "
            "load_dataset(DataConfig(), 'cpu'); print('sklearn' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_a_sample_keeps_a_count_per_class_spread_over_the_parts_or_a_fraction_of_each_drawn_with_the_split_seed():
    from pipeline.data.splits import draw_sample

    labels = torch.tensor([0] * 60 + [1] * 30 + [0] * 20 + [1] * 10)  # a training part of 90, a test part of 30
    parts = [torch.arange(90), torch.arange(90, 120)]
    train, test = draw_sample(labels, parts, 20, split_seed=0)  # 20 of each class in all, 3:1 as the parts hold it
    assert torch.bincount(labels[train]).tolist() == [15, 15] and torch.bincount(labels[test]).tolist() == [5, 5]
    assert train.tolist() == sorted(train.tolist()) and set(train.tolist()) <= set(range(90))
    again, other = draw_sample(labels, parts, 20, 0)[0], draw_sample(labels, parts, 20, 1)[0]
    assert again.tolist() == train.tolist() != other.tolist()
    train, test = draw_sample(labels, parts, 0.1, split_seed=0)  # a tenth of each class of each part
    assert torch.bincount(labels[train]).tolist() == [6, 3] and torch.bincount(labels[test]).tolist() == [2, 1]
    assert [len(p) for p in draw_sample(labels, parts, 1000, 0)] == [90, 30]  # a count beyond a class keeps it all
    assert draw_sample(labels, parts, 2, 0)[1].tolist() != []  # each part keeps the class where the count allows


def test_digits_sampled_are_split_from_the_sample_and_the_rare_class_keeps_its_share_of_it():
    data = load_dataset(DataConfig(sample=50, imbalance_class="3", imbalance_keep=0.1), CPU)
    counts = data.split_counts()
    assert [sum(c) for c in zip(*counts.values())] == [50] * 3 + [10 + 10 + 3] + [50] * 6  # 10% of its 30 trained
    assert data.sample == (500, 1797) and "a sample (data.sample): 500 of the data set's 1,797 images" in \
        data.split_summary()
    with pytest.raises(UserError, match="sample must be a count of images per class"):
        DataConfig(sample=0)
