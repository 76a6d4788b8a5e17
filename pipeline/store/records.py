"""Typed records of what the store holds, and the rules read from them (which trial is best).

Every reader (report, plots, evaluate, the CLI) gets these, never rows or JSON: a stored study carries
its StudyConfig, a trial or an evaluation the RunSettings it trained with. Records stored by an
earlier version read the same way; what they lack gets the value that reproduces what they did.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

from pipeline.config import DataConfig, TrainConfig
from pipeline.params import Value
from pipeline.study_config import StudyConfig, data_config_from_dict


@dataclass(frozen=True)
class RunSettings:
    """The settings one run trained with, as the trainer resolved them (trainer.train's `settings`)."""

    data: DataConfig
    backbone: str
    weights: str
    method: str  # the method's canonical name
    params: dict[str, Value]  # every parameter, defaults filled in
    seed: int
    device: str  # where it ran: cpu, cuda, ...
    precision: str  # fp32 | bf16, resolved
    threads: int | None = None  # torch's CPU threads; None for runs stored before it was recorded

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunSettings:
        """Stored settings as this version reads them; a run stored before a field existed gets the value
        that reproduces what it did (fp32 before precision could be chosen, no thread count)."""
        default = TrainConfig()
        return cls(data=data_config_from_dict(raw.get("data") or {}), backbone=raw.get("backbone", default.backbone),
                   weights=raw.get("weights", default.weights), method=raw.get("method", default.method),
                   params=dict(raw.get("params") or {}), seed=raw.get("seed", default.seed),
                   device=raw.get("device", "cpu"), precision=raw.get("precision", "fp32"),
                   threads=raw.get("threads"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StudyRecord:
    """A stored study: its row and the study it is."""

    id: int
    name: str
    fingerprint: str
    study: StudyConfig
    created_at: dt.datetime


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a study as stored: proposed, then completed, failed or interrupted."""

    id: int
    trial_index: int  # Ax's index of the trial
    status: str  # running | completed | failed | interrupted
    parameters: dict[str, Value]  # the proposed values
    seed: int
    metrics: dict[str, float] | None
    per_class: dict[str, dict[str, float]] | None  # {"val": {class: accuracy}, "test": {...}}
    train_seconds: float | None
    proposal_seconds: float | None
    error: str | None
    epoch_train_loss: list[float]
    epoch_val_accuracy: list[float]
    settings: RunSettings | None = None  # what it trained with; None until it completed


@dataclass(frozen=True)
class EvaluationRecord:
    """One run of `robust-tune evaluate`: a variant of a study's best trial, on one seed."""

    variant: str
    seed: int
    trial_index: int
    config: dict[str, Any]  # the run's identity as planned: TrainConfig.to_dict() less seed, device, precision
    metrics: dict[str, float]
    per_class: dict[str, dict[str, float]]
    train_class_counts: dict[str, int]
    settings: RunSettings
    train_seconds: float


def best_trial(study: StudyRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial with the highest objective (the earliest on ties): the rule of every report,
    of evaluate and of the study loop's "best so far"."""
    objective = study.study.objective
    completed = [t for t in trials if t.status == "completed" and t.metrics and objective in t.metrics]
    return max(completed, key=lambda t: (t.metrics[objective], -t.trial_index), default=None)
