"""Reports from a real SQLite store: the right best row, honest marks, every output format."""
import csv
import io
import json

import pytest

from pipeline.config import DataConfig
from pipeline.report.formats import render_text
from pipeline.report.study_tables import best_table, dataset_label, trials_table
from pipeline.store import Store
from helpers import add_study, in_process


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "report.db"))


def test_the_best_row_is_the_highest_objective_not_the_highest_test_accuracy(store):
    add_study(store, "s", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.80, 0.99)),
                                ({"alpha": 0.4, "T": 9, "eta": 1.7}, (0.90, 0.70)),
                                ({"alpha": 0.2, "T": 5, "eta": 2.5}, None),
                                ({"alpha": 0.3, "T": 7, "eta": 2.9}, (0.90, 0.60))])
    table = best_table(store)
    (row,) = table.rows
    headers = table.headers
    assert row[headers.index("alpha")] == "0.4" and row[headers.index("T")] == "9"
    assert row[headers.index("epoch")] == "30"  # fixed values fill the paper's columns
    assert row[headers.index("val acc")] == "90.0" and row[headers.index("test acc")] == "70.0"
    assert row[headers.index("trials")] == "3/20" and row[headers.index("selected on")] == "val"
    assert table.records[0]["trial_index"] == 1  # a tie on the objective goes to the earlier trial


def test_one_row_per_dataset_network_method_and_test_selection_is_marked(store):
    add_study(store, "a", runs=[({"alpha": 0.1, "T": 1, "eta": 2.0}, (0.7, 0.7))])
    add_study(store, "b", runs=[({"alpha": 0.2, "T": 2, "eta": 2.0}, (0.8, 0.8))])  # same key, better
    add_study(store, "c", method="ls", objective="test_accuracy", runs=[({"alpha": 0.3}, (0.6, 0.9))])
    add_study(store, "d", backbone="resnet50", runs=[])  # nothing completed yet: no row
    table = best_table(store)
    assert [(r[2], r[-1]) for r in table.rows] == [("gils", "b"), ("ls", "c")]
    assert table.rows[1][table.headers.index("selected on")] == "test *"
    assert any("optimistic" in note for note in table.notes)
    assert [r[-1] for r in best_table(store, ["a"]).rows] == ["a"]


def test_every_format(store):
    add_study(store, "s", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.75)),
                                ({"alpha": 0.2, "T": 4, "eta": 2.1}, None)])
    tables = [best_table(store), trials_table(store, "s")]
    markdown = render_text(tables, "markdown")
    assert "| data set | network | method | alpha | T | eta | epoch |" in markdown
    rows = list(csv.reader(io.StringIO(render_text(tables[:1], "csv"))))
    assert rows[0][:3] == ["data set", "network", "method"] and rows[1][2] == "gils"
    latex = render_text(tables[:1], "latex")
    assert r"\begin{tabular}" in latex and "worst class" in latex
    parsed = json.loads(render_text(tables, "json"))
    assert parsed[0]["rows"][0]["metrics"]["test_accuracy"] == 0.75
    assert [t["status"] for t in parsed[1]["rows"]] == ["completed", "failed"]
    assert "TrainingDiverged" in parsed[1]["rows"][1]["error"]


def test_report_through_the_cli(store, cli, tmp_path):
    add_study(store, "s", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.75))])
    out_file = tmp_path / "table.md"
    code, _, err = cli("report", "--db", str(tmp_path / "report.db"), "--format", "markdown", "--out", str(out_file))
    assert code == 0 and "| digits | resnet18 | gils |" in out_file.read_text()
    assert cli("report", "--db", str(tmp_path / "report.db"), "--format", "pdf")[0] == 2  # html is a format now
    code, _, err = cli("report", "nope", "--db", str(tmp_path / "report.db"))
    assert code == 2 and "no study named 'nope'" in err


def test_dataset_labels():
    assert dataset_label(DataConfig.from_dict({"name": "digits", "imbalance_class": "3", "imbalance_keep": 0.05,
                                                "imbalance_in": "train"})) == "digits (class 3 at 5% in train)"
    # studies stored before imbalance_in existed were skewed in training and validation
    assert dataset_label(DataConfig.from_dict({"name": "digits", "imbalance_class": "3", "imbalance_keep": 0.05})) \
        == "digits (class 3 at 5% in train+val)"
    assert dataset_label(DataConfig.from_dict({"name": "images", "manifest": "splits/mt-defect"})) == "mt-defect"


def test_reading_a_database_that_does_not_exist_creates_nothing(cli, tmp_path):
    missing = tmp_path / "none" / "runs.db"
    for command in ("report", "studies"):
        code, _, err = cli(command, "--db", str(missing))
        assert code == 2 and "no database at" in err
    assert not missing.parent.exists()
    Store(str(tmp_path / "empty.db"))
    code, _, err = cli("report", "--db", str(tmp_path / "empty.db"))
    assert code == 2 and "no studies in" in err


ON_BOUND = "edge: alpha = 0.5 sits on the upper bound of [0, 0.5]: its best may lie outside; widen the range"


def test_a_best_trial_on_a_bound_is_said_in_every_format_and_reading_changes_nothing(store, cli, tmp_path):
    add_study(store, "edge", runs=[({"alpha": 0.25, "T": 8, "eta": 2.0}, (0.7, 0.7)),  # inside, not the best
                                   ({"alpha": 0.5, "T": 8, "eta": 2.0}, (0.8, 0.7))])
    add_study(store, "inside", method="ls", runs=[({"alpha": 0.2, "T": 4, "eta": 2.0}, (0.8, 0.7))])
    add_study(store, "beaten", method="ls", runs=[({"alpha": 0.0, "T": 1, "eta": 1.5}, (0.6, 0.7))])  # not shown
    db = tmp_path / "report.db"
    before = db.read_bytes()

    code, out, err = cli("report", "--db", str(db))
    assert code == 0, err
    assert ON_BOUND in " ".join(out.split()) and out.count("sits on") == 1
    assert "on a bound" not in out  # the terminal grid leaves the column to the note

    code, out, _ = cli("report", "--db", str(db), "--format", "json")
    best = json.loads(out)[0]
    flags = {row["study"]: row["bound_flags"] for row in best["rows"]}
    assert flags == {"edge": [{"parameter": "alpha", "value": 0.5, "bound": "upper", "low": 0.0, "high": 0.5,
                               "log": False}], "inside": []}
    assert ON_BOUND in best["notes"]

    for fmt in ("markdown", "latex", "html"):
        code, out, _ = cli("report", "--db", str(db), "--format", fmt)
        assert code == 0 and ON_BOUND in out, fmt
    code, out, _ = cli("report", "--db", str(db), "--format", "csv")
    rows = list(csv.reader(io.StringIO(out)))
    column = rows[0].index("on a bound")
    assert {row[-1]: row[column] for row in rows[1:3]} == {"edge": "alpha (upper)", "inside": "-"}
    assert db.read_bytes() == before


def test_a_best_trial_inside_its_ranges_gets_no_flag(store):
    add_study(store, "s", runs=[({"alpha": 0.485, "T": 2, "eta": 1.55}, (0.8, 0.75)),  # each 3% or more inside
                                ({"alpha": 0.5, "T": 1, "eta": 1.5}, (0.7, 0.75))])  # on bounds, not the best
    table = best_table(store)
    assert "on a bound" not in table.headers and table.records[0]["bound_flags"] == []
    assert not any("bound" in note for note in table.notes)


def test_a_class_a_studys_trials_never_got_right_is_named_for_its_method_in_every_format(store, cli, tmp_path):
    from helpers import run_result

    study = add_study(store, "rare", method="hws")
    for index, rare in enumerate((0.0, 0.0)):
        row = store.start_trial(study.id, index, {"alpha": 0.1 * (index + 1), "T": 3, "eta": 2.0}, 0, 0.1)
        store.complete_trial(row, run_result({"val_accuracy": 0.8, "test_accuracy": 0.7},
                                             {"val": {"a": 0.8, "r": 0.5}, "test": {"a": 0.9, "r": rare}},
                                             epoch_train_loss=[1.0], epoch_val_accuracy=[0.8]))
    done = in_process(cli, "report", "--db", str(tmp_path / "report.db"))
    assert done.returncode == 0, done.stderr
    warning = ("Warning: hws never got class 'r' right: none of the 2 trials of rare got one of its test images "
               "right.")
    assert warning in " ".join(done.stdout.split())
    best = json.loads(in_process(cli, "report", "--db", str(tmp_path / "report.db"), "--format", "json").stdout)[0]
    assert best["rows"][0]["never_right"] == ["r"] and warning in best["notes"]


def test_a_difference_interval_too_wide_to_mean_anything_says_too_few_pairs():
    from pipeline.compare.decision import Outcome
    from pipeline.compare.verdict import VerdictCell
    from pipeline.report.verdict_report import cell_columns

    def cell(low: float, high: float) -> VerdictCell:
        return VerdictCell("cb", "smallest_class_accuracy", 0.148, low, high, 0.99, True, Outcome.UNDECIDED, False,
                           None, None, 3, 3, False, 0.05, 0.05, 2, None, False)

    assert cell_columns(cell(-1.0, 1.0))[0] == "+14.8 (too few pairs)"  # was "+14.8 [-100, +100]"
    assert cell_columns(cell(-0.2, 0.5))[0] == "+14.8 [-20, +50]"
