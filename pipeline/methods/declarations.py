"""Each update's and sampler's hyper-parameters, torch-free so `robust-tune methods` and the
study-file checks read them without loading the training code (updates.py, samplers.py)."""
from __future__ import annotations

from pipeline.params import Choice, HParam, Range

ALPHA = HParam("alpha", "float", 0.1, "[0, 1)", "label smoothing (eq. 3): true class 1 - alpha, others alpha / (k - 1)",
               Range(0.0, 0.5))

UPDATE_PARAMS: dict[str, tuple[HParam, ...]] = {
    "erm": (),
    "ls": (ALPHA,),
    "gils": (
        ALPHA,
        HParam("T", "int", 5, "[0, 100]", "gradient-ascent steps per perturbed example (the paper searches "
               "1-15; each costs a forward and backward pass)", Range(1, 15)),
        HParam("eta", "float", 2.0, "(0, inf)", "gradient-ascent step size", Range(1.5, 3.0)),
        HParam("gamma", "float", 1e-3, "[0, inf)", "transport-cost penalty of the Wasserstein DRO (paper: 1e-3)"),
        HParam("perturb", "choice", "input", ("input", "feature"),
               "ascend on the image (Algorithm 1 as written) or on the feature map z (nearly free)"),
    ),
}

SAMPLER_PARAMS: dict[str, tuple[HParam, ...]] = {
    "uniform": (),
    "hws": (
        HParam("beta", "float", 10.0, "(0, inf)", "robustness: batches are drawn from softmax(beta * stale losses)",
               Range(0.1, 1000.0, log=True)),
        HParam("importance_sampling", "bool", False, "", "weight losses by exp(beta * (loss - stale loss)), "
               "clipped to [0.1, 10]", Choice((False, True))),
    ),
}
