"""`compare` and `report --verdict`: a real campaign of three methods on the digits (real Ax, real PyTorch,
real SQLite, real processes), killed and resumed; the verdict's assembly from given runs (the decisions themselves
are tested in test_decision.py)."""
import functools
import json
import re
import os
import random
import shutil
from pathlib import Path

import pytest

from cli.main import main
from conftest import texts_off_canvas
from pipeline.spec.campaign_config import load_campaign, parse_campaign
from pipeline.compare.decision import Design, Outcome
from pipeline.store import Store
from pipeline.compare.verdict import METRICS
import helpers
from helpers import DATA, in_process, rows


CAMPAIGN = """
name = "trio"
objective = "val_balanced_accuracy"
methods = ["ls", "cb"]        # erm joins by itself
replicates = 1                # one search each (the default design's rounds of searches are tested apart)

[data]
name = "digits"
imbalance_class = "3"
imbalance_keep = 0.1
imbalance_in = "train"

[params]
epochs = 1
lr_head = {{ low = 0.01, high = 0.2, log = true }}

[method_params.cb]
cb_power = {{ low = 0.2, high = 1.0 }}

[budget]
trials = 2
initial = 2

[evaluate]
seeds = 3
max_seeds = 3
{more}
"""


def campaign_file(folder: Path, more: str = "", text: str = CAMPAIGN) -> Path:
    path = folder / "trio.toml"
    path.write_text(text.format(more=more))
    return path


robust_tune = functools.partial(helpers.robust_tune, columns=100, threads=1)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """A database holding the finished three-method campaign (tests copy it before changing it), run in this
    process: the test process has torch and Ax loaded already."""
    folder = tmp_path_factory.mktemp("campaign")
    with pytest.raises(SystemExit) as done:
        main(["compare", str(campaign_file(folder)), "--db", str(folder / "c.db"), "--device", "cpu",
              "--log-file", str(folder / "ax.log")])
    assert done.value.code == 0
    return folder / "c.db"


def test_each_method_is_an_ordinary_study_with_the_same_budget_and_erm_searches_the_shared_parameters(campaign):
    store = Store(str(campaign), create=False)
    studies = {s.name: s for s in store.all_studies()}
    assert sorted(studies) == ["trio.cb", "trio.erm", "trio.ls"]
    assert {s.study.budget.trials for s in studies.values()} == {2}
    assert set(studies["trio.erm"].study.search) == {"lr_head"}  # ERM tuned too, over the shared range
    assert set(studies["trio.cb"].study.search) == {"lr_head", "cb_power"}
    assert studies["trio.cb"].study.search["cb_power"].low == 0.2  # its own range from [method_params.cb]
    assert set(studies["trio.ls"].study.search) == {"lr_head", "alpha"}  # the papers' range by default
    splits: dict[int, set] = {}
    for study in studies.values():
        assert study.study.data.split_seed == 0  # every search on the campaign's split
        trials = store.trials(study.id)
        assert [t.status for t in trials] == ["completed", "completed"]
        runs = store.evaluations(study.id)
        assert sorted(r.seed for r in runs) == [0, 1, 2] and {r.variant for r in runs} == {"tuned"}
        for r in runs:
            splits.setdefault(r.seed, set()).add(r.settings.data)
    # resplit (a new campaign's default): pair k on split seed 0 + k, the same split for every method's run k
    assert {seed: [d.split_seed for d in data] for seed, data in splits.items()} == {0: [0], 1: [1], 2: [2]}


def test_a_second_compare_trains_nothing_and_report_verdict_changes_no_byte(campaign, tmp_path, cli):
    db = tmp_path / "c.db"
    shutil.copy(campaign, db)
    before = db.read_bytes()
    code, out, err = cli("compare", str(campaign_file(tmp_path)), "--db", str(db), "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    assert "0 trial(s) and 0 re-training run(s) now" in err and "nothing was missing" in err
    assert "confirmation runs: seed k on split seed 0 + k" in err  # it says the split varies
    assert "Verdict of campaign trio" in out and "Reading:" in out
    assert rows(db, "select count(*) from rt_trials") == [(6,)]
    assert rows(db, "select count(*) from rt_evaluations") == [(9,)]

    shutil.copy(campaign, db)
    for fmt in ("table", "markdown", "csv", "latex", "json"):
        shown = in_process(cli, "report", "--verdict", "trio", "--db", str(db), "--format", fmt)
        assert shown.returncode == 0, shown.stderr
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db", "trio.toml"]  # Ax not even loaded


def test_compare_set_overrides_a_campaign_field_as_run_does_and_refuses_a_bad_one_in_one_line(campaign, tmp_path, cli):
    db = tmp_path / "c.db"
    shutil.copy(campaign, db)
    code, out, err = cli("compare", str(campaign_file(tmp_path)), "--db", str(db), "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"), "--set", "evaluate.seeds=4",
                         "--set", "evaluate.max_seeds=4")
    assert code == 0, err
    assert "0 trial(s) and 3 re-training run(s) now" in err  # seed 3 for each of the three methods, no search
    assert rows(db, "select count(*) from rt_evaluations") == [(12,)]
    for bad, named in [("evaluate.seed=4", "evaluate.seed"), ("evaluate.seeds=one", "evaluate.seeds"),
                       ("budget", "malformed --set")]:
        code, out, err = cli("compare", str(campaign_file(tmp_path)), "--db", str(db), "--set", bad)
        assert code == 2 and named in err and len(err.strip().splitlines()) == 1, (bad, err)
    assert rows(db, "select count(*) from rt_evaluations") == [(12,)]


def test_report_verdict_json_gives_means_differences_intervals_and_one_of_four_words(campaign, cli):
    shown = in_process(cli, "report", "--verdict", "trio", "--db", str(campaign), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    tables = {t["title"].split(":")[0]: t for t in json.loads(shown.stdout)}
    verdict = tables["Verdict of campaign trio"]
    by_method = {r["method"]: r for r in verdict["rows"]}
    assert list(by_method) == ["erm", "ls", "cb"] and by_method["erm"]["vs_erm"] == {}
    primary = ("test_balanced_accuracy", "smallest_class_accuracy")  # the objective's counterpart and digit 3
    warnings = by_method["erm"]["warnings"]  # the campaign's own, on the reference's row
    # one epoch on digit 3 kept at 10%: no run gets a 3 right, so the rare class is all zeros and left out
    assert {"kind": "class_never_right", "class_name": "3"}.items() <= warnings[-1].items()
    assert any(w["kind"] == "constant_metric" for w in warnings)
    assert any("Check before trusting it: " in note and "class '3' is never right" in note for note in verdict["notes"])
    family = 2 * len([m for m in primary if not any(w["kind"] == "constant_metric" and m == "smallest_class_accuracy"
                                                     for w in warnings)])
    for method in ("ls", "cb"):
        record = by_method[method]
        assert record["seeds"] == 3 and set(record["means"]) == set(METRICS)
        for metric, c in record["vs_erm"].items():
            if c["primary"]:  # a decision: one of the four words, its interval over the family of primary cells
                assert metric in primary and c["verdict"] in ("better", "worse", "equivalent", "undecided")
                assert c["family"] == family and c["smallest_effect"] == (0.01 if metric == primary[0] else 0.05)
                assert c["confidence"] == pytest.approx(1 - 0.05 / family) and c["level"] == pytest.approx(0.05)
            else:  # secondary: a 95% interval, no word
                assert not c["primary"] and c["verdict"] is None and c["confidence"] == 0.95
            if c["low"] is not None:
                assert c["low"] <= c["difference"] <= c["high"]
            mean = record["means"][metric]["mean"] - by_method["erm"]["means"][metric]["mean"]
            assert c["difference"] == pytest.approx(mean)  # paired on the same seeds: the difference of means
    assert any(note.startswith("Reading: ") for note in verdict["notes"])
    assert any(f"simultaneous over the {family} primary cells" in note for note in verdict["notes"])
    assert any("the training seed and the whole split: pair k trains on seed k and split seed base + k" in note
               for note in verdict["notes"])  # what the intervals contain
    cost = {r["method"]: r for r in tables["Campaign trio"]["rows"]}
    assert {r["trials"] for r in cost.values()} == {2} and {r["budget"] for r in cost.values()} == {2}
    assert all(r["epochs"] == 2 and r["search_seconds"] > 0 for r in cost.values())


def test_p_improvement_is_the_share_of_pairs_the_method_wins_ties_half(campaign, cli):
    """P(method > ERM) in the verdict's JSON against a hand computation from the stored runs of each pair."""
    from pipeline.compare.evaluate import run_metrics

    store = Store(str(campaign), create=False)
    measured = {m: {r.seed: run_metrics(r) for r in store.evaluations(store.study(f"trio.{m}").id)}
                for m in ("erm", "ls", "cb")}
    shown = in_process(cli, "report", "--verdict", "trio", "--db", str(campaign), "--format", "json")
    verdict = next(t for t in json.loads(shown.stdout) if t["title"].startswith("Verdict of campaign trio"))
    for record in verdict["rows"][1:]:
        for metric, c in record["vs_erm"].items():
            pairs = [(measured[record["method"]][s][metric], measured["erm"][s][metric]) for s in range(3)]
            share = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / 3
            got = c["p_improvement"]
            assert got["probability"] == pytest.approx(share) and got["units"] == 3
            assert 0 <= got["low"] <= got["probability"] <= got["high"] <= 1 and got["low"] < got["high"]


def _verdict_numbers(tables: list[dict]) -> dict:
    """Per method and metric the difference, its interval and adjusted p (and the word, separately), as a
    verdict's JSON gives them."""
    verdict = next(t for t in tables if t["title"].startswith("Verdict of campaign"))
    return {f"{r['method']} {metric}": c["difference"] for r in verdict["rows"] for metric, c in r["vs_erm"].items()}


def same_differences(tables: list[dict], before: list[dict]) -> bool:
    """The same paired differences as a verdict printed before (its intervals and words follow the rules of the
    version that prints it)."""
    return _verdict_numbers(tables) == pytest.approx(_verdict_numbers(before))


def test_a_campaign_stored_by_0_6_0_keeps_its_one_split_and_reports_the_same_differences(tmp_path, cli):
    """tests/fixtures/v0.6.0-campaign.db: its file (no resplit, no max_seeds in it) runs nothing, its runs stay on
    the search's split, the verdict's differences are 0.6.0's, and a file asking to resplit it is one line, exit 2."""
    data = DATA
    db = tmp_path / "old.db"
    shutil.copy(data / "v0.6.0-campaign.db", db)
    code, out, err = cli("compare", str(data / "old-trio.toml"), "--db", str(db), "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    assert "0 trial(s) and 0 re-training run(s) now" in err and "every run on the search's split" in err
    assert rows(db, "select count(*) from rt_evaluations") == [(9,)]
    shown = in_process(cli, "report", "--verdict", "old-trio", "--db", str(db), "--format", "json")
    before = json.loads((data / "v0.6.0-campaign-verdict.json").read_text())
    assert same_differences(json.loads(shown.stdout), before)
    assert "the training seed only (every run uses the search's split, resplit = false)" in shown.stdout
    resplit = tmp_path / "resplit.toml"
    resplit.write_text((data / "old-trio.toml").read_text().replace("seeds = 3", "seeds = 3\nresplit = true"))
    stored = db.read_bytes()
    code, out, err = cli("compare", str(resplit), "--db", str(db), "--device", "cpu")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "resplit = false goes on with it" in err, err
    assert db.read_bytes() == stored


def test_resplit_false_trains_what_0_6_0_trained(tmp_path, cli):
    """The 0.6.0 campaign run afresh with resplit = false and rare_kept = "first": the same verdict, number for
    number."""
    data = DATA
    path = tmp_path / "old-trio.toml"
    old = (data / "old-trio.toml").read_text()
    path.write_text(old.replace("seeds = 3", "seeds = 3\nmax_seeds = 3\nresplit = false")
                    .replace("[data]", "replicates = 1\n\n[data]")  # one search, as 0.6.0 ran it
                    .replace('imbalance_in = "train"', 'imbalance_in = "train"\nrare_kept = "first"')
                    .replace("epochs = 1", "epochs = 1\nlr_backbone = 0.001"))  # 0.6.0's default then
    ran = robust_tune("compare", str(path), "--db", str(tmp_path / "new.db"), "--device", "cpu",
                      "--log-file", str(tmp_path / "ax.log"))
    assert ran.returncode == 0, ran.stderr
    shown = in_process(cli, "report", "--verdict", "old-trio", "--db", str(tmp_path / "new.db"), "--format", "json")
    before = json.loads((data / "v0.6.0-campaign-verdict.json").read_text())
    assert same_differences(json.loads(shown.stdout), before)


def test_the_verdict_picture_has_one_row_per_method_and_a_panel_per_metric(campaign, tmp_path, cli):
    shown = in_process(cli, "report", "--verdict", "trio", "--db", str(campaign), "--plots", str(tmp_path / "pictures"))
    assert shown.returncode == 0, shown.stderr
    assert sorted(p.name for p in (tmp_path / "pictures").iterdir()) == ["trio-budget.png", "trio-verdict.png"]
    from pipeline.report.plots import verdict_picture
    from pipeline.compare.verdict import take_verdict

    store = Store(str(campaign), create=False)
    picture = verdict_picture(take_verdict(store, store.require_campaign("trio")))
    assert picture.data["methods"] == ["ls", "cb"]
    assert [len(picture.data[metric]) for metric in METRICS] == [2, 2, 2, 2]
    assert len(picture.figure.axes) == len(METRICS)
    assert texts_off_canvas(picture) == []
    (legend,) = picture.figure.legends  # the colours drawn, each named, and no colour the picture does not draw
    named = {text.get_text(): handle.get_color() for text, handle in zip(legend.get_texts(), legend.legend_handles)
             if text.get_text() != "within the smallest effect"}
    drawn = {row["verdict"] or "secondary": row["colour"] for metric in METRICS for row in picture.data[metric]}
    assert named == drawn
    page = in_process(cli, "report", "--verdict", "trio", "--db", str(campaign), "--format", "html")
    assert page.returncode == 0 and "data:image/png;base64," in page.stdout
    assert "Verdict of campaign trio" in page.stdout


def test_the_complete_html_page_of_a_campaigns_studies_holds_its_verdict_and_comparison(campaign, cli, tmp_path):
    code, out, err = cli("report", "--db", str(campaign), "--format", "html", "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    for title in ("Best combination", "Evaluation over seeds", "Verdict of campaign trio", "Trials of trio.cb "):
        assert f"<caption>{title}" in out, title
    assert 'id="picture-trio-verdict"' in out and 'id="picture-trio-budget"' in out  # every picture of the campaign
    assert 'id="picture-trio-ls-compare"' in out and 'href="#pictures-1"' in out


def test_a_killed_campaign_resumes_without_a_duplicate_study_trial_or_run_and_runs_once_at_a_time(tmp_path):
    db, path = tmp_path / "c.db", campaign_file(tmp_path, text=CAMPAIGN.replace('["ls", "cb"]', '["cb"]'))
    args = ("compare", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    for kill_at in ("after-evaluation-1", None):  # in re-training (the studies' own kills are tested there), then on
        workers = () if kill_at else ("--workers", "2")  # the rest of the re-training on two Dask workers
        done = robust_tune(*args, *workers, env={"ROBUST_TUNE_KILL_AT": kill_at} if kill_at else {})
        assert done.returncode == (-9 if kill_at else 0), done.stderr
        assert "Traceback" not in done.stderr
    store = Store(str(db))
    with store.lock_campaign(store.require_campaign("trio")):  # another process runs the campaign
        second = robust_tune(*args)
    assert second.returncode == 2 and f"campaign trio is being run by process {os.getpid()}" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    assert rows(db, "select count(*), count(distinct name) from rt_studies") == [(2, 2)]
    assert rows(db, "select count(*) from rt_trials where status = 'completed'") == [(4,)]
    assert rows(db, "select count(*), count(distinct study_id || '-' || variant || '-' || seed) from rt_evaluations") \
        == [(6, 6)]
    assert rows(db, "select count(*) from rt_campaigns") == [(1,)]
    assert rows(db, "select count(*) from rt_campaign_locks") == [(0,)]


def test_a_campaign_killed_between_a_search_trials_row_and_telling_ax_tells_ax_when_it_resumes(tmp_path):
    """Killed after the last search trial of ERM's study is stored and before Ax is told: the table holds the whole
    budget and Ax a running trial. The resumed campaign reconciles the two, as `run` does, before it moves on."""
    text = CAMPAIGN.replace('["ls", "cb"]', '["cb"]').replace("trials = 2\ninitial = 2", "trials = 1\ninitial = 1")
    db, path = tmp_path / "c.db", campaign_file(tmp_path, text=text)
    args = ("compare", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    killed = robust_tune(*args, env={"ROBUST_TUNE_KILL_AT": "after-record"})
    assert killed.returncode == -9, killed.stderr
    erm = load_campaign(path).study("erm", 0)
    assert rows(db, "select status from rt_trials") == [("completed",)]
    assert [status for status, _ in helpers.ax_trials(erm, db).values()] == ["running"]  # the window
    resumed = robust_tune(*args)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    for method in ("erm", "cb"):
        study = load_campaign(path).study(method, 0)
        assert [status for status, _ in helpers.ax_trials(study, db).values()] == ["completed"], method
    assert rows(db, "select s.name, t.status from rt_trials t join rt_studies s on s.id = t.study_id order by s.name") \
        == [("trio.cb", "completed"), ("trio.erm", "completed")]


@pytest.mark.parametrize("change, problem", [
    ('methods = ["ls", "cb"]', 'methods = ["ls", "nope"]'),
    ('methods = ["ls", "cb"]', 'methods = ["ls", "cb", "ls"]'),
    ("[method_params.cb]\ncb_power", "[method_params.cb]\nbeta"),
    ("[method_params.cb]", "[method_params.hws]"),
    ("epochs = 1", "epochs = 1\ncb_power = 0.5\nbeta = 3.0"),
    ("lr_head = {{ low = 0.01, high = 0.2, log = true }}", "lr_head = 0.05"),
    ("lr_head = {{ low = 0.01, high = 0.2, log = true }}", "lr_head = {{ low = 0.2, high = 0.01 }}"),
    ("max_seeds = 3", "max_seeds = 2"),
    ("[evaluate]\nseeds = 3", "[evaluate]\nseeds = 1"),
    ("[evaluate]\nseeds = 3", '[evaluate]\nseeds = 3\npick = "luckiest"'),
    ('name = "trio"', 'name = "trio.x"'),
    ('methods = ["ls", "cb"]', '[method]\nname = "ls"'),
])
def test_a_bad_campaign_file_is_one_line_and_exit_2_and_creates_nothing(tmp_path, cli, change, problem):
    text = CAMPAIGN.replace(change, problem)
    assert text != CAMPAIGN
    path = campaign_file(tmp_path, text=text)
    code, out, err = cli("compare", str(path), "--db", str(tmp_path / "c.db"), "--device", "cpu")
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and str(path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trio.toml"]  # no database, no log


def test_bad_campaign_messages_name_the_problem(tmp_path):
    raw = {"name": "c", "methods": ["erm", "ls", "erm"], "params": {"epochs": 1}}
    with pytest.raises(Exception, match="erm is listed twice"):
        parse_campaign(raw, "c.toml")
    with pytest.raises(Exception, match="params.beta: no method of the campaign takes it"):
        parse_campaign({"name": "c", "methods": ["ls"], "params": {"beta": 1.0}}, "c.toml")
    with pytest.raises(Exception, match="method erm has nothing to search"):
        parse_campaign({"name": "c", "methods": ["ls"], "params": {"epochs": 1}}, "c.toml")
    with pytest.raises(Exception, match="method_params.cb.beta: cb takes no parameter beta"):
        parse_campaign({"name": "c", "methods": ["cb"], "method_params": {"cb": {"beta": 1.0}}}, "c.toml")


def test_a_campaign_has_erm_first_and_each_method_its_shared_and_own_parameters():
    campaign = parse_campaign({"name": "c", "methods": ["hws", "ls"],
                               "params": {"epochs": 3, "alpha": 0.1, "lr_head": {"low": 0.01, "high": 0.1}},
                               "method_params": {"hws": {"beta": {"low": 1.0, "high": 10.0}}},
                               "evaluate": {"seeds": 5, "max_seeds": 15, "pick": "model"}}, "c.toml")
    assert campaign.methods == ("erm", "hws", "ls") and campaign.evaluation.pick == "model"
    assert campaign.studies["ls"].fixed["alpha"] == 0.1 and "alpha" not in campaign.studies["hws"].fixed
    assert campaign.studies["hws"].search["beta"].high == 10.0 and campaign.studies["hws"].fixed["epochs"] == 3
    assert campaign.evaluation.max_seeds == 15
    assert parse_campaign({"name": "c", "methods": ["hws"], "params": {"epochs": 3, "lr_head": {"low": 0.01,
                                                                                               "high": 0.1}}},
                          "c.toml").settle_max_seeds(None).evaluation.max_seeds == 30  # the default of a new one
    stored = parse_campaign({"name": "c", "methods": ["hws"], "params": {"epochs": 3, "lr_head": {"low": 0.01,
                                                                                                "high": 0.1}}},
                            "c.toml").settle_max_seeds(3)  # a campaign stored with 3 keeps it
    assert stored.evaluation.max_seeds == 3
    assert campaign.study("hws", 2).name == "c.hws.r2" and campaign.study("hws", 2).search_seed == 2


def _noise_campaign(rng: random.Random, methods: list[str], seeds: int, effect: float = 0.0) -> dict:
    """Runs of every method on `seeds` seeds, each metric an accuracy of 0.8 plus Gaussian noise of one point:
    no true difference, except `effect` points on the first method's first metric."""
    return {m: {metric: {(0, s): 0.8 + 0.01 * rng.gauss(effect if (m == methods[1] and metric == METRICS[0]) else 0.0,
                                                        1.0)
                         for s in range(seeds)} for metric in METRICS} for m in methods}


@pytest.mark.parametrize("width", [80, 120])
def test_the_verdict_fits_the_terminal_with_one_line_per_method_and_metric(campaign, width):
    """`report --verdict` at 80 and 120 columns: no line wider than the terminal, and in the verdict table each
    (method, metric) row is one line holding its difference and its word."""
    shown = robust_tune("report", "--verdict", "trio", "--db", str(campaign), env={"COLUMNS": str(width)})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(map(len, lines)) <= width
    start = next(i for i, line in enumerate(lines) if line.startswith("Verdict of campaign trio"))
    rule = next(i for i in range(start, len(lines)) if lines[i].startswith("─"))
    assert lines[rule - 1].split()[:2] == ["method", "metric"]
    rows_ = lines[rule + 1:rule + 1 + 3 * 4]  # 3 methods x 4 metrics
    assert all("±" in row or re.search(r"\d \[\d+, \d+\]", row) for row in rows_), rows_
    assert [row.split()[0] for row in rows_[::4]] == ["erm", "ls", "cb"]
    for row in rows_[4:]:  # every method but the reference: its difference and its word on the row's one line
        assert re.search(r"[+-]\d+\.\d( \[[+-]\d+(\.\d)?, [+-]\d+(\.\d)?\]| \(exact\))", row) and re.search(
            r"(better|worse|equivalent|undecided|open)\*?\s*$|(secondary|all equal)\s*$", row), row
    assert lines[rule + 13].split()[0] in ("Accuracies", "mean", "not")  # no row went on to a next line: a note
    # P(method > ERM) beside each difference, or named as left out for room (--wide and the files have it)
    assert "P>ERM %" in lines[rule - 1] or any("not shown here" in line and "P>ERM %" in line for line in lines)
    assert width < 100 or "P>ERM %" in lines[rule - 1]


def _verdict_of(values: dict, parameters: dict, flags: dict | None = None, rare=None):
    """A verdict taken from given runs by the verdict's own assembly (one search, one look of 3 seeds)."""
    from pipeline.compare.verdict import MethodResult, verdict_of

    results = [MethodResult(m, [f"c.{m}"], [parameters[m]], 3, {k: (0.5, 0.1) for k in METRICS}, 2, 2, 2, 1.0, 1.0,
                            bound_flags=(flags or {}).get(m, [])) for m in values]
    design = Design(("test_balanced_accuracy", "smallest_class_accuracy"),
                    {"test_balanced_accuracy": 0.01, "smallest_class_accuracy": 0.05}, seeds=3, max_seeds=3)
    return verdict_of("c", design, values, results, "the training seed and the whole split", rare)


def test_a_method_whose_runs_equal_erms_is_said_to_be_erm_and_equivalent_by_the_exact_rule():
    from pipeline.report.verdict_report import verdict_tables

    erm = {m: {(0, s): 0.5 + 0.1 * s for s in range(3)} for m in METRICS}
    values = {"erm": erm, "ls": json.loads(json.dumps({m: list(v.values()) for m, v in erm.items()}))}
    values["ls"] = {m: {(0, s): v for s, v in enumerate(vs)} for m, vs in values["ls"].items()}
    verdict = _verdict_of(values, {"erm": {"lr_head": 0.1}, "ls": {"lr_head": 0.1, "alpha": 0.0}})
    assert "ls tuned to alpha = 0: it is ERM here (its re-trained runs equal ERM's on all 3 pairs)" in verdict.reading
    table = next(t for t in verdict_tables(verdict) if t.title.startswith("Verdict"))
    ls_rows = [row for row in table.rows if row[0] == "ls"]
    assert ls_rows[0][3] == "+0.0 (exact)" and ls_rows[0][5] == "equivalent*"  # one search: these configurations
    assert verdict.cells[("ls", "test_balanced_accuracy")].outcome is Outcome.EQUIVALENT
    assert table.records[1]["same_as_erm"].startswith("ls tuned to alpha = 0")


def test_a_tuned_value_on_a_bound_is_flagged_in_the_cost_table_the_reading_and_json():
    from pipeline.search.bounds import bound_flags
    from pipeline.params import Range
    from pipeline.report.verdict_report import verdict_tables

    rng = random.Random(5)
    values = _noise_campaign(rng, ["erm", "cb"], 3)
    flags = bound_flags({"lr_head": Range(0.01, 0.2, log=True)}, {"lr_head": 0.2})
    verdict = _verdict_of(values, {"erm": {"lr_head": 0.2}, "cb": {"lr_head": 0.05}}, {"erm": flags})
    cost, *_ = tables = verdict_tables(verdict)
    table = next(t for t in tables if t.title.startswith("Verdict"))
    assert "erm: lr_head = 0.2 sits on the upper bound of [0.01, 0.2]: its best may lie outside; widen the range" \
        in cost.notes
    assert cost.records[0]["bound_flags"] == [{"parameter": "lr_head", "value": 0.2, "bound": "upper", "low": 0.01,
                                               "high": 0.2, "log": True}]
    assert table.records[0]["bound_flags"] == cost.records[0]["bound_flags"] and cost.records[1]["bound_flags"] == []
    assert "Tuned onto a bound of its range: erm's lr_head (upper)" in verdict.reading


def test_behind_erm_for_a_method_that_contains_erm_is_read_as_a_search_that_chose_badly():
    rng = random.Random(8)
    values = _noise_campaign(rng, ["erm", "ls"], 3)
    for m in METRICS:
        values["ls"][m] = {k: v - 0.2 for k, v in values["erm"][m].items()}  # clearly behind, on every pair
        values["ls"][m][(0, 0)] -= 0.001
    verdict = _verdict_of(values, {"erm": {"lr_head": 0.1}, "ls": {"lr_head": 0.1, "alpha": 0.3}})
    assert "ls falls behind ERM" in verdict.reading
    assert ("ls contains ERM (ls at alpha = 0), so behind ERM after tuning means its search chose badly"
            in verdict.reading)


def test_which_methods_contain_erm_is_read_off_their_parts_declarations():
    from pipeline.compare.verdict import contains_erm_at
    from pipeline.methods.declarations import PARTS
    from pipeline.methods.parts import Part

    assert contains_erm_at("ls") == "alpha = 0" and contains_erm_at("hws") == "beta near 0"
    assert contains_erm_at("ls+hws") == "alpha = 0 and beta near 0"  # each part at its own ERM value
    assert contains_erm_at("gils") is None and contains_erm_at("mixup+hws") is None and contains_erm_at("erm") is None
    PARTS.add(Part("toyw", "weights", (), "a part declared elsewhere", "pipeline.methods.weights:NoWeights",
                   contains_erm_at="w = 0"))
    try:
        rng = random.Random(8)
        values = _noise_campaign(rng, ["erm", "toyw"], 3)
        for m in METRICS:
            values["toyw"][m] = {k: v - 0.2 - 0.001 * k[1] for k, v in values["erm"][m].items()}  # clearly behind
        verdict = _verdict_of(values, {"erm": {"lr_head": 0.1}, "toyw": {"lr_head": 0.1}})
        assert "toyw contains ERM (toyw at w = 0), so behind ERM after tuning" in verdict.reading
    finally:
        PARTS.remove("toyw")


def test_a_search_replicate_draws_its_split_again_only_when_the_campaign_resplits():
    """DomainBed's trial seed: replicate r searches with search seed + r and, with resplit, on a split of its own
    (split seed + 1000 r); a file that does not say resplits when new and keeps what a stored campaign was stored
    with."""
    raw = {"name": "c", "methods": ["hws"], "data": {"split_seed": 10},
           "params": {"epochs": 3, "lr_head": {"low": 0.01, "high": 0.2, "log": True}}}
    unsaid = parse_campaign(raw, "c.toml")
    assert unsaid.evaluation.resplit is None
    new = unsaid.settle_resplit(None).settle_replicate_seeds(None)
    assert new.evaluation.resplit is True
    assert (new.study("hws", 2).search_seed, new.study("hws", 2).data.split_seed) == (2, 2010)
    assert new.study("hws", 0).data.split_seed == 10 and new.identity()["resplit"] is True
    kept = unsaid.settle_resplit(False)  # stored without resplitting
    assert kept.evaluation.resplit is False and kept.study("hws", 2).data.split_seed == 10
    assert "resplit" not in kept.identity()  # a campaign stored before keeps its fingerprint
    said = parse_campaign({**raw, "evaluate": {"resplit": False}}, "c.toml").settle_resplit(None)
    assert said.evaluation.resplit is False
    with pytest.raises(Exception, match="evaluate.resplit: must be true or false"):
        parse_campaign({**raw, "evaluate": {"resplit": "yes"}}, "c.toml")


REPLICATED = {"name": "c", "methods": ["cb"], "data": {"split_seed": 10}, "replicates": 2, "evaluate": {"seeds": 3},
              "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2, "log": True}}}


def _replicate_plans(tmp_path: Path, campaign) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Each (method, replicate)'s confirmation runs as `compare` plans them, (split seed, training seed) per pair,
    with each study stored holding one completed trial (nothing trains)."""
    from pipeline.compare.campaign import _plan

    store = Store(str(tmp_path / "c.db"))
    for study in campaign.all_studies():
        row = store.start_trial(store.create_study(study).id, 0, {"lr_head": 0.05}, study.seed, 0.1)
        store.complete_trial(row, helpers.result(0.5, 0.5))
    plans = {(m, r): _plan(store, campaign, m, r, 3) for m in campaign.methods for r in range(campaign.replicates)}
    return {key: [(config.data.split_seed, config.seed) for config in
                  (plan.config(plan.variants[0], seed) for seed in plan.seeds)] for key, plan in plans.items()}


def test_each_search_replicate_has_splits_and_training_seeds_of_its_own_and_every_method_erms_pairs(tmp_path):
    """A new campaign: replicate r searches on split seed 10 + 1000 r with training seed 1000 r, and its pair k trains
    on seed 1000 r + k and split seed 10 + 1000 r + k, for cb as for ERM; no split or training seed of one replicate
    is another's, and the verdict pairs run (r, 1000 r + k) as (r, k)."""
    from pipeline.compare.verdict import campaign_runs

    campaign = parse_campaign(REPLICATED, "c.toml").settle_resplit(None).settle_replicate_seeds(None)
    assert campaign.replicate_seeds == "apart" and campaign.identity()["replicate_seeds"] == "apart"
    plans = _replicate_plans(tmp_path, campaign)
    assert plans[("erm", 0)] == [(10, 0), (11, 1), (12, 2)]  # replicate 0: as with one search
    assert plans[("erm", 1)] == [(1010, 1000), (1011, 1001), (1012, 1002)]
    for r in range(2):
        assert plans[("cb", r)] == plans[("erm", r)]  # the same pairs as ERM's replicate
        study = campaign.study("cb", r)
        assert (study.data.split_seed, study.seed) == plans[("erm", r)][0]  # its search: pair 0's split and seed
    splits = [{split for split, _ in plans[("erm", r)]} for r in range(2)]
    seeds = [{seed for _, seed in plans[("erm", r)]} for r in range(2)]
    assert not splits[0] & splits[1] and not seeds[0] & seeds[1]

    store = Store(str(tmp_path / "c.db"))
    record = store.save_campaign(campaign)
    for r in range(2):
        study_id = store.study(record.study_names("cb")[r]).id
        for seed in [seed for _, seed in plans[("cb", r)][:2]] + [7]:  # and seed 7: an `evaluate` by hand
            store.add_evaluation(study_id, "tuned", seed, 0, {}, helpers.rare_class_run(0.9, 0.5), {"3": 5})
    assert record.config["replicate_seeds"] == "apart"
    assert sorted(campaign_runs(store, record)["cb"]) == [(0, 0), (0, 1), (0, 7), (1, 0), (1, 1)]


def test_a_campaign_stored_before_replicates_had_seeds_of_their_own_keeps_its_seeds_and_fingerprint(tmp_path):
    """Stored by 0.9.0 (no replicate_seeds in its config): replicate r still searches on split seed 10 + r, its
    pair k on seed k and split seed 10 + r + k, so its stored studies and runs are found, not trained again."""
    stored = {k: v for k, v in parse_campaign(REPLICATED, "c.toml").settle_resplit(None).to_dict().items()
              if k != "replicate_seeds"}
    old = helpers.stored_before_rare_kept(parse_campaign(REPLICATED, "c.toml").settle_resplit(True)
                                          .settle_replicate_seeds(stored))
    assert old.replicate_seeds == "shared" and old.fingerprint() == "f2f8cf5d3a08f258"  # as 0.9.0 computed it
    study = old.study("cb", 1)
    assert (study.data.split_seed, study.seed, study.search_seed) == (11, 0, 1)
    assert study.fingerprint() == "1ae430b286aaa8d5"  # the replicate study 0.9.0 stored
    plans = _replicate_plans(tmp_path, old)
    assert plans[("erm", 1)] == plans[("cb", 1)] == [(11, 0), (12, 1), (13, 2)]
    assert plans[("erm", 0)] == [(10, 0), (11, 1), (12, 2)]
    record = Store(str(tmp_path / "c.db")).save_campaign(old)
    assert record.config["replicate_seeds"] == "shared" and record.pair(1, 2) == 2
    assert old.settle_replicate_seeds(record.config).replicate_seeds == "shared"  # stored so from now on


def test_the_verdict_names_the_rare_class_and_the_images_it_rests_on(campaign, cli):
    shown = in_process(cli, "report", "--verdict", "trio", "--db", str(campaign), "--format", "json")
    verdict = next(t for t in json.loads(shown.stdout) if t["title"].startswith("Verdict of campaign trio"))
    rare = verdict["rows"][0]["rare_class"]
    store = Store(str(campaign), create=False)
    runs = store.evaluations(store.study("trio.erm").id)
    assert rare["name"] == "3" and rare["train"][0] == min(r.train_class_counts["3"] for r in runs)
    tests = [r.per_class["counts"]["test"]["3"] for r in runs]  # stored with each run since 0.7.0
    assert tuple(rare["test"]) == (min(tests), max(tests)) and min(tests) >= 10
    assert any(note.startswith(f"Accuracies in %; rare class = '3' ({rare['train'][0]}") for note in verdict["notes"])


def test_a_metric_resting_on_few_test_images_is_marked_and_warned_of():
    from pipeline.compare.verdict import RareClass
    from pipeline.report.verdict_report import verdict_tables

    values = _noise_campaign(random.Random(4), ["erm", "cb"], 3)
    verdict = _verdict_of(values, {"erm": {"lr_head": 0.1}, "cb": {"lr_head": 0.1, "cb_power": 0.5}},
                          rare=RareClass("3", (2, 2), (1, 1), (4, 4), 4))
    table = next(t for t in verdict_tables(verdict) if t.title.startswith("Verdict"))
    labels = [row[1] for row in table.rows]
    assert "rare class*" in labels and "worst class*" in labels and "test acc" in labels
    assert any(note.startswith("*: rests on fewer than 10 test images of a class, where one image moves an accuracy "
                               "by 25 points") for note in table.notes)
    assert any("rare class = '3' (2 training, 1 validation and 4 test images per run)" in n for n in table.notes)
    few = [w for w in verdict.warnings if w.kind == "few_test_images"]
    assert few and few[0].class_name == "3" and "one image moves it by 25.0 points" in few[0].text
    assert "does as well" not in verdict.reading and "as well as" not in verdict.reading


def _run(seed: int, balanced: float, per_class: dict[str, float]):
    """A stored confirmation run as the verdict reads it: its metrics and per-class test accuracies."""
    from pipeline.config import DataConfig, RunSettings
    from pipeline.store import EvaluationRecord

    settings = RunSettings(DataConfig(), "small_cnn", "none", "erm", {}, seed, "cpu", "fp32")
    metrics = {"test_accuracy": balanced, "test_balanced_accuracy": balanced, "test_worst_class_accuracy": 0.0}
    return EvaluationRecord("tuned", seed, 0, {}, metrics, {"test": per_class}, {"a": 50, "b": 50, "r": 3}, settings,
                            1.0)


def test_the_runs_warn_of_a_class_never_right_a_collapsed_run_and_runs_near_chance():
    from pipeline.compare.verdict import run_warnings

    design = Design(("test_balanced_accuracy",), {"test_balanced_accuracy": 0.01}, seeds=5, max_seeds=5)
    erm = {(0, s): _run(s, 0.80 + 0.005 * s, {"a": 0.9, "b": 0.8, "r": 0.0}) for s in range(5)}
    cb = {(0, s): _run(s, 0.82 + 0.005 * s, {"a": 0.9, "b": 0.8, "r": 0.0}) for s in range(5)}
    cb[(0, 3)] = _run(3, 0.35, {"a": 0.5, "b": 0.2, "r": 0.0})  # its training collapsed on pair 3: near chance
    found = {w.kind: w for w in run_warnings({"erm": erm, "cb": cb}, design)}
    assert found["class_never_right"].class_name == "r" and "class 'r'" in found["class_never_right"].text
    collapsed = found["collapsed_run"]
    assert (collapsed.method, collapsed.pair, collapsed.score) == ("cb", 3, 0.35)
    assert "cb's run on pair 3 scored 35.0 on balanced accuracy" in collapsed.text
    assert found["near_chance"].method == "cb" and "1 of 5 runs" in found["near_chance"].text
    assert not any(w.method == "erm" for w in found.values())


def test_the_verdict_says_which_ranges_each_methods_search_widened(tmp_path, cli):
    """Learning rates declared far below the best: the studies widen them, and the verdict's cost table, its reading
    and its JSON say so, from the stored widenings; every method's study had the same allowance."""
    text = (CAMPAIGN.replace('methods = ["ls", "cb"]', 'methods = ["cb"]')
            .replace("low = 0.01, high = 0.2", "low = 0.001, high = 0.002")
            .replace("trials = 2\ninitial = 2", "trials = 3\ninitial = 1\nwiden_trials = 1")
            .replace("seeds = 3\nmax_seeds = 3", "seeds = 2\nmax_seeds = 2"))
    db = tmp_path / "c.db"
    code, _, err = cli("compare", str(campaign_file(tmp_path, text=text)), "--db", str(db), "--device", "cpu",
                       "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    stored = rows(db, "select s.name, w.parameter, w.low_before, w.high_before, w.low_after, w.high_after "
                      "from rt_widenings w join rt_studies s on s.id = w.study_id order by w.id")
    assert stored and {name for name, *_ in stored} <= {"trio.erm", "trio.cb"}
    shown = in_process(cli, "report", "--verdict", "trio", "--db", str(db), "--format", "json")
    tables = {t["title"].split(":")[0]: t for t in json.loads(shown.stdout)}
    cost = {r["method"]: r for r in tables["Campaign trio"]["rows"]}
    said = [(w["study"], w["parameter"], *w["before"], *w["after"]) for r in cost.values() for w in r["widenings"]]
    assert sorted(said) == sorted(stored)
    for method, record in cost.items():  # the allowance counted where the study widened
        assert record["budget"] == 3 + any(name == f"trio.{method}" for name, *_ in stored)
    assert any("lr_head widened from [0.001, 0.002]" in note for note in tables["Campaign trio"]["notes"])
    verdict = tables["Verdict of campaign trio"]
    assert any("Widened where the search's best sat on a bound: " in note for note in verdict["notes"])


def test_by_default_each_method_is_searched_in_rounds_and_the_search_is_the_unit(tmp_path, cli):
    """A new campaign's design at a small size (a pilot of 2 searches per method, 2 pairs each, then rounds of one more
    search up to 3): every search an ordinary study on seeds and splits of its own, each round said before it runs,
    the verdict over the searches with each method's search luck in its JSON, and a second compare trains nothing."""
    text = (CAMPAIGN.replace('methods = ["ls", "cb"]', 'methods = ["cb"]')
            .replace("replicates = 1 ", "replicates = 2\nmax_replicates = 3\nreplicates_per_round = 1\n#")
            .replace("seeds = 3\nmax_seeds = 3", "seeds = 2\nmax_seeds = 2"))
    db = tmp_path / "c.db"
    code, _, err = cli("compare", str(campaign_file(tmp_path, text=text)), "--db", str(db), "--device", "cpu",
                       "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    said = " ".join(err.split())
    assert "2 trials each x 2 searches, each search re-trained on 2 pairs" in said and "up to 3" in said
    assert "round 2: erm, cb: 3 searches of 2 pairs (2 new searches, 4 runs" in said
    studies = rows(db, "select s.name, count(*), min(t.trial_index) from rt_studies s join rt_trials t "
                       "on t.study_id = s.id group by s.name order by s.name")
    assert [(name, count) for name, count, _ in studies] == [(f"trio.{m}{r}", 2) for m in ("cb", "erm")
                                                            for r in ("", ".r1", ".r2")]
    runs = rows(db, "select s.name, e.seed from rt_evaluations e join rt_studies s on s.id = e.study_id "
                    "where e.variant = 'tuned' order by s.name, e.seed")
    assert runs == [(f"trio.{m}{suffix}", 1000 * r + k) for m in ("cb", "erm")
                    for r, suffix in enumerate(("", ".r1", ".r2")) for k in range(2)]
    shown = in_process(cli, "report", "--verdict", "trio", "--db", str(db), "--format", "json")
    verdict = next(t for t in json.loads(shown.stdout) if t["title"].startswith("Verdict of campaign trio"))
    cb = next(r for r in verdict["rows"] if r["method"] == "cb")
    assert cb["searches"] == 3 and cb["about"] == "methods" and cb["runs"] == 6
    assert set(cb["search_luck"]) == set(METRICS) and all(v >= 0 for v in cb["search_luck"].values())
    cell = cb["vs_erm"]["test_balanced_accuracy"]
    assert cell["searches"] == cell["units"] == 3 and cell["about"] == "methods"
    assert "3 searches x 2 pairs" in verdict["title"]
    stored = json.loads(rows(db, "select config from rt_campaigns")[0][0])
    assert stored["evaluation"]["pick"] == "model"  # re-trained the model's pick, here each best observed (2 trials)
    again = robust_tune("compare", str(tmp_path / "trio.toml"), "--db", str(db), "--device", "cpu",
                        "--log-file", str(tmp_path / "ax.log"))
    assert again.returncode == 0 and "0 trial(s) and 0 re-training run(s) now" in again.stderr, again.stderr
