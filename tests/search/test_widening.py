"""Ranges that widen where a study's best trial sits on a soft end (pipeline/search/bounds.py): the rule, the
registry's soft and hard ends, and the round trip through `run`, a kill in the middle of a widening, `report`."""
import json
import signal

import pytest

from pipeline.methods.declarations import ALL_PARAMS
from pipeline.params import Interval, Range
from pipeline.search.study import run_study
from pipeline.search.bounds import WIDEN_FACTOR, searched_ranges, widened, widening_lines, widenings
from pipeline.spec.study_config import load_study, parse_study
from pipeline.store import Store, best_trial
from helpers import ax_trials, rows, start_run

BY_NAME = {p.name: p for p in ALL_PARAMS}

LOW_LR = """
name = "low-lr"
objective = "val_accuracy"
[data]
name = "digits"
[method]
name = "erm"
[params]
epochs = 1
lr_head = {{ low = 0.001, high = 0.004, log = true }}
lr_backbone = {{ low = 0.001, high = 0.004, log = true }}
momentum = 0.0
[budget]
trials = 5
initial = 2
widen_trials = {extra}
"""


def test_a_soft_end_moves_out_by_the_factor_on_a_log_scale_and_by_the_width_on_a_linear_one():
    assert widened(Range(0.01, 0.2, log=True), "upper", Interval.parse("(0, inf)")) == Range(0.01, 0.8, log=True)
    assert widened(Range(0.01, 0.2, log=True), "lower", Interval.parse("(0, inf)")) == Range(
        0.01 / WIDEN_FACTOR, 0.2, log=True)
    assert widened(Range(1.5, 3.0), "upper", Interval.parse("(0, inf)")) == Range(1.5, 4.5)
    assert widened(Range(1, 15), "upper", Interval.parse("[0, 100]"), integer=True) == Range(1, 29)


def test_an_end_never_passes_its_limit_and_stays_inside_an_open_one():
    assert widened(Range(0.0, 0.5), "upper", Interval.parse("[0, 0.9]")) == Range(0.0, 0.9)
    assert widened(Range(0.0, 0.9), "upper", Interval.parse("[0, 0.9]")) is None  # at the limit: no move
    assert widened(Range(0.1, 2.0), "lower", Interval.parse("(0, inf)")) == Range(0.05, 2.0)  # halfway to 0
    assert widened(Range(2, 15), "lower", Interval.parse("(1, 100]"), integer=True) is None  # 1 itself is invalid
    assert widened(Range(0.5, 0.95), "upper", Interval.parse("[0, 1)")).high < 1


def test_the_registry_declares_learning_rates_soft_and_the_hard_ends_of_alpha_epochs_and_probabilities():
    assert BY_NAME["lr_head"].soft_sides() == BY_NAME["lr_backbone"].soft_sides() == ("lower", "upper")
    assert BY_NAME["beta"].soft_sides() == ("lower", "upper")  # the paper's [0.1, 1000] is a convention
    assert BY_NAME["alpha"].soft_sides() == ("upper",)  # alpha >= 0 is a limit
    assert BY_NAME["epochs"].soft_sides() == BY_NAME["cb_power"].soft_sides() == ()  # cost; a probability in [0, 1]
    for p in ALL_PARAMS:  # every default range lies inside what widening may reach
        if isinstance(p.search, Range):
            assert p.search.low in p.widen_limit and p.search.high in p.widen_limit, p.name


def test_only_soft_ends_the_best_sits_on_widen_and_a_fixed_range_never_does():
    search = {"alpha": Range(0.0, 0.5), "lr_head": Range(0.01, 0.2, log=True),
              "beta": Range(0.1, 1000.0, log=True, widen=False)}
    best = {"alpha": 0.0, "lr_head": 0.2, "beta": 1000.0}  # alpha on its hard end, beta fixed by the file
    (moved,) = widenings(search, BY_NAME, best, best_trial=4, ran=6)
    assert (moved.parameter, moved.side, moved.after, moved.after_trial, moved.best_trial) == (
        "lr_head", "upper", Range(0.01, 0.8, log=True), 6, 4)
    assert searched_ranges(search, [moved])["lr_head"] == Range(0.01, 0.8, log=True)
    assert widenings(search, BY_NAME, {"alpha": 0.25, "lr_head": 0.05, "beta": 10.0}, 1, 2) == []
    assert widening_lines([moved]) == ["lr_head widened from [0.01, 0.2] to [0.01, 0.8] after 6 trials: the best "
                                       "trial sat on its upper bound"]


def test_a_new_study_widens_one_stored_before_does_not_and_the_file_can_say_either():
    raw = {"name": "s", "method": {"name": "ls"}}
    new = parse_study(raw, "s.toml")
    assert new.widen and not new.widen_given
    assert new.settle_widen(False).widen is False  # stored before widening existed: its ranges stay
    assert new.settle_widen(None).widen is True  # not stored: a new study
    said = parse_study({**raw, "search": {"widen": True}}, "s.toml")
    assert said.settle_widen(False).widen is True  # the file's word wins; a different study, refused as such
    assert type(new).from_dict({k: v for k, v in new.to_dict().items() if k != "widen"}).widen is False
    fixed = parse_study({**raw, "params": {"alpha": {"low": 0.0, "high": 0.3, "widen": False}}}, "s.toml")
    assert fixed.search["alpha"] == Range(0.0, 0.3, widen=False)
    assert type(new).from_dict(fixed.to_dict()).search["alpha"].widen is False
    assert "widen" not in json.dumps(new.to_dict()["search"])  # a widening range is stored as before


@pytest.mark.parametrize("raw, said", [
    ({"search": {"widen": "yes"}}, "search.widen"),
    ({"params": {"alpha": {"low": 0.0, "high": 0.3, "widen": 1}}}, "widen must be true or false"),
    ({"budget": {"widen_trials": -1}}, "budget.widen_trials: must be between 0"),
])
def test_a_bad_widen_setting_is_one_clear_error(raw, said):
    from pipeline.errors import UserError

    with pytest.raises(UserError, match=said.replace(".", r"\.")):
        parse_study({"name": "s", "method": {"name": "ls"}, **raw}, "s.toml")


@pytest.fixture(scope="module")
def low_lr(tmp_path_factory):
    """The learning rates declared in [0.001, 0.004], far below the digits' best, run to the end."""
    folder = tmp_path_factory.mktemp("low")
    path, db = folder / "low-lr.toml", folder / "runs.db"
    path.write_text(LOW_LR.format(extra=1))
    process = start_run(path, db)
    out, err = process.communicate()
    assert process.returncode == 0, err
    return path, db, out + err


def test_a_study_declared_far_below_the_optimum_widens_and_its_best_beats_every_trial_inside(low_lr, cli):
    path, db, said = low_lr
    store = Store(str(db))
    study = store.require_study("low-lr")
    trials = store.trials(study.id)
    best = best_trial(study, trials)
    inside = [t for t in trials if all(0.001 <= t.parameters[p] <= 0.004 for p in ("lr_head", "lr_backbone"))]
    assert max(max(t.parameters.values()) for t in trials) > 0.0045  # trained past the declared range
    assert best.metrics["val_accuracy"] > max(t.metrics["val_accuracy"] for t in inside)
    moved = store.widenings(study.id)
    assert moved and len(trials) == 5 + 1  # the budget and its allowance, every trial once
    assert "lr_head widened from [0.001, 0.004]" in said or "lr_backbone widened from [0.001, 0.004]" in said
    ax = ax_trials(load_study(path), db)  # Ax searches the range the table says
    assert {i for i, (status, _) in ax.items() if status == "completed"} == {t.trial_index for t in trials}
    before = db.read_bytes()
    code, out, _ = cli("report", "--db", str(db))
    assert code == 0 and "widened from [0.001, 0.004] to" in " ".join(out.split())
    code, out, _ = cli("report", "--db", str(db), "--format", "json")
    (row,) = json.loads(out)[0]["rows"]
    assert row["widenings"][0]["before"] == [0.001, 0.004] and row["widenings"][0]["after_trial"] >= 3
    code, out, _ = cli("studies", "--db", str(db))
    assert "6 of 6" in out
    code, out, _ = cli("best", "low-lr", "--db", str(db))
    assert code == 0 and db.read_bytes() == before  # reading changes nothing


def test_a_study_killed_inside_a_widening_resumes_to_the_same_ranges_and_trials(low_lr, tmp_path):
    """SIGKILL inside the transaction that widens Ax's space and stores why: nothing of it is kept, and the
    resume widens as the run that was never killed did, with the same trials and budget."""
    path, db_whole, _ = low_lr
    db = tmp_path / "runs.db"
    process = start_run(path, db, env={"ROBUST_TUNE_KILL_AT": "in-widening"})
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert rows(db, "select count(*) from rt_widenings") == [(0,)]
    run_study(load_study(path), str(db), "cpu", log_file=tmp_path / "ax.log")  # the resume, in this process
    query = ("select parameter, side, low_before, high_before, low_after, high_after, after_trial, best_trial "
             "from rt_widenings order by id")
    assert rows(db, query) == rows(db_whole, query)
    trials = "select trial_index, status, parameters from rt_trials order by trial_index"
    assert rows(db, trials) == rows(db_whole, trials)
