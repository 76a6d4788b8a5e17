"""Terminal tables fit the terminal: at 80 and 120 columns every table prints one line per row, keeps the
results, and explains each abbreviation it shows (cli/render.py fit_columns)."""
import re

import pytest

from cli.render import ABBREVIATIONS, RESULTS, fit_columns
from pipeline.report.study_tables import best_table, compare_table, studies_table, trials_table
from pipeline.store import Store
from helpers import add_study, rare_class_run, robust_tune

LONG = "digits-{}-resnet18-imbalanced-class-3-seed-{}-a-long-study-name"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """Five studies (four methods, two networks, long names, a failed trial with a long error), two of them
    evaluated on the same seeds: every terminal table of `report` and `studies` has something to fit."""
    path = str(tmp_path_factory.mktemp("fit") / "fit.db")
    store = Store(path)
    counts = {str(c): 100 for c in range(10)} | {"3": 5}
    for i, method in enumerate(("gils", "ls", "erm", "gils", "ls")):
        study = add_study(store, LONG.format(method, i), method=method, backbone="resnet50" if i == 3 else "resnet18",
                          runs=[({"alpha": 0.1 + i / 10, "T": 3, "eta": 2.0}, (0.8 + i / 100, 0.7)),
                                ({"alpha": 0.2, "T": 5, "eta": 1.5}, (0.75, 0.72)), ({"alpha": 0.3}, None)])
        if i < 2:
            for variant, accuracy in (("tuned", 0.9), ("erm", 0.85)):
                for seed in range(3):
                    value = accuracy + i / 100 + seed / 50
                    result = rare_class_run(value, value / 2, method if variant == "tuned" else variant,
                                            {"alpha": value}, balanced=value)
                    store.add_evaluation(study.id, variant, seed, 0, {}, result, counts)
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE rt_trials SET error = ? WHERE status = 'failed'",
                                   ("RuntimeError: " + "a very long message " * 20,))
    return path


def _tables(store: Store, command: list[str]):
    if command[0] == "studies":
        return [studies_table(store)]
    if "--compare" in command:
        return [compare_table(store)]
    if "--all-trials" in command:
        return [trials_table(store, s.name) for s in store.all_studies()]
    return [best_table(store)]


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", [["report"], ["report", "--all-trials"], ["report", "--compare"], ["studies"]])
def test_every_terminal_table_is_one_line_per_row_with_its_results_and_a_legend(db, command, width):
    done = robust_tune(*command, "--db", db, env={"COLUMNS": str(width)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= width
    store = Store(db, create=False)
    for table in _tables(store, command):
        start = next(i for i, line in enumerate(lines) if len(line) > 10 and table.title.startswith(line.strip()))
        rule = next(i for i in range(start, len(lines)) if lines[i].startswith("─"))
        shown = fit_columns(table, width)
        assert lines[rule - 1].split() == " ".join(shown.headers).split()
        printed = lines[rule + 1:rule + 1 + len(table.rows)]
        assert [line.split() for line in printed] == [" ".join(row).split() for row in shown.rows]
        assert not lines[rule + 1 + len(table.rows)].startswith(" ")  # no row goes on to a next line
        for header in (h for h in table.headers if h in RESULTS):  # the objective, test and worst class stay
            assert header in shown.headers or ABBREVIATIONS[header][0] in shown.headers
        notes = " ".join(" ".join(lines[rule + 1 + len(table.rows):]).split())
        for header in shown.headers:
            if header not in table.headers:  # an abbreviation: explained under the table ("a = ..." or "a, b = ...")
                assert re.search(rf"(^|; ){re.escape(header)} ="
                                 rf"|(^|; )[^;=]*\b{re.escape(header)}(, [^;=]+)? =", notes), (header, notes)
        if width == 120 and command == ["report"]:
            assert "…" not in "\n".join(printed)  # the best table at 120 columns: names whole
        key = next(h for h in ("study", "trial") if h in table.headers)  # cut names still tell rows apart
        assert len({row[shown.headers.index(key)] for row in shown.rows}) == len(
            {row[table.headers.index(key)] for row in table.rows})


def test_columns_every_row_shares_are_said_once_and_wide_shows_them_all(db):
    narrow = robust_tune("studies", "--db", db, env={"COLUMNS": "80"}).stdout
    assert "all rows: data set digits, trials 2 of 20, failed 1" in narrow.replace("\n", " ")
    wide = robust_tune("studies", "--db", db, "--wide", env={"COLUMNS": "80"}).stdout
    assert "all rows" not in wide and "…" not in wide and "failed" in wide.splitlines()[1]  # names wrapped, not cut
    cards = robust_tune("studies", "--db", db, env={"COLUMNS": "50"}).stdout
    assert "─" not in cards and cards.count("data set") == 5  # below 60 columns: one block per study


def test_columns_picks_the_terminal_tables_columns_at_80(db):
    done = robust_tune("report", "--db", db, "--all-trials", "--columns", "study,method,test acc,trial,status",
                       env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    best_header = lines[lines.index("Best combination of hyper-parameters") + 1].split()
    assert best_header == ["study", "method", "test"]  # in the order asked, abbreviated to fit; alpha, val acc gone
    assert sum(" erm " in line for line in lines) == 1  # method, the same in no two rows here, is shown
    trials_headers = [line.split() for line in lines if line.startswith("test acc ")]  # what a trials table has
    assert len(trials_headers) == 5 and all(header == ["test", "acc", "trial", "status"] for header in trials_headers)
    assert "RuntimeError" not in done.stdout  # the trials' error column was not asked for
    assert max(len(line) for line in lines if line.startswith(("digits-", "test acc", "    "))) <= 80


def test_columns_unknown_name_is_one_line_listing_the_known(db):
    done = robust_tune("report", "--db", db, "--columns", "method,nope", env={"COLUMNS": "80"})
    assert done.returncode == 2
    assert "unknown column 'nope'" in done.stderr and "test acc" in done.stderr and "study" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_cost_tables_tuned_values_wrap_at_80_columns_never_cut():
    """The one column a terminal table wraps: what each method was tuned to, every value of it whole."""
    import io

    from rich.console import Console

    from cli.render import print_table
    from pipeline.report.tables import Table

    tuned = "beta=1.613 importance_sampling=on lr_head=0.04472 lr_backbone=0.3162 momentum=0.9"
    table = Table("Campaign c: each method's tuned configuration and its cost",
                  ["method", "tuned parameters", "trials", "epochs", "search", "seeds", "re-training"],
                  [["erm", "lr_head=0.05 lr_backbone=0.3", "8/8", "160", "1:02", "30", "3:50"],
                   ["hws", tuned, "8/8", "160", "1:10", "30", "4:02"]])
    console = Console(file=io.StringIO(), width=80, color_system=None)
    print_table(table, console)
    out = console.file.getvalue()
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in out, out
    assert set(tuned.split()) <= set(out.split()), out  # every tuned value whole
    assert sum(1 for line in lines if "hws" in line) == 1 and "1:10" in out  # the other columns stay
