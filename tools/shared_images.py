"""Measure two things `bench verdict` models about a campaign's paired runs, on the digits campaign
(studies/digits-campaign.toml: digit 3 rare in training, small CNN, 20 epochs of plain SGD):

1. How much two runs of a pair share their test images. Both runs of a confirmation pair are tested on the same
   images, and an image one model gets wrong the other often gets wrong too, so the binomial noise of a paired
   difference is smaller than two independent binomials'. Measured as the Gaussian copula's correlation c
   (`bench verdict --image-correlation`): image i is right for run j when sqrt(c) z_i + sqrt(1 - c) e_ij lies below
   the run's quantile Phi^-1(p_j), z the image's own difficulty, shared. c is fitted so that the mean over pairs of
   runs of P(both right) matches the observed share of images both got right.
2. Whether the search's validation images bias a difference when they reappear in a later pair's test set
   (resplit draws the split again for each pair, so pair k's test set holds about a validation share of the
   images the search chose its configuration on). Each method is searched on split 0 (random search, selected on
   validation balanced accuracy, as a study picks), its pick re-trained on pairs 1..K (training seed k, split seed
   k); per pair, the accuracy on test images that were in split 0's validation set and on those that were not.
   Images are matched by their pixels.

    python tools/shared_images.py --pairs 8 --searches 6 --trials 8
"""
from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAMPAIGN = ROOT / "studies" / "digits-campaign.toml"
# Tuned values the digits campaign found (README, base split 0), for the image-sharing runs.
TUNED = {"erm": {"lr_head": 0.083, "lr_backbone": 0.75},
         "cb": {"lr_head": 0.196, "lr_backbone": 0.080, "cb_power": 1.0},
         "hws": {"lr_head": 0.8, "lr_backbone": 0.8, "beta": 0.025, "importance_sampling": False}}
SEARCHED = {"erm": {}, "cb": {"cb_power": (0.0, 1.0, False)}}  # each method's own searched range for part 2
LEARNING_RATES = {"lr_head": (0.01, 0.8, True), "lr_backbone": (0.01, 0.8, True)}


def _study(method: str):
    from pipeline.spec.campaign_config import load_campaign

    return load_campaign(CAMPAIGN).study(method)


def _image_keys(split, dataset) -> list[str]:
    """Each image of a split by a hash of its raw pixels (the digits are 0-16 counts over 16, standardised with each
    split's training statistics: undone and rounded to the raw counts first)."""
    import numpy as np

    mean, std = np.array(dataset.pixel_mean), np.array(dataset.pixel_std)
    images = split.images.cpu().numpy()
    raw = np.rint(16 * (images * std.reshape(1, -1, 1, 1) + mean.reshape(1, -1, 1, 1))).astype(np.int16)
    return [hashlib.sha1(image.tobytes()).hexdigest() for image in raw]


def _trained(method: str, parameters: dict, seed: int, split_seed: int):
    """One run: its correctness per test image, the test images' keys and labels, the validation images' keys, the
    validation balanced accuracy, the class names and the rare class's index."""
    import torch

    from pipeline.search.trial import dataset_for
    from pipeline.training.metrics import predict
    from pipeline.training.trainer import train

    study = _study(method)
    study = replace(study, data=replace(study.data, split_seed=split_seed))
    config = study.train_config(parameters, seed, "cpu")
    dataset = dataset_for(config.data, "cpu")
    torch.set_num_threads(1)
    result = train(config, dataset)
    right = (predict(result.model, dataset.test) == dataset.test.labels).numpy()
    counts = dataset.train.class_counts(dataset.num_classes)
    return (right, _image_keys(dataset.test, dataset), dataset.test.labels.numpy(), set(_image_keys(dataset.val,
                                                                                                   dataset)),
            result.val.balanced_accuracy, int(np.argmin(counts)))


def _copula_joint(p_a: float, p_b: float, c: float) -> float:
    """P(both right) under the Gaussian copula with correlation c."""
    from scipy.special import ndtri
    from scipy.stats import multivariate_normal

    if p_a <= 0 or p_b <= 0:
        return 0.0
    if p_a >= 1 or p_b >= 1:
        return min(p_a, p_b)
    q = [ndtri(p_a), ndtri(p_b)]
    return float(multivariate_normal(mean=[0, 0], cov=[[1, c], [c, 1]]).cdf(q))


def fit_copula(pairs: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The copula correlation c that makes the mean predicted P(both right) over the pairs of runs equal the
    observed share of images both got right (bisection over [0, 0.999])."""
    observed = statistics.fmean(float(np.mean(a & b)) for a, b in pairs)
    margins = [(float(np.mean(a)), float(np.mean(b))) for a, b in pairs]
    low, high = 0.0, 0.999
    if statistics.fmean(_copula_joint(pa, pb, low) for pa, pb in margins) >= observed:
        return 0.0
    for _ in range(30):
        middle = (low + high) / 2
        if statistics.fmean(_copula_joint(pa, pb, middle) for pa, pb in margins) < observed:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def image_sharing(pairs: int) -> None:
    """Part 1: ERM, cb and hws at their tuned values and a second ERM seed, on `pairs` (seed, split) pairs."""
    every, rare = [], []
    variance_ratio = {"all": [], "rare": []}
    for k in range(pairs):
        runs = {m: _trained(m, TUNED[m], k, k) for m in TUNED}
        runs["erm seed 2"] = _trained("erm", TUNED["erm"], 500 + k, k)
        labels, rare_class = runs["erm"][2], runs["erm"][5]
        names = list(runs)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                every.append((runs[a][0], runs[b][0]))
                mask = labels == rare_class
                rare.append((runs[a][0][mask], runs[b][0][mask]))
                for label, (x, y) in (("all", every[-1]), ("rare", rare[-1])):
                    p_x, p_y, n = x.mean(), y.mean(), len(x)
                    independent = (p_x * (1 - p_x) + p_y * (1 - p_y)) / n
                    disagree = float(np.mean(x != y))  # the paired difference's variance is about this / n
                    if independent > 0:
                        variance_ratio[label].append((disagree - (p_x - p_y) ** 2) / n / independent)
        print(f"pair {k}: " + ", ".join(f"{m} {100 * r[0].mean():.1f}%" for m, r in runs.items()), flush=True)
    for label, found in (("all test images", every), ("rare class", rare)):
        ratio = statistics.fmean(variance_ratio["all" if label.startswith("all") else "rare"])
        print(f"{label}: copula correlation c = {fit_copula(found):.2f}; a paired difference's binomial variance is "
              f"{100 * ratio:.0f}% of two independent binomials' ({len(found)} pairs of runs)")


def _random_configs(method: str, count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, len(method)])
    space = {**LEARNING_RATES, **SEARCHED[method]}
    configs = []
    for _ in range(count):
        config = {}
        for name, (low, high, log) in space.items():
            u = rng.random()
            config[name] = float(low * (high / low) ** u) if log else float(low + u * (high - low))
        configs.append(config)
    return configs


def validation_reuse(pairs: int, searches: int, trials: int) -> None:
    """Part 2: each method searched on split 0 by `searches` random searches of `trials` trials, each pick
    re-trained on pairs 1..pairs; the difference to ERM on test images seen in split 0's validation set and not."""
    seen_gap, unseen_gap = [], []
    for search in range(searches):
        picks = {}
        for method in SEARCHED:
            tried = [(_trained(method, config, 1000 * search, 0)[4], i, config)
                     for i, config in enumerate(_random_configs(method, trials, search))]
            picks[method] = max(tried, key=lambda t: (t[0], -t[1]))[2]
        validation = _trained("erm", picks["erm"], 0, 0)[3]
        for k in range(1, pairs + 1):
            runs = {m: _trained(m, picks[m], 1000 * search + k, 1000 * search + k) for m in SEARCHED}
            keys = runs["erm"][1]
            seen = np.array([key in validation for key in keys])
            if seen.sum() == 0 or (~seen).sum() == 0:
                continue
            difference = runs["cb"][0].astype(float) - runs["erm"][0].astype(float)
            seen_gap.append(float(difference[seen].mean()))
            unseen_gap.append(float(difference[~seen].mean()))
        print(f"search {search}: picks {picks}; {len(seen_gap)} pairs so far", flush=True)
    gaps = [a - b for a, b in zip(seen_gap, unseen_gap)]
    mean = statistics.fmean(gaps)
    se = statistics.stdev(gaps) / math.sqrt(len(gaps))
    print(f"cb - ERM on test images the searches validated on: {100 * statistics.fmean(seen_gap):+.2f} points; on "
          f"the others: {100 * statistics.fmean(unseen_gap):+.2f}; the gap {100 * mean:+.2f} ± "
          f"{100 * 1.96 * se:.2f} (95%, {len(gaps)} pairs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--searches", type=int, default=6)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--part", choices=("sharing", "reuse", "both"), default="both")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.part in ("sharing", "both"):
        image_sharing(args.pairs)
    if args.part in ("reuse", "both"):
        validation_reuse(args.pairs, args.searches, args.trials)
    print(f"{(time.perf_counter() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
