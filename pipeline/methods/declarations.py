"""Every method part's hyper-parameters and source, torch-free so `robust-tune methods`, --help and the
study-file checks read them without loading the training code.

A method is composed of parts, one registry per family: a loss, a sampler (which examples form the
batch), at most one mixer (rewrites the batch and its targets), a chain of generators (an extra
batch the model is trained on first) and at most one weights part (per-example loss weights). A parameter name means one thing: it is declared once, or shared
as the very same declaration by parts that are never combined (mix_alpha); anything else fails here.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.params import TRAINING_PARAMS, Choice, HParam, Range


@dataclass(frozen=True)
class Part:
    """One registered part: its family, its hyper-parameters and where it comes from."""

    name: str
    family: str  # "loss" | "sampler" | "mixer" | "generator" | "weights"
    params: tuple[HParam, ...]
    source: str


ALPHA = HParam("alpha", "float", 0.1, "[0, 1)", "label smoothing (eq. 3): true class 1 - alpha, others alpha / (k - 1)",
               Range(0.0, 0.5), column="alpha")
MIX_ALPHA = HParam("mix_alpha", "float", 1.0, "(0, inf)", "the mixing weight is drawn from Beta(a, a) "
                   "(default 1.0: uniform, as in both papers)", Range(0.1, 2.0))
EPS_8 = 8 / 255  # the GI-LS paper's maximum perturbation for PGD and FGSM (section 4.3)

LOSSES = {
    "erm": Part("erm", "loss", (), "plain cross-entropy training (the benchmark every table compares against)"),
    "ls": Part("ls", "loss", (ALPHA,), "label smoothing as in eq. 3 of the GI-LS paper"),
}

SAMPLERS = {
    "uniform": Part("uniform", "sampler", (), "every example once per epoch in a random order"),
    "hws": Part("hws", "sampler", (
        HParam("beta", "float", 10.0, "(0, inf)", "robustness: batches are drawn from softmax(beta * stale losses)",
               Range(0.1, 1000.0, log=True), column="beta"),
        HParam("importance_sampling", "bool", False, "", "weight losses by exp(beta * (loss - stale loss)), "
               "clipped to [0.1, 10]", Choice((False, True)), column="IS"),
        HParam("hws_replacement", "bool", True, "", "true: i.i.d. draws (the paper's formula); false: no "
               "example twice in a batch (the authors' released sampler)"),
    ), "DRO with hardness-weighted sampling (Algorithm 1 of the hardness-weighted sampling paper)"),
}

MIXERS = {
    "mixup": Part("mixup", "mixer", (MIX_ALPHA,), "Mixup (Zhang et al. 2018), torchvision.transforms.v2.MixUp"),
    "cutmix": Part("cutmix", "mixer", (MIX_ALPHA,), "CutMix (Yun et al. 2019), torchvision.transforms.v2.CutMix"),
    "cutout": Part("cutout", "mixer", (
        HParam("cutout_size", "int", 0, "[0, 4096]", "side of the zeroed square in pixels (0: half the image "
               "side, as DeVries and Taylor's 16 px on 32 px CIFAR-10)"),
    ), "Cutout (DeVries and Taylor 2017): one square hole at a random centre, clipped at the border"),
}

GENERATORS = {
    "gils": Part("gils", "generator", (
        HParam("T", "int", 5, "[0, 100]", "gradient-ascent steps per perturbed example (the paper searches "
               "1-15; each costs a forward and backward pass)", Range(1, 15), column="T"),
        HParam("eta", "float", 2.0, "(0, inf)", "gradient-ascent step size", Range(1.5, 3.0), column="eta"),
        HParam("gamma", "float", 1e-3, "[0, inf)", "transport-cost penalty of the Wasserstein DRO (paper: 1e-3)"),
        HParam("perturb", "choice", "input", ("input", "feature"),
               "ascend on the image (Algorithm 1 as written) or on the feature map z (nearly free)"),
    ), "GI-LS: label smoothing inside Wasserstein DRO (Algorithm 1 of the GI-LS paper)"),
    "pgd": Part("pgd", "generator", (
        HParam("pgd_eps", "float", EPS_8, "[0, 1]", "L-inf radius in [0, 1] pixels (GI-LS paper: 8/255)"),
        HParam("pgd_step", "float", 2 / 255, "[0, 1]", "step size (Madry et al. 2018 and torchattacks: 2/255)"),
        HParam("pgd_steps", "int", 10, "[1, 1000]", "steps from a random start (torchattacks' default: 10)"),
    ), "PGD adversarial training (Madry et al. 2018), torchattacks.PGD"),
    "fgsm": Part("fgsm", "generator", (
        HParam("fgsm_eps", "float", EPS_8, "[0, 1]", "step eps * sign(gradient) in [0, 1] pixels (GI-LS paper: 8/255)"),
    ), "FGSM adversarial training (Goodfellow et al. 2014), torchattacks.FGSM"),
    "cw": Part("cw", "generator", (
        HParam("cw_c", "float", 1.0, "(0, inf)", "weight of the misclassification term (torchattacks' default: 1)"),
        HParam("cw_steps", "int", 50, "[1, 1000]", "Adam steps (torchattacks' default: 50)"),
        HParam("cw_lr", "float", 0.01, "(0, inf)", "Adam learning rate (torchattacks' default: 0.01)"),
    ), "Carlini-Wagner L2 attack (Carlini and Wagner 2017), torchattacks.CW"),
    "pgdl2": Part("pgdl2", "generator", (
        HParam("pgdl2_eps", "float", 0.5, "(0, inf)", "L2 radius in [0, 1] pixels (0.5, the usual CIFAR value)"),
        HParam("pgdl2_step", "float", 0.1, "(0, inf)", "step size (eps / 5, the ratio of torchattacks' defaults)"),
        HParam("pgdl2_steps", "int", 10, "[1, 1000]", "steps from a random start (torchattacks' default: 10)"),
    ), "PGD in the L2 ball (Madry et al. 2018), torchattacks.PGDL2"),
}

WEIGHTS = {
    "cb": Part("cb", "weights", (
        HParam("cb_power", "float", 1.0, "[0, 1]", "weight frequency^-power of the example's class, mean 1 over "
               "the training set (1: inverse frequency, 0: ERM)", Range(0.0, 1.0)),
    ), "class-balanced loss weights: the inverse of the class's training frequency"),
    "groupdro": Part("groupdro", "weights", (
        HParam("groupdro_eta", "float", 0.01, "[0, inf)", "step size of the group weights: q_g *= "
               "exp(eta * group g's mean loss in the batch), then q is renormalised (DomainBed: 0.01)",
               Range(1e-3, 1e-1, log=True)),
    ), "Group DRO over the classes (Sagawa et al. 2020, the algorithm in DomainBed)"),
    "l2rw": Part("l2rw", "weights", (
        HParam("l2rw_clean_per_class", "int", 10, "[1, 1000]", "examples per class taken out of the "
               "training split as the clean set (at most half a class, at least one)"),
    ), "Learning to Reweight (Ren et al. 2018, Algorithm 1): weights from a look-ahead on a clean set"),
}

FAMILIES: dict[str, dict[str, Part]] = {"loss": LOSSES, "sampler": SAMPLERS, "mixer": MIXERS,
                                        "generator": GENERATORS, "weights": WEIGHTS}
PARTS: dict[str, Part] = {name: part for family in FAMILIES.values() for name, part in family.items()}


def all_params() -> tuple[HParam, ...]:
    """Every declared hyper-parameter once, in the order tables show them: the loss, the generators
    (the GI-LS paper's Table 3 columns alpha, T, eta), the mixers, the trainer, the samplers, the weights."""
    seen: dict[str, HParam] = {}
    for params in ([p for part in LOSSES.values() for p in part.params],
                   [p for part in GENERATORS.values() for p in part.params],
                   [p for part in MIXERS.values() for p in part.params], TRAINING_PARAMS,
                   [p for part in SAMPLERS.values() for p in part.params],
                   [p for part in WEIGHTS.values() for p in part.params]):
        for p in params:
            if seen.setdefault(p.name, p) is not p:
                raise ValueError(f"parameter {p.name} is declared twice with different meanings")
    return tuple(seen.values())


ALL_PARAMS = all_params()  # checked at import: a duplicate name fails here
