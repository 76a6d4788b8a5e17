"""What a campaign has left to train when `compare` starts, and about how long that takes: its first round's
trials still to run (every search of the first look) and re-training runs (the later rounds, planned for power,
may add searches up to `max_replicates` and pairs up to `max_seeds`), each costed from the stored trials and runs of
its study, else of its method in the campaign's other studies (other tasks, other search replicates), else of any of
its trials (a run costs what a trial does); unknown (None) before the campaign's first trial has ended."""
from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

from pipeline.spec.campaign_config import CampaignConfig
from pipeline.store import Store, trial_budget, trials_ran


@dataclass(frozen=True)
class CampaignWork:
    """A campaign's work left: `trials` to run and `runs` in the first rounds, and at most `more_runs` runs (and
    `more_trials` trials of later rounds' searches) in the rounds after, on `workers` places at once; the seconds of
    each part summed over its units (None: no trial to go by)."""

    name: str
    trials: int
    runs: int
    more_runs: int
    workers: int
    trial_seconds: float | None
    run_seconds: float | None
    more_seconds: float | None
    measured: int = 0  # the stored trials and runs the seconds come from
    more_trials: int = 0

    def seconds(self) -> float | None:
        """About how long the trials and first rounds take on the workers, in wall seconds; None when unknown."""
        if self.trial_seconds is None or self.run_seconds is None:
            return None
        return (self.trial_seconds + self.run_seconds) / max(1, self.workers)

    def most_seconds(self) -> float | None:
        """As `seconds`, with every later round run up to `max_seeds` pairs."""
        if (first := self.seconds()) is None or self.more_seconds is None:
            return None
        return first + self.more_seconds / max(1, self.workers)

    def unit_seconds(self) -> tuple[float, float] | None:
        """The estimated seconds of one trial and of one run (averaged over what is left), for weighing them."""
        if self.trial_seconds is None or self.run_seconds is None:
            return None
        trial = self.trial_seconds / self.trials if self.trials else None
        run = self.run_seconds / self.runs if self.runs else None
        trial = trial if trial is not None else run
        run = run if run is not None else trial
        return (trial or 1.0, run or 1.0)


def campaign_work(store: Store, campaign: CampaignConfig, workers: int = 1) -> CampaignWork:
    """The work `campaign` (settled, stored) has left, read from `store` (read only), on `workers` places."""
    first = max(1, campaign.replicates)
    studies = [(method, config.study(method, r)) for _, config in campaign.task_campaigns()
               for r in range(first) for method in config.methods]
    later = [(method, config.study(method, r)) for _, config in campaign.task_campaigns()
             for r in range(first, campaign.most_searches) for method in config.methods]
    trial_times: dict[str, list[float]] = {}  # study -> its stored trials' seconds
    run_times: dict[str, list[float]] = {}  # study -> its stored re-training runs' seconds
    left: dict[str, tuple[int, int, int]] = {}  # study -> trials, first-round runs, later runs
    seeds = campaign.evaluation.seeds
    most = campaign.evaluation.max_seeds or seeds
    for method, study in studies:
        ran, runs, widened = 0, 0, False
        if (record := store.study(study.name)) is not None:
            stored = store.trials(record.id)
            trial_times[study.name] = [(t.train_seconds or 0.0) + (t.proposal_seconds or 0.0) for t in stored
                                       if t.ran and t.train_seconds]  # its training and its proposal
            tuned = [e for e in store.evaluations(record.id) if e.variant == "tuned"]
            run_times[study.name] = [e.train_seconds for e in tuned if e.train_seconds]
            ran, runs, widened = trials_ran(stored), len(tuned), bool(store.widenings(record.id))
        left[study.name] = (max(0, trial_budget(study, widened) - ran), max(0, seeds - runs),
                            max(0, most - max(seeds, runs)))
    every = [s for times in trial_times.values() for s in times]
    trials_by_method: dict[str, list[float]] = {}
    runs_by_method: dict[str, list[float]] = {}
    for method, study in studies:
        trials_by_method.setdefault(method, []).extend(trial_times.get(study.name, []))
        runs_by_method.setdefault(method, []).extend(run_times.get(study.name, []))

    def first_mean(*choices: list[float] | None) -> float | None:
        return next((mean(times) for times in choices if times), None)

    # each study with work left: its trials, runs and later runs, and the seconds of a trial and a run
    costs: list[tuple[int, int, int, float | None, float | None]] = []
    for method, study in studies:
        if any(counts := left[study.name]):
            trial = first_mean(trial_times.get(study.name), trials_by_method.get(method), every)
            run = first_mean(run_times.get(study.name), runs_by_method.get(method)) or trial
            costs.append((*counts, trial, run))
    trials, runs, more = (sum(cost[0] for cost in costs), sum(cost[1] for cost in costs),
                          sum(cost[2] for cost in costs))
    known = all(trial is not None and run is not None for *_, trial, run in costs)
    trial_seconds = sum(n * (trial or 0.0) for n, _, _, trial, _ in costs) if known else None
    run_seconds = sum(n * (run or 0.0) for _, n, _, _, run in costs) if known else None
    more_seconds = sum(n * (run or 0.0) for _, _, n, _, run in costs) if known else None
    more_trials = 0
    for method, study in later:  # later rounds' searches, none stored yet: each its trials and its most pairs
        if store.study(study.name) is None:
            more_trials += trial_budget(study, False)
            more += most
            trial = first_mean(trials_by_method.get(method), every)
            run = first_mean(runs_by_method.get(method)) or trial
            if more_seconds is not None and trial is not None and run is not None:
                more_seconds += trial_budget(study, False) * trial + most * run
    measured = len(every) + sum(len(times) for times in run_times.values())
    return CampaignWork(campaign.name, trials, runs, more, max(1, workers), trial_seconds, run_seconds, more_seconds,
                        measured, more_trials)
