"""What a method part is, and the registries that hold the parts: torch-free.

A part's declaration names its implementation as "module:attribute", imported on first use, so that
listing the methods, --help and the study-file checks read the declarations without loading torch.
How a part combines with others is declared on it (the loss it implies, its stage in a chain of
generators, what it needs when a generator follows it) and read generically by `parse_method`.
There is one registry per family; `Catalogue.add` is the one way to register a part.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, Callable, Generic, TypeVar, cast

from pipeline.params import TRAINING_PARAMS, HParam, Value


@dataclass(frozen=True)
class Stage:
    """A place in a chain of generators: a chain applies its generators in stage order, at most one per stage."""

    name: str  # what a generator of this stage is, as refusals say it: "one attack at most"
    order: int


@dataclass(frozen=True)
class Requirement:
    """A parameter value a part needs in some combination, and why (the refusal gives both)."""

    param: str
    value: Value
    why: str


@dataclass(frozen=True)
class Part:
    """One declared part: its family, hyper-parameters, source and implementation, and how it combines."""

    name: str
    family: str  # "loss" | "sampler" | "mixer" | "generator" | "weights"
    params: tuple[HParam, ...]
    source: str
    implementation: str  # "module:attribute", the constructor of the part, imported on first use
    # Keyword arguments the declaration gives the constructor (one Attack class serves four attacks).
    options: Mapping[str, Any] = field(default_factory=dict, compare=False)
    implies_loss: str | None = None  # the loss part it trains with; a method naming another loss is refused
    implies_why: str = ""  # why, in that refusal
    stage: Stage | None = None  # a generator's place in a chain
    when_followed: Requirement | None = None  # what a generator needs for another to follow it in a chain
    # Whether the part behaves differently with a run's total epoch count (a schedule over the whole run, a
    # deferred re-weighting at a share of it): a run through such a part holds no exact shorter runs, and a
    # study searching epochs with it is refused epoch prefixes (pipeline/spec/epochs.py). No part does so today.
    uses_total_epochs: bool = False
    # Where the part is ERM at a value of its own parameter ("alpha = 0"): tuned honestly, a method of such parts
    # cannot be truly worse than ERM, so the verdict reads its falling behind as a search that chose badly.
    contains_erm_at: str | None = None

    def load(self) -> Callable[..., Any]:
        """The part's constructor, imported now (once per process), with the declaration's options bound."""
        constructor = load_attribute(self.implementation)
        return partial(constructor, **self.options) if self.options else constructor


@cache
def load_attribute(path: str) -> Any:
    """The attribute that a "package.module:attribute" path names, importing its module."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


Constructor = TypeVar("Constructor")


class Registry(Mapping[str, Part], Generic[Constructor]):
    """The parts of one family that a method may name, by name in declaration order, and the family's
    default: the part a method that names none of this family uses (None for generators: no chain)."""

    def __init__(self, family: str, parts: Iterable[Part], default: Part | None = None) -> None:
        self.family, self.default = family, default
        self.declared = tuple(parts)  # as written, for the catalogue to check (a name twice included)
        self._parts: dict[str, Part] = {part.name: part for part in self.declared}

    def __getitem__(self, name: str) -> Part:
        return self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def chosen(self, name: str | None) -> Part:
        """The part a method uses: the one it names, else the family's default."""
        if name is not None:
            return self._parts[name]
        if self.default is None:
            raise KeyError(f"the {self.family} family has no default part")
        return self.default

    def load(self, name: str | None) -> Constructor:
        """The constructor of the part a method uses (see `chosen`)."""
        return cast(Constructor, self.chosen(name).load())


class Catalogue(Mapping[str, Part]):
    """Every family's registry; as a mapping, every part a method may name, family by family.

    It keeps two rules: a part name is taken once over all families (a method joins names from any
    family), and a parameter name means one thing: it is declared once, or shared as the very same
    declaration by parts never combined (mix_alpha); the trainer's parameter names are taken too.
    """

    def __init__(self, *registries: Registry[Any]) -> None:
        self.families: dict[str, Registry[Any]] = {registry.family: registry for registry in registries}
        broken = self._broken_rule([part for registry in registries for part in registry.declared])
        if broken:
            raise ValueError(broken)

    def __getitem__(self, name: str) -> Part:
        for registry in self.families.values():
            if name in registry:
                return registry[name]
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (name for registry in self.families.values() for name in registry)

    def __len__(self) -> int:
        return sum(len(registry) for registry in self.families.values())

    def add(self, part: Part) -> Part:
        """Register `part` in its family's registry, so that methods may name it; a ValueError, naming
        the rule, if it breaks one."""
        broken = self._broken_rule([*self.values(), part])
        if broken:
            raise ValueError(broken)
        self.families[part.family]._parts[part.name] = part
        return part

    def remove(self, name: str) -> None:
        """Take the part `name` out of its registry: what `add` did, undone."""
        del self.families[self[name].family]._parts[name]

    def _broken_rule(self, parts: list[Part]) -> str | None:
        """What is wrong with `parts` as the parts methods may name (with the families' defaults), or None."""
        misplaced = [(registry.family, part) for registry in self.families.values()
                     for part in [*registry.declared, *([registry.default] if registry.default else [])]
                     if part.family != registry.family]
        if misplaced:
            return (f"part {misplaced[0][1].name} of family {misplaced[0][1].family} is in the {misplaced[0][0]} "
                    "registry")
        names: set[str] = set()
        for part in parts:
            if part.family not in self.families:
                return f"part {part.name}: unknown family {part.family!r}; families: {', '.join(self.families)}"
            if part.name in names:
                return f"part {part.name} is declared twice"
            if not part.name or "+" in part.name or part.name != part.name.strip().lower():
                return f"part name {part.name!r} must be lower case, without + or spaces around it"
            names.add(part.name)
        known = {p.name: p for p in TRAINING_PARAMS}
        defaults = [registry.default for registry in self.families.values() if registry.default is not None]
        for part in [*parts, *defaults]:
            if part.implies_loss is not None and part.implies_loss not in self.families["loss"]:
                return f"part {part.name} implies the unknown loss {part.implies_loss!r}"
            if (part.stage is not None) != (part.family == "generator"):
                return f"part {part.name}: a generator, and only a generator, has a stage in a chain"
            for p in part.params:
                if known.setdefault(p.name, p) is not p:
                    return f"parameter {p.name} is declared twice with different meanings"
        return None
