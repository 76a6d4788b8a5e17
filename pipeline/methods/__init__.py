"""A training method is a few parts joined with `+`, each from its registry (declarations.py):

  a loss       erm (cross-entropy), ls (eq. 3 label smoothing, alpha searched)
  a sampler    uniform, hws (hardness-weighted sampling)
  a mixer      mixup, cutmix, cutout (at most one)
  generators   gils, pgd, fgsm, cw, pgdl2: an extra batch trained on first; gils may be followed by
               one attack (gils+pgd: PGD applied to the GI-LS batch, the GI-LS paper's Table 7)
  weights      cb, groupdro, l2rw: per-example loss weights (at most one); they multiply the hardness
               sampler's importance weights

The parts may be written in any order (hws+gils is gils+hws). GI-LS implies the ls loss; a name
with no loss uses erm. A mixer never goes with a generator (the papers never combine them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.errors import UserError
from pipeline.methods.declarations import FAMILIES, PARTS
from pipeline.params import TRAINING_PARAMS, HParam, Value, resolve

# The torch code (the part classes) is imported by the trainer only, so reading the declarations
# here stays free of torch.

EXAMPLES = ("erm, ls, gils, hws, gils+hws, mixup, cutmix, cutout, pgd, fgsm, cw, pgdl2, gils+pgd, mixup+hws, "
            "cb, groupdro, l2rw, gils+cb, mixup+l2rw")


@dataclass(frozen=True)
class Method:
    """A parsed method name: its loss, sampler, mixer (or None), generators (in the order applied) and
    weights (or None)."""

    name: str
    loss: str
    sampler: str
    mixer: str | None
    generators: tuple[str, ...]
    weights: str | None = None

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.loss, *self.generators, *([self.mixer] if self.mixer else []), self.sampler,
                *([self.weights] if self.weights else []))

    @property
    def params(self) -> tuple[HParam, ...]:
        """Every hyper-parameter this method takes: the trainer's, then each part's."""
        return TRAINING_PARAMS + tuple(p for part in self.parts for p in PARTS[part].params)

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Value]:
        """Validated parameter values with defaults filled in."""
        values = resolve(self.params, given, self.name)
        if len(self.generators) > 1 and values["perturb"] == "feature":
            raise UserError(f"method {self.name} attacks the GI-LS batch in pixel space: it needs perturb = input")
        return values


def parse_method(name: str) -> Method:
    """`gils`, `hws+gils`, `mixup`, `gils+pgd`, ... -> Method; an unknown part or a combination that
    makes no sense is a UserError naming it."""
    parts = [part.strip() for part in name.strip().lower().split("+")]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise UserError(f"unknown method {name!r}: no part {unknown[0]!r}; parts: {', '.join(PARTS)}, "
                        "joined with +")
    if len(set(parts)) < len(parts):
        raise UserError(f"method {name!r} names a part twice")
    chosen = {family: [p for p in parts if p in registry] for family, registry in FAMILIES.items()}
    for family in ("loss", "sampler", "mixer", "weights"):
        if len(chosen[family]) > 1:
            raise UserError(f"method {name!r} combines {' and '.join(chosen[family])}: one {family} at most")
    generators = chosen["generator"]
    attacks = [g for g in generators if g != "gils"]
    if chosen["mixer"] and generators:
        raise UserError(f"method {name!r} combines the mixer {chosen['mixer'][0]} with the generator "
                        f"{generators[0]}: the papers never combine them")
    if len(attacks) > 1:
        raise UserError(f"method {name!r} combines {' and '.join(attacks)}: one attack at most (after gils)")
    if "gils" in generators and chosen["loss"] == ["erm"]:
        raise UserError(f"method {name!r}: GI-LS trains on label-smoothed targets; drop erm")
    loss = "ls" if "gils" in generators else (chosen["loss"] or ["erm"])[0]
    sampler = (chosen["sampler"] or ["uniform"])[0]
    mixer = chosen["mixer"][0] if chosen["mixer"] else None
    weights = chosen["weights"][0] if chosen["weights"] else None
    ordered = tuple(sorted(generators, key=lambda g: g != "gils"))
    shown = [*ordered, *([mixer] if mixer else []), *(["ls"] if loss == "ls" and "gils" not in ordered else []),
             *([weights] if weights else []), *(["hws"] if sampler == "hws" else [])]
    return Method("+".join(shown) or loss, loss, sampler, mixer, ordered, weights)
