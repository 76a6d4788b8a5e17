"""Long work shows how far it got: `compare` says what its campaign has left to train and about how long that takes
before it starts, and keeps the campaign's time left on its live view; a run's evaluation of a large split counts
its chunks on `evaluate`'s bars and on `compare`'s (each rendered at 80 columns, as a terminal draws them)."""
import io
import re

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cli.campaign import CampaignView, work_lines
from cli.evaluate import EvaluationView
from cli.interrupts import CtrlC
from pipeline.compare.campaign import CampaignRound, CampaignStage
from pipeline.compare.evaluate import EvaluationStarted, RunEnded, RunStarted
from pipeline.compare.workload import CampaignWork
from pipeline.search.study import RangesWidened, StudyStarted, TrialEnded, TrialStarted
from pipeline.store import TrialStatus
from pipeline.training.trainer import BatchEnd


def shown(renderable) -> list[str]:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()


def work(**changes) -> CampaignWork:
    """40 trials of 10 s and 20 first-round runs of 8 s on 2 workers, 100 more runs at most."""
    return CampaignWork(**{"name": "digits-campaign", "trials": 40, "runs": 20, "more_runs": 100, "workers": 2,
                           "trial_seconds": 400.0, "run_seconds": 160.0, "more_seconds": 800.0, "measured": 12,
                           **changes})


def test_compare_says_what_is_left_and_how_long_it_takes_before_it_starts_in_80_columns():
    lines = work_lines(work())
    assert lines == ["left to train: 40 trials, 20 re-training runs; later rounds up to 100 more runs",
                     "expected time: about 4:40 on 2 workers, from 12 stored trials and runs",
                     "at most 11:20 if every later round runs up to its max_seeds pairs"]
    assert all(len(line) <= 80 for line in lines)
    unknown = work_lines(work(trial_seconds=None, run_seconds=None, more_seconds=None, measured=0, more_runs=0))
    assert unknown == ["left to train: 40 trials, 20 re-training runs",
                       "expected time: known once the first trials end (none is stored yet)"]
    assert work_lines(work(trials=0, runs=0, more_runs=0)) == []  # nothing left: the summary says so


def test_the_live_view_keeps_the_campaigns_time_left_counting_trials_runs_widenings_and_rounds():
    view = CampaignView(CtrlC())
    view.on_event(work(trials=2, runs=2, more_runs=0, trial_seconds=20.0, run_seconds=16.0, workers=1))
    view.on_event(CampaignStage("search", "erm", "digits-campaign.erm", 1, 2))
    view.on_event(StudyStarted("digits-campaign.erm", 0, 2, False, []))
    first = shown(view)  # the stored trials' estimate (36 s) until a trial of this call ends
    assert re.fullmatch(r"campaign digits-campaign: 2 trials, 2 runs to go; 0:0\d elapsed, about 0:3\d left",
                        first[0]), first
    view.on_event(RangesWidened((), 3, "digits-campaign.erm"))  # the budget grew by one trial
    view.on_event(TrialStarted(0, 1, 3, {"lr_head": 0.05}, "digits-campaign.erm"))
    view.on_event(TrialEnded(0, TrialStatus.COMPLETED, 0.5, None, (0.5, 0, {"lr_head": 0.05})))
    view.on_event(TrialEnded(1, TrialStatus.INTERRUPTED, None, None, None))  # runs again: still to go
    assert "2 trials, 2 runs to go;" in shown(view)[0] and "left" in shown(view)[0]
    view.on_event(CampaignRound("digits-campaign", 5, ("erm", "cb"), 6, 60.0, 1))  # a later round adds its runs
    view.on_event(RunEnded("tuned", 0, 1, 2, 0.9, 8.0, study="digits-campaign.erm"))
    lines = shown(view)
    assert "2 trials, 7 runs to go;" in lines[0]
    assert all(len(line) <= 80 for line in lines)


def test_a_large_splits_evaluation_shows_its_chunks_on_evaluates_and_compares_bars_never_a_count_unknown():
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"))
    view = EvaluationView(bars, CtrlC())
    view.on_event(EvaluationStarted("quickstart", 3, 10, 6))
    assert "runs" in shown(bars)[0] and "0/4" in shown(bars)[0]  # the runs to train known from the start
    view.on_event(RunStarted("tuned", 6, 1, 4, 20, "quickstart"))
    view.on_event(BatchEnd(20, 3, 12, 20, "test"))
    lines = shown(bars)
    assert any(line.startswith("eval test") and "3/12" in line for line in lines), lines
    assert "?" not in "".join(lines)

    campaign = CampaignView(CtrlC())  # re-training in this process: the same bars under the stage's line
    campaign.on_event(CampaignStage("re-train", "erm", "digits-campaign.erm", 1, 2, seeds=5))
    campaign.on_event(EvaluationStarted("digits-campaign.erm", 3, 5, 0))
    campaign.on_event(RunStarted("tuned", 0, 1, 5, 20, "digits-campaign.erm"))
    campaign.on_event(BatchEnd(1, 2, 12, 20, "val"))
    lines = shown(campaign)
    assert lines[0] == "[1/2] re-train erm on seeds 0-4"
    assert any(line.startswith("eval val") and "2/12" in line for line in lines), lines
    assert all(len(line) <= 80 for line in lines)
