"""The bad-input battery: malformed study and campaign fields and bad options across every command, each
refused in one line naming the problem, exit code 2, with the database's bytes and the folder's listing
unchanged. Run in this process (the refusals come before any training), so the whole battery takes seconds."""
from pathlib import Path

import pytest

from pipeline.store import Store
from helpers import ROOT, STUDIES, add_study, one_line, snapshot

QUICKSTART = (STUDIES / "quickstart.toml").read_text()
CAMPAIGN = (STUDIES / "digits-campaign.toml").read_text()

# (id, (text to replace, replacement) in the quickstart study file, a word the error line must hold)
STUDY_FIELDS = [
    ("empty-name", ('name = "quickstart"', 'name = ""'), "name"),
    ("unknown-objective", ('objective = "val_balanced_accuracy"', 'objective = "val_nope"'), "objective"),
    ("seed-text", ("seed = 0 ", 'seed = "zero" '), "seed"),
    ("search-seed-float", ("search_seed = 0", "search_seed = 1.5"), "search_seed"),
    ("threads-zero", ("[data]", "threads = 0\n\n[data]"), "threads"),
    ("unknown-dataset", ('name = "digits"', 'name = "nope"'), "nope"),
    ("unknown-rare-class", ('imbalance_class = "3"', 'imbalance_class = "11"'), "11"),
    ("keep-above-one", ("imbalance_keep = 0.05", "imbalance_keep = 1.5"), "imbalance_keep"),
    ("imbalance-in", ('imbalance_in = "train"', 'imbalance_in = "both"'), "imbalance_in"),
    ("unknown-backbone", ('backbone = "small_cnn"', 'backbone = "vgg"'), "vgg"),
    ("missing-weights", ('weights = "none"', 'weights = "no/such/weights.pt"'), "weights.pt"),
    ("unknown-method", ('name = "hws"', 'name = "nope"'), "nope"),
    ("bounds-reversed", ("beta = { low = 0.1, high = 1000, log = true }",
                         "beta = { low = 1000, high = 0.1, log = true }"), "beta"),
    ("log-of-negative", ("beta = { low = 0.1, high = 1000, log = true }",
                         "beta = { low = -1, high = 1000, log = true }"), "beta"),
    ("parameter-it-lacks", ("epochs = 20", "epochs = 20\nalpha = 0.1"), "alpha"),
    ("no-choice-values", ("importance_sampling = { values = [false, true] }",
                          "importance_sampling = { values = [] }"), "importance_sampling"),
    ("zero-epochs", ("epochs = 20", "epochs = 0"), "epochs"),
    ("epochs-text", ("epochs = 20", 'epochs = "many"'), "epochs"),
    ("negative-lr", ("lr_head = 0.05", "lr_head = -0.1"), "lr_head"),
    ("zero-trials", ("trials = 8", "trials = 0"), "trials"),
    ("huge-trials", ("trials = 8", "trials = 100000000000000000000"), "trials"),
    ("zero-initial", ("initial = 4", "initial = 0"), "initial"),
    ("zero-max-failures", ("initial = 4", "initial = 4\nmax_failures = 0"), "max_failures"),
    ("zero-seeds-per-trial", ("initial = 4", "initial = 4\nseeds_per_trial = 0"), "seeds_per_trial"),
    ("unknown-strategy", ("[budget]", '[search]\nstrategy = "grid"\n\n[budget]'), "grid"),
    ("widen-text", ("[budget]", '[search]\nwiden = "yes"\n\n[budget]'), "widen"),
    ("range-widen-number", ("beta = { low = 0.1, high = 1000, log = true }",
                            "beta = { low = 0.1, high = 1000, log = true, widen = 1 }"), "widen"),
    ("negative-widen-trials", ("initial = 4", "initial = 4\nwiden_trials = -1"), "widen_trials"),
    ("objective-and-objectives", ("seed = 0 ", 'objectives = ["val_accuracy", "val_worst_class_accuracy"]\nseed = 0 '),
     "objective"),
    ("constraint-unknown-metric", ("seed = 0 ", 'constraints = ["val_nope >= 0.3"]\nseed = 0 '), "val_nope"),
    ("constraint-out-of-range", ("seed = 0 ", 'constraints = ["val_accuracy >= 3"]\nseed = 0 '), "constraint"),
    ("malformed-toml", ('name = "quickstart"', "name = "), "TOML"),
    ("unknown-key", ("seed = 0 ", "colour = 1\nseed = 0 "), "colour"),
    ("unknown-table", ("[budget]", "[budgett]\ntrials = 3\n\n[budget]"), "budgett"),
    ("folder-missing", ('name = "digits"', 'name = "images"\nroot = "no/such/folder"'), "no/such/folder"),
]

CAMPAIGN_FIELDS = [
    ("campaign-unknown-method", ('methods = ["erm", "ls", "hws", "cb", "groupdro"]', 'methods = ["erm", "nope"]'),
     "nope"),
    ("campaign-method-twice", ('methods = ["erm", "ls", "hws", "cb", "groupdro"]', 'methods = ["erm", "ls", "ls"]'),
     "ls"),
    ("campaign-table-for-absent-method",
     ('methods = ["erm", "ls", "hws", "cb", "groupdro"]', 'methods = ["erm", "ls"]'), "hws"),
    ("campaign-zero-seeds", ("seeds = 5 ", "seeds = 0 "), "seeds"),
    ("campaign-pick", ("seeds = 5 ", 'pick = "lucky"\nseeds = 5 '), "pick"),
    ("campaign-unknown-primary", ('primary = ["test_balanced_accuracy", "smallest_class_accuracy"]',
                                  'primary = ["test_nope"]'), "test_nope"),
    ("campaign-zero-smallest-effect", ("{ test_balanced_accuracy = 1,", "{ test_balanced_accuracy = 0,"),
     "smallest_effect"),
    ("campaign-negative-minutes", ("seeds = 5 ", "max_minutes = -3\nseeds = 5 "), "max_minutes"),
]

# (id, the command's arguments after the program name; DB and FOLDER are replaced, a word the line must hold)
OPTIONS = [
    ("run-missing-file", ["run", "FOLDER/none.toml"], "none.toml"),
    ("run-trials-zero", ["run", "STUDY", "--trials", "0"], "trials"),
    ("run-workers-zero", ["run", "STUDY", "--workers", "0"], "workers"),
    ("run-workers-huge", ["run", "STUDY", "--workers", "100000"], "workers"),
    ("run-device", ["run", "STUDY", "--device", "tpu"], "tpu"),
    ("run-precision", ["run", "STUDY", "--precision", "fp8"], "fp8"),
    ("run-threads-zero", ["run", "STUDY", "--threads", "0"], "threads"),
    ("run-set-not-a-number", ["run", "STUDY", "--set", "budget.trials=abc"], "trials"),
    ("run-set-no-equals", ["run", "STUDY", "--set", "nonsense"], "nonsense"),
    ("run-set-unknown-field", ["run", "STUDY", "--set", "budget.nope=1"], "nope"),
    ("run-db-in-memory", ["run", "STUDY", "--db", "sqlite://"], "sqlite"),
    ("run-db-no-dialect", ["run", "STUDY", "--db", "://"], "://"),
    ("run-db-under-a-file", ["run", "STUDY", "--db", "FOLDER/quickstart.toml/x.db"], "quickstart.toml"),
    ("run-log-under-a-file", ["run", "STUDY", "--log-file", "FOLDER/quickstart.toml/x.log"], "quickstart.toml"),
    ("report-unknown-study", ["report", "nope"], "nope"),
    ("report-format", ["report", "--format", "docx"], "docx"),
    ("report-out-extension", ["report", "--out", "FOLDER/x.docx"], "docx"),
    ("report-out-database", ["report", "--out", "DB"], "x.db"),
    ("report-missing-database", ["report", "--db", "FOLDER/none.db"], "none.db"),
    ("report-unknown-verdict", ["report", "--verdict", "nope"], "nope"),
    ("studies-missing-database", ["studies", "--db", "FOLDER/none.db"], "none.db"),
    ("best-unknown-study", ["best", "nope"], "nope"),
    ("best-unknown-trial", ["best", "s", "--trial", "99"], "99"),
    ("best-format", ["best", "s", "--format", "yaml"], "yaml"),
    ("train-unknown-method", ["train", "--method", "nope"], "nope"),
    ("train-parameter-text", ["train", "--method", "ls", "-p", "alpha=abc"], "alpha"),
    ("train-unknown-parameter", ["train", "--method", "ls", "-p", "nope=1"], "nope"),
    ("train-unknown-dataset", ["train", "--dataset", "nope"], "nope"),
    ("train-from-unknown-study", ["train", "--from-study", "nope"], "nope"),
    ("train-study-file-missing", ["train", "--study-file", "FOLDER/none.toml"], "none.toml"),
    ("train-study-file-searches", ["train", "--study-file", "STUDY"], "is searched"),
    ("train-study-and-from-study", ["train", "--study-file", "STUDY", "--from-study", "s"], "give one"),
    ("compare-malformed-set", ["compare", "campaign.toml", "--set", "budget"], "malformed"),
    ("evaluate-unknown-study", ["evaluate", "nope"], "nope"),
    ("evaluate-zero-seeds", ["evaluate", "s", "--seeds", "0"], "seeds"),
    ("evaluate-huge-seeds", ["evaluate", "s", "--seeds", "100000"], "seeds"),
    ("evaluate-unknown-baseline", ["evaluate", "s", "--against", "nope"], "nope"),
    ("evaluate-value-twice", ["evaluate", "s", "--vary", "alpha=0.1,0.1"], "alpha"),
    ("evaluate-pick", ["evaluate", "s", "--pick", "lucky"], "lucky"),
    ("delete-unknown-study", ["studies", "delete", "nope", "--yes"], "nope"),
    ("compare-missing-file", ["compare", "FOLDER/none.toml"], "none.toml"),
    ("bench-unknown-problem", ["bench", "search", "--problem", "nope"], "nope"),
    ("bench-initial-above-trials", ["bench", "search", "--trials", "5", "--initial", "9"], "initial"),
    ("bench-unknown-setting", ["bench", "steps", "--setting", "nope"], "nope"),
    ("bench-unknown-subcommand", ["bench", "nope"], "nope"),
    ("bench-option-of-another", ["bench", "search", "--rounds", "2"], "--rounds"),
    ("bench-old-flag-refused-input", ["bench", "--search", "--problem", "nope"], "robust-tune bench search"),
    ("bench-two-old-flags", ["bench", "--search", "--prefixes"], "bench --search is now"),
    ("bench-parallel-no-workers", ["bench", "parallel", "--workers", "0"], "--workers must be 1 or more"),
    ("option-with-markup", ["studies", "--x[/]"], "No such option: --x[/]"),  # shown as typed, never as markup
    ("option-with-a-style", ["report", "--bogus[red]x"], "--bogus[red]x"),
]


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A folder holding a database with one stored study (`s`), the quickstart study file and the digits campaign
    file; the commands run from inside it, so a default path (runs/) would show in its listing."""
    add_study(Store(str(tmp_path / "x.db")), "s", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.75))])
    (tmp_path / "quickstart.toml").write_text(QUICKSTART)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused_cleanly(cli, folder: Path, args: list[str], word: str) -> None:
    """`args` exits 2 with one line holding `word`, no traceback, and the folder as it was, byte for byte."""
    before = snapshot(folder)
    code, out, err = cli(*args)
    assert code == 2, (args, code, out, err)
    assert word.lower() in one_line(err).lower(), (word, err)
    assert snapshot(folder) == before, args


@pytest.mark.parametrize("old, new, word", [case[1] + (case[2],) for case in STUDY_FIELDS],
                         ids=[case[0] for case in STUDY_FIELDS])
def test_a_malformed_study_field_is_one_line_and_changes_nothing(cli, folder, old, new, word):
    assert old in QUICKSTART
    (folder / "bad.toml").write_text(QUICKSTART.replace(old, new, 1))
    refused_cleanly(cli, folder, ["run", "bad.toml", "--db", str(folder / "x.db"), "--device", "cpu"], word)


@pytest.mark.parametrize("old, new, word", [case[1] + (case[2],) for case in CAMPAIGN_FIELDS],
                         ids=[case[0] for case in CAMPAIGN_FIELDS])
def test_a_malformed_campaign_field_is_one_line_and_changes_nothing(cli, folder, old, new, word):
    assert old in CAMPAIGN
    (folder / "bad.toml").write_text(CAMPAIGN.replace(old, new, 1))
    refused_cleanly(cli, folder, ["compare", "bad.toml", "--db", str(folder / "x.db")], word)


@pytest.mark.parametrize("args, word", [case[1:] for case in OPTIONS], ids=[case[0] for case in OPTIONS])
def test_a_bad_option_is_one_line_and_changes_nothing(cli, folder, args, word):
    db = str(folder / "x.db")
    args = [a.replace("FOLDER", str(folder)).replace("DB", db).replace("STUDY", "quickstart.toml") for a in args]
    if args[0] in ("run", "report", "best", "evaluate", "studies", "compare", "train") and "--db" not in args \
            and not (args[0] == "train" and "--from-study" not in args):
        args += ["--db", db]
    refused_cleanly(cli, folder, args, word)


def test_the_battery_holds_at_least_sixty_cases_and_the_docs_say_how_many():
    total = len(STUDY_FIELDS) + len(CAMPAIGN_FIELDS) + len(OPTIONS)
    assert total >= 60
    text = " ".join((ROOT / "docs" / "guide" / "database.md").read_text().split())
    assert (f"drives {total} malformed inputs through the commands ({len(STUDY_FIELDS)} study-file fields, "
            f"{len(CAMPAIGN_FIELDS)} campaign fields, {len(OPTIONS)} bad options of") in text
    assert f"all {total} give one line" in text
