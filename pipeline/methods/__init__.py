"""A training method is a few parts joined with `+`, each from its registry (declarations.py):

  a loss       erm (cross-entropy), ls (eq. 3 label smoothing, alpha searched)
  a sampler    uniform, hws (hardness-weighted sampling)
  a mixer      mixup, cutmix, cutout (at most one)
  generators   gils, pgd, fgsm, cw, pgdl2: an extra batch trained on first; gils may be followed by
               one attack (gils+pgd: PGD applied to the GI-LS batch, the GI-LS paper's Table 7)
  weights      cb, groupdro, l2rw: per-example loss weights (at most one); they multiply the hardness
               sampler's importance weights

The parts may be written in any order (hws+gils is gils+hws). How parts combine is declared on them and
read here for every part alike: a part may imply a loss (GI-LS implies ls; a name with no loss uses the
loss family's default, erm), a generator has a stage in a chain (GI-LS's ascent before one attack) and
may need a parameter value when another follows it. A mixer never goes with a generator (the papers
never combine them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.errors import UserError, did_you_mean
from pipeline.methods.declarations import FAMILIES, GENERATORS, LOSSES, PARTS, SAMPLERS
from pipeline.methods.parts import Part, Stage
from pipeline.params import TRAINING_PARAMS, HParam, Value, resolve

# The torch code (the parts' classes) is imported when a run builds its parts, so reading the
# declarations here stays free of torch.

EXAMPLES = ("erm, ls, gils, hws, gils+hws, mixup, cutmix, cutout, pgd, fgsm, cw, pgdl2, gils+pgd, mixup+hws, "
            "cb, groupdro, l2rw, gils+cb, mixup+l2rw")
SINGLE_FAMILIES = ("loss", "sampler", "mixer", "weights")  # a method names at most one part of each


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

    @property
    def declared(self) -> dict[str, HParam]:
        """`params` by name."""
        return {p.name: p for p in self.params}

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Value]:
        """Validated parameter values with defaults filled in; a generator that another follows in the
        chain gets the parameter values it declares it then needs."""
        values = resolve(self.params, given, self.name)
        for generator in (GENERATORS[name] for name in self.generators[:-1]):
            need = generator.when_followed
            if need is not None and values[need.param] != need.value:
                raise UserError(f"method {self.name} {need.why}: it needs {need.param} = {need.value}")
        return values


def parse_method(name: str) -> Method:
    """`gils`, `hws+gils`, `mixup`, `gils+pgd`, ... -> Method; an unknown part or a combination that
    makes no sense is a UserError naming it."""
    parts = [part.strip() for part in name.strip().lower().split("+")]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise UserError(f"unknown method {name!r}: no part {unknown[0]!r}{did_you_mean(unknown[0], PARTS)}; parts: "
                        f"{', '.join(PARTS)}, joined with +")
    if len(set(parts)) < len(parts):
        raise UserError(f"method {name!r} names a part twice")
    chosen = {family: [PARTS[p] for p in parts if p in registry] for family, registry in FAMILIES.items()}
    for family in SINGLE_FAMILIES:
        if len(chosen[family]) > 1:
            raise UserError(f"method {name!r} combines {' and '.join(p.name for p in chosen[family])}: "
                            f"one {family} at most")
    generators = chosen["generator"]
    if chosen["mixer"] and generators:
        raise UserError(f"method {name!r} combines the mixer {chosen['mixer'][0].name} with the generator "
                        f"{generators[0].name}: the papers never combine them")
    check_stages(name, generators)
    loss = implied_loss(name, [part for family in chosen.values() for part in family], chosen["loss"])
    sampler = chosen["sampler"][0] if chosen["sampler"] else SAMPLERS.chosen(None)
    mixer = chosen["mixer"][0].name if chosen["mixer"] else None
    weights = chosen["weights"][0].name if chosen["weights"] else None
    ordered = tuple(p.name for p in sorted(generators, key=lambda p: stage_of(p).order))
    implied = {part.implies_loss for family in chosen.values() for part in family}
    shown = [*ordered, *([mixer] if mixer else []),
             *([loss] if loss != LOSSES.chosen(None).name and loss not in implied else []),
             *([weights] if weights else []), *([sampler.name] if sampler is not SAMPLERS.chosen(None) else [])]
    return Method("+".join(shown) or loss, loss, sampler.name, mixer, ordered, weights)


def check_stages(name: str, generators: list[Part]) -> None:
    """A UserError when two generators of `name` take one stage of the chain (two attacks)."""
    for stage in sorted({stage_of(part) for part in generators}, key=lambda stage: stage.order):
        members = [part.name for part in generators if part.stage == stage]
        if len(members) > 1:
            earlier = [part.name for part in GENERATORS.values() if stage_of(part).order < stage.order]
            after = f" (after {' or '.join(earlier)})" if earlier else ""
            raise UserError(f"method {name!r} combines {' and '.join(members)}: one {stage.name} at most{after}")


def stage_of(generator: Part) -> Stage:
    """A generator's stage in a chain: every generator declares one (the registry refuses one without)."""
    assert generator.stage is not None, f"generator {generator.name} declares no stage"
    return generator.stage


def implied_loss(name: str, chosen: list[Part], losses: list[Part]) -> str:
    """The loss part of method `name`: the one it names, else the one a part implies, else the default;
    a UserError when it names a loss other than one a part implies."""
    implying = [part for part in chosen if part.implies_loss is not None]
    for part in implying:
        if losses and losses[0].name != part.implies_loss:
            raise UserError(f"method {name!r}: {part.implies_why}; drop {losses[0].name}")
    if losses:
        return losses[0].name
    return next((part.implies_loss for part in implying if part.implies_loss is not None), LOSSES.chosen(None).name)
