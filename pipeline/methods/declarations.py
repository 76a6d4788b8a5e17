"""Every method part, declared once: its hyper-parameters, source and implementation, one registry per
family. Torch-free: each declaration names its implementation, imported when a run builds the part, so
`robust-tune methods`, --help and the study-file checks read them without loading the training code.

A method is composed of parts: a loss, a sampler (which examples form the batch), at most one mixer
(rewrites the batch and its targets), a chain of generators (an extra batch the model is trained on
first) and at most one weights part (per-example loss weights). Adding a part is a class and a
declaration here (or `PARTS.add` elsewhere); the rules every part keeps are checked on registration
(pipeline/methods/parts.py): a duplicate name or a parameter name with two meanings fails at import.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.methods.parts import Catalogue, Part, Registry, Requirement, Stage
from pipeline.params import TRAINING_PARAMS, Choice, HParam, Range

if TYPE_CHECKING:
    from pipeline.methods.interfaces import (GeneratorFactory, LossFactory, MixerFactory, SamplerFactory,
                                             WeightsFactory)

ALPHA = HParam("alpha", "float", 0.1, "[0, 1)", "label smoothing (eq. 3): true class 1 - alpha, others alpha / (k - 1)",
               Range(0.0, 0.5), column="alpha", soft="upper", limit="[0, 0.9]")
MIX_ALPHA = HParam("mix_alpha", "float", 1.0, "(0, inf)", "the mixing weight is drawn from Beta(a, a) "
                   "(default 1.0: uniform, as in both papers)", Range(0.1, 2.0), soft="both")
EPS_8 = 8 / 255  # the GI-LS paper's maximum perturbation for PGD and FGSM (section 4.3)

# The papers the parts' descriptions cite, by the name they cite them with, and each paper's title.
PAPERS = {
    "GI-LS paper": "Wang, Zhang, Xu et al.: Generalizing Few Data to Unseen Domains Flexibly Based on Label "
                   "Smoothing Integrated with Distributionally Robust Optimization",
    "hardness-weighted sampling paper": "Fidon, Ourselin and Vercauteren: Distributionally Robust Deep Learning "
                                        "using Hardness Weighted Sampling",
    "Zhang et al. 2018": "mixup: Beyond Empirical Risk Minimization (ICLR 2018)",
    "Yun et al. 2019": "CutMix: Regularization Strategy to Train Strong Classifiers with Localizable Features "
                       "(ICCV 2019)",
    "DeVries and Taylor 2017": "Improved Regularization of Convolutional Neural Networks with Cutout",
    "Madry et al. 2018": "Towards Deep Learning Models Resistant to Adversarial Attacks (ICLR 2018)",
    "Goodfellow et al. 2014": "Explaining and Harnessing Adversarial Examples (ICLR 2015)",
    "Carlini and Wagner 2017": "Towards Evaluating the Robustness of Neural Networks (IEEE S&P 2017)",
    "Sagawa et al. 2020": "Distributionally Robust Neural Networks for Group Shifts: On the Importance of "
                          "Regularization for Worst-Case Generalization (ICLR 2020)",
    "Ren et al. 2018": "Learning to Reweight Examples for Robust Deep Learning (ICML 2018)",
}

LOSS = "pipeline.methods.losses:SmoothedLoss"  # erm is eq. 3 with alpha = 0
ERM = Part("erm", "loss", (), "plain cross-entropy training (the benchmark every table compares against)", LOSS)
LOSSES: Registry[LossFactory] = Registry("loss", [
    ERM,
    Part("ls", "loss", (ALPHA,), "label smoothing as in eq. 3 of the GI-LS paper", LOSS, contains_erm_at="alpha = 0"),
], default=ERM)

UNIFORM = Part("uniform", "sampler", (), "every example once per epoch in a random order",
               "pipeline.methods.samplers:UniformSampler")
SAMPLERS: Registry[SamplerFactory] = Registry("sampler", [
    UNIFORM,
    Part("hws", "sampler", (
        HParam("beta", "float", 10.0, "(0, inf)", "robustness: batches are drawn from softmax(beta * stale losses)",
               Range(0.1, 1000.0, log=True), column="beta", soft="both"),
        HParam("importance_sampling", "bool", False, "", "weight losses by exp(beta * (loss - stale loss)), "
               "clipped to [0.1, 10]", Choice((False, True)), column="IS"),
        HParam("hws_replacement", "bool", True, "", "true: i.i.d. draws (the paper's formula); false: no "
               "example twice in a batch (the authors' released sampler)"),
    ), "DRO with hardness-weighted sampling (Algorithm 1 of the hardness-weighted sampling paper)",
        "pipeline.methods.samplers:HardnessWeightedSampler", contains_erm_at="beta near 0"),
], default=UNIFORM)

MIXERS: Registry[MixerFactory] = Registry("mixer", [
    Part("mixup", "mixer", (MIX_ALPHA,), "Mixup (Zhang et al. 2018), torchvision.transforms.v2.MixUp",
         "pipeline.methods.mixers:MixUpMixer"),
    Part("cutmix", "mixer", (MIX_ALPHA,), "CutMix (Yun et al. 2019), torchvision.transforms.v2.CutMix",
         "pipeline.methods.mixers:CutMixMixer"),
    Part("cutout", "mixer", (
        HParam("cutout_size", "int", 0, "[0, 4096]", "side of the zeroed square in pixels (0: half the image "
               "side, as DeVries and Taylor's 16 px on 32 px CIFAR-10)"),
    ), "Cutout (DeVries and Taylor 2017): one square hole at a random centre, clipped at the border",
        "pipeline.methods.mixers:CutoutMixer"),
], default=Part("no mixer", "mixer", (), "the batch as drawn", "pipeline.methods.mixers:NoMixer"))

# A chain of generators: GI-LS's ascent first, then at most one attack on its batch (the GI-LS paper's
# Table 7). The attacks are one class, given the attack (pipeline/methods/attacks.py, torchattacks' algorithms) and
# which of its keyword arguments each parameter sets.
ASCENT, ATTACK = Stage("ascent", 0), Stage("attack", 1)
ATTACK_CLASS = "pipeline.methods.generators:Attack"


def attack_options(attack: str, **arguments: str) -> dict[str, object]:
    """The Attack class's options for `attacks.ATTACKS[attack]`: keyword argument -> parameter name."""
    return {"attack": attack, "arguments": arguments}


GENERATORS: Registry[GeneratorFactory] = Registry("generator", [
    Part("gils", "generator", (
        HParam("T", "int", 5, "[0, 100]", "gradient-ascent steps per perturbed example (the paper searches "
               "1-15; each costs a forward and backward pass)", Range(1, 15), column="T", soft="upper"),
        HParam("eta", "float", 2.0, "(0, inf)", "gradient-ascent step size", Range(1.5, 3.0), column="eta",
               soft="both"),
        HParam("gamma", "float", 1e-3, "[0, inf)", "transport-cost penalty of the Wasserstein DRO (paper: 1e-3)",
               soft="both"),
        HParam("perturb", "choice", "input", ("input", "feature"),
               "ascend on the image (Algorithm 1 as written) or on the feature map z (nearly free)"),
    ), "GI-LS: label smoothing inside Wasserstein DRO (Algorithm 1 of the GI-LS paper)",
        "pipeline.methods.generators:GilsAscent", implies_loss="ls",
        implies_why="GI-LS trains on label-smoothed targets", stage=ASCENT,
        when_followed=Requirement("perturb", "input", "attacks the GI-LS batch in pixel space")),
    Part("pgd", "generator", (
        HParam("pgd_eps", "float", EPS_8, "[0, 1]", "L-inf radius in [0, 1] pixels (GI-LS paper: 8/255)"),
        HParam("pgd_step", "float", 2 / 255, "[0, 1]", "step size (Madry et al. 2018 and torchattacks: 2/255)"),
        HParam("pgd_steps", "int", 10, "[1, 1000]", "steps from a random start (torchattacks' default: 10)"),
    ), "PGD adversarial training (Madry et al. 2018), as torchattacks.PGD", ATTACK_CLASS,
        attack_options("pgd", eps="pgd_eps", step="pgd_step", steps="pgd_steps"), stage=ATTACK),
    Part("fgsm", "generator", (
        HParam("fgsm_eps", "float", EPS_8, "[0, 1]", "step eps * sign(gradient) in [0, 1] pixels (GI-LS paper: 8/255)"),
    ), "FGSM adversarial training (Goodfellow et al. 2014), as torchattacks.FGSM", ATTACK_CLASS,
        attack_options("fgsm", eps="fgsm_eps"), stage=ATTACK),
    Part("cw", "generator", (
        HParam("cw_c", "float", 1.0, "(0, inf)", "weight of the misclassification term (torchattacks' default: 1)"),
        HParam("cw_steps", "int", 50, "[1, 1000]", "Adam steps (torchattacks' default: 50)"),
        HParam("cw_lr", "float", 0.01, "(0, inf)", "Adam learning rate (torchattacks' default: 0.01)"),
    ), "Carlini-Wagner L2 attack (Carlini and Wagner 2017), as torchattacks.CW", ATTACK_CLASS,
        attack_options("cw", c="cw_c", steps="cw_steps", lr="cw_lr"), stage=ATTACK),
    Part("pgdl2", "generator", (
        HParam("pgdl2_eps", "float", 0.5, "(0, inf)", "L2 radius in [0, 1] pixels (0.5, the usual CIFAR value)"),
        HParam("pgdl2_step", "float", 0.1, "(0, inf)", "step size (eps / 5, the ratio of torchattacks' defaults)"),
        HParam("pgdl2_steps", "int", 10, "[1, 1000]", "steps from a random start (torchattacks' default: 10)"),
    ), "PGD in the L2 ball (Madry et al. 2018), as torchattacks.PGDL2", ATTACK_CLASS,
        attack_options("pgdl2", eps="pgdl2_eps", step="pgdl2_step", steps="pgdl2_steps"), stage=ATTACK),
])

WEIGHTS: Registry[WeightsFactory] = Registry("weights", [
    Part("cb", "weights", (
        HParam("cb_power", "float", 1.0, "[0, 1]", "weight frequency^-power of the example's class, mean 1 over "
               "the training set (1: inverse frequency, 0: ERM)", Range(0.0, 1.0)),
    ), "class-balanced loss weights: the inverse of the class's training frequency",
        "pipeline.methods.weights:ClassBalanced"),
    Part("groupdro", "weights", (
        HParam("groupdro_eta", "float", 0.01, "[0, inf)", "step size of the group weights: q_g *= "
               "exp(eta * group g's mean loss in the batch), then q is renormalised (DomainBed: 0.01)",
               Range(1e-3, 1e-1, log=True), soft="both"),
    ), "Group DRO over the classes (Sagawa et al. 2020, the algorithm in DomainBed)",
        "pipeline.methods.weights:GroupDro"),
    Part("l2rw", "weights", (
        HParam("l2rw_clean_per_class", "int", 10, "[1, 1000]", "examples per class taken out of the "
               "training split as the clean set (at most half a class, at least one)"),
    ), "Learning to Reweight (Ren et al. 2018, Algorithm 1): weights from a look-ahead on a clean set",
        "pipeline.methods.weights:LearningToReweight"),
], default=Part("no weights", "weights", (), "every example weighs 1", "pipeline.methods.weights:NoWeights"))

# The one way to reach every part: by name, or family by family (`PARTS.families`); `PARTS.add` registers one.
PARTS = Catalogue(LOSSES, SAMPLERS, MIXERS, GENERATORS, WEIGHTS)
FAMILIES = PARTS.families


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
            seen.setdefault(p.name, p)
    return tuple(seen.values())


ALL_PARAMS = all_params()
