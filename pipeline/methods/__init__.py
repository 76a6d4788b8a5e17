"""The registry of training methods: an update (how to step) composed with a sampler (which examples).

A method name is an update, a sampler, or `update+sampler`:
  erm, ls, gils           uniform sampling with that update
  hws                     ERM with hardness-weighted sampling
  ls+hws, gils+hws        those updates with hardness-weighted sampling
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.errors import UserError
from pipeline.methods.declarations import SAMPLER_PARAMS, UPDATE_PARAMS
from pipeline.params import TRAINING_PARAMS, HParam, Value, resolve

# The torch code (updates.UPDATES, samplers.SAMPLERS) is imported by the trainer only, so reading
# the declarations here stays free of torch.

# Where each method comes from, for --help and the README.
SOURCES = {
    "erm": "plain cross-entropy training (the benchmark every table compares against)",
    "ls": "label smoothing as in eq. 3 of the GI-LS paper",
    "gils": "GI-LS: label smoothing inside Wasserstein DRO (Algorithm 1 of the GI-LS paper)",
    "hws": "DRO with hardness-weighted sampling (Algorithm 1 of the hardness-weighted sampling paper)",
}


@dataclass(frozen=True)
class Method:
    """A parsed method name: which update and which sampler."""

    name: str
    update: str
    sampler: str

    @property
    def params(self) -> tuple[HParam, ...]:
        """Every hyper-parameter this method takes: the trainer's, the update's and the sampler's."""
        return TRAINING_PARAMS + UPDATE_PARAMS[self.update] + SAMPLER_PARAMS[self.sampler]

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Value]:
        """Validated parameter values with defaults filled in."""
        return resolve(self.params, given, self.name)


def parse_method(name: str) -> Method:
    """`gils`, `hws`, `gils+hws`, ... -> Method; an unknown name is a UserError."""
    parts = name.strip().lower().split("+")
    known = ", ".join([*SOURCES, "ls+hws", "gils+hws"])
    if len(parts) == 1 and parts[0] in UPDATE_PARAMS:
        return Method(parts[0], parts[0], "uniform")
    if len(parts) == 1 and parts[0] == "hws":
        return Method("hws", "erm", "hws")
    if len(parts) == 2 and parts[0] in UPDATE_PARAMS and parts[1] == "hws":
        return Method(name.strip().lower(), parts[0], "hws")
    raise UserError(f"unknown method {name!r}; known: {known}")
