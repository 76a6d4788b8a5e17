"""Pictures and the HTML report from a real 6-trial digits study: real Ax, real PyTorch, real SQLite."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from pipeline.report.plots import draw, load_studies
from pipeline.report.study_tables import compare_table
from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from conftest import texts_off_canvas
from helpers import one_line, add_study, digest, rare_class_run, study_file

# Three searched parameters: a log range, a linear range and a choice, so every kind of map is drawn.
HWS = ('epochs = 1\nmomentum = 0.0\nbeta = { low = 0.1, high = 1000, log = true }\n'
       'lr_head = { low = 0.01, high = 0.1 }\nimportance_sampling = { values = [false, true] }')
NAME = "six"
EXPECTED = {f"{NAME}-{kind}.png" for kind in ("trace", "map-lr_head-beta", "map-beta-importance_sampling",
                                              "map-lr_head-importance_sampling", "curves", "per-class")}


@pytest.fixture(scope="module")
def study_db(tmp_path_factory) -> Path:
    """A real 6-trial hws study on the digits (3 Sobol trials, then the GP), 1 epoch per trial."""
    folder = tmp_path_factory.mktemp("pictures")
    path = study_file(folder, name=NAME, method="hws", params=HWS, trials=6)
    path.write_text(path.read_text().replace("initial = 2", "initial = 3"))
    db = folder / "six.db"
    run_study(load_study(path), str(db), "cpu", log_file=folder / "ax.log")
    return db


@pytest.fixture(scope="module")
def pictures(study_db):
    return {p.file_name: p for p in draw(load_studies(Store(str(study_db), create=False), None,
                                                      study_db.parent / "ax.log"))}


def test_report_plots_writes_every_picture_as_a_png_and_changes_nothing_stored(study_db, cli, tmp_path):
    before = digest(study_db)
    code, out, err = cli("report", "--db", str(study_db), "--plots", str(tmp_path / "pictures"),
                         "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    assert "wrote 6 pictures" in err and "INFO" not in err and "Warning" not in err  # Ax kept to its log
    assert {p.name for p in (tmp_path / "pictures").iterdir()} == EXPECTED
    for png in (tmp_path / "pictures").iterdir():
        with Image.open(png) as image:
            assert image.format == "PNG" and image.width > 100
            image.verify()
    assert digest(study_db) == before  # reading Ax's records and fitting its model wrote nothing

    code, _, err = cli("report", "--db", str(study_db), "--plots", str(tmp_path / "pictures"))
    assert code == 2 and "already exists; pass --force" in one_line(err)
    code, _, err = cli("report", "--db", str(study_db), "--plots", str(tmp_path / "pictures"), "--force",
                       "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "pictures").iterdir()) == sorted(EXPECTED)  # no temporary left
    assert digest(study_db) == before


def test_the_trace_plots_the_stored_objectives_in_trial_order(study_db, pictures):
    study = Store(str(study_db), create=False).study(NAME)
    trials = Store(str(study_db), create=False).trials(study.id)
    completed = [t for t in trials if t.status == "completed"]
    trace = pictures[f"{NAME}-trace.png"]
    (line,) = [line for line in trace.figure.axes[0].lines if line.get_gid() == f"objective:{NAME}"]
    assert list(line.get_xdata()) == [t.trial_index for t in completed]
    assert list(line.get_ydata()) == [100 * t.metrics["val_accuracy"] for t in completed]
    assert trace.data["failed"] == [t.trial_index for t in trials if t.status == "failed"]
    assert trace.data["best_so_far"][-1] == max(line.get_ydata())


def test_a_map_passes_through_the_models_prediction_at_the_best_trial(study_db, pictures, tmp_path):
    from pipeline.store import best_trial
    from pipeline.search.surrogate import load_study_model

    store = Store(str(study_db), create=False)
    best = best_trial(store.study(NAME), store.trials(store.study(NAME).id))
    (mean,), (se,) = load_study_model(NAME, store.url, "val_accuracy").predict([best.parameters])
    for name in EXPECTED - {f"{NAME}-{k}.png" for k in ("trace", "curves", "per-class")}:
        data = pictures[name].data
        at = data["mean"][data["y_values"].index(best.parameters[data["y"]])][
            data["x_values"].index(best.parameters[data["x"]])]
        assert at == pytest.approx(100 * mean, abs=0.5), name
        assert min(min(row) for row in data["se"]) >= 0
    # the GP was fitted on the stored results: near the best trial's own objective, not far off
    assert abs(mean - best.metrics["val_accuracy"]) < 0.25


def test_the_html_report_holds_every_table_and_one_embedded_image_per_picture(study_db, cli, tmp_path):
    page = tmp_path / "report.html"
    code, _, err = cli("report", "--db", str(study_db), "--out", str(page), "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err  # the format comes from the extension
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("<table") == 3  # best, pick, trials
    # 6 trials are too few for parameter importance: one sentence says so, not a table of headers without rows
    assert "Which parameters mattered: share of the objective&#x27;s variance each explains</strong>: none to show. " \
           f"{NAME}: no importance: 6 completed trial(s); it needs at least 8" in text
    assert "Best combination of hyper-parameters" in text and f"Trials of {NAME}" in text
    assert "<caption>The best observed trial and the model&#x27;s pick</caption>" in text
    assert text.count("data:image/png;base64,") == len(EXPECTED)
    assert "http" not in text and "src=\"" not in text.replace('src="data:image/png', "")


def test_out_whose_extension_names_another_format_is_refused(study_db, cli, tmp_path):
    code, out, err = cli("report", "--db", str(study_db), "--out", str(tmp_path / "x.csv"), "--format", "markdown")
    assert code == 2 and "names a csv file but --format is markdown" in one_line(err) and out == ""
    assert list(tmp_path.iterdir()) == []
    code, _, err = cli("report", "--db", str(study_db), "--out", str(tmp_path / "x.md"))
    assert code == 0 and (tmp_path / "x.md").read_text().startswith("**Best combination")


def test_a_study_name_unsafe_in_file_names_gets_a_safe_file_name_and_a_scatter_without_a_model(cli, tmp_path):
    db = tmp_path / "odd.db"
    add_study(Store(str(db)), "../odd name:1", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.75)),
                                                      ({"alpha": 0.3, "T": 5, "eta": 1.7}, None)])
    folder = tmp_path / "pictures"
    code, _, err = cli("report", "--db", str(db), "--plots", str(folder), "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    names = {p.name for p in folder.iterdir()}
    assert names == {f"odd_name_1-{kind}.png" for kind in ("trace", "map-alpha-T", "map-alpha-eta", "map-T-eta",
                                                            "curves", "per-class")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ax.log", "odd.db", "pictures"]  # nothing outside


def test_no_text_leaves_the_canvas_of_any_picture_of_a_real_study_and_every_text_reads_on_a_phone(pictures):
    """No text cut at a picture's edge; at SAVE_DPI none is under MIN_FONT points (10 px; 9 px on a page that shows it
    at nine tenths), and no legend of an axes covers its plot (the Gaussian process's covered its curves)."""
    from matplotlib.text import Text

    from pipeline.report.plots import MIN_FONT

    assert len(pictures) == len(EXPECTED)
    assert [off for p in pictures.values() for off in texts_off_canvas(p)] == []  # each drawn as saved
    for picture in pictures.values():
        figure = picture.figure
        renderer = figure.canvas.get_renderer()
        small = [t.get_text() for t in figure.findobj(Text)
                 if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_FONT]
        assert small == [], (picture.file_name, small)
        for axes in figure.axes:
            legend = axes.get_legend()
            if legend is not None:
                assert not legend.get_window_extent(renderer).overlaps(axes.get_window_extent(renderer)), \
                    picture.file_name


def test_a_study_without_a_model_says_why_inside_its_pictures_however_long_its_name(tmp_path):
    """Fewer completed trials than a model needs: each map is the trials and a long note, wrapped in the picture;
    a long study name wraps too, and the trace of two studies of one data set keeps its legend inside."""
    store = Store(str(tmp_path / "few.db"))
    long = "a-study-whose-name-is-long-enough-to-run-off-the-picture-" * 2
    add_study(store, long, runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.75)),
                                 ({"alpha": 0.3, "T": 5, "eta": 1.7}, (0.82, 0.7))])
    add_study(store, "short", runs=[({"alpha": 0.2, "T": 4, "eta": 1.9}, None)])
    pictures = draw(load_studies(store, None, tmp_path / "ax.log"))
    notes = [p for p in pictures if p.kind.startswith("map-")]
    assert notes and all("a model needs 3" in p.data["note"] for p in notes)
    assert {"trace", "curves", "per-class"} <= {p.kind for p in pictures} and "digits-trace.png" in {
        p.file_name for p in pictures}
    assert [off for p in pictures for off in texts_off_canvas(p)] == []
    title = notes[0].figure.axes[0].get_title()
    assert "a model needs 3" in title.replace("\n", " ") and title.count("\n") >= 2  # wrapped, not cut


def test_studies_of_one_data_set_also_share_one_trace_with_a_line_each(tmp_path):
    store = Store(str(tmp_path / "two.db"))
    add_study(store, "r18", backbone="resnet18", runs=[({"alpha": 0.1, "T": 3, "eta": 2.0}, (0.8, 0.7)),
                                                       ({"alpha": 0.2, "T": 4, "eta": 2.1}, (0.85, 0.7))])
    add_study(store, "r50", backbone="resnet50", runs=[({"alpha": 0.3, "T": 5, "eta": 1.9}, (0.75, 0.7))])
    shared = [p for p in draw(load_studies(store, None, tmp_path / "ax.log")) if p.file_name == "digits-trace.png"]
    (trace,) = shared
    lines = {line.get_gid(): list(line.get_ydata()) for line in trace.figure.axes[0].lines if line.get_gid()}
    assert lines == {"objective:r18": [80.0, 85.0], "objective:r50": [75.0]}


def test_a_refused_out_draws_nothing_and_the_default_log_goes_nowhere(study_db, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a default runs/robust-tune.log would appear
    (tmp_path / "report.md").write_text("the user's own notes\n")
    code, _, err = cli("report", "--db", str(study_db), "--plots", "pictures", "--out", "report.md")
    assert code == 2 and "already exists" in one_line(err)
    assert not (tmp_path / "pictures").exists() or not any((tmp_path / "pictures").iterdir())
    assert (tmp_path / "report.md").read_text() == "the user's own notes\n"
    (tmp_path / "pictures").mkdir(exist_ok=True)
    code, _, err = cli("report", "--db", str(study_db), "--plots", "pictures")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pictures", "report.md"]  # no runs/ folder, no log


def test_an_evaluated_study_gets_a_comparison_with_the_compare_tables_numbers(study_db, tmp_path):
    db = tmp_path / "evaluated.db"
    shutil.copy(study_db, db)
    store = Store(str(db))
    study = store.study(NAME)
    counts = {str(c): 100 for c in range(10)} | {"3": 5}
    for variant, accuracies in (("tuned", (0.90, 0.92, 0.94)), ("erm", (0.85, 0.86, 0.90))):
        for seed, accuracy in enumerate(accuracies):
            result = rare_class_run(accuracy, accuracy / 3, variant, balanced=accuracy)
            store.add_evaluation(study.id, variant, seed, 0, {}, result, counts)
    pictures = draw(load_studies(Store(str(db), create=False), [NAME], tmp_path / "ax.log"))
    (compare,) = [p for p in pictures if p.kind == "compare"]
    assert compare.file_name == f"{NAME}-compare.png" and compare.png.startswith(b"\x89PNG")
    rows = compare_table(Store(str(db), create=False), [NAME]).records
    assert compare.data["variants"] == ["tuned", "erm"] == [r["variant"] for r in rows]
    for (mean, half), row in zip(compare.data["test_accuracy"], rows):
        assert mean == pytest.approx(100 * row["metrics"]["test_accuracy"]["mean"])
        assert half == pytest.approx(100 * row["metrics"]["test_accuracy"]["half_width"])
    assert compare.data["smallest_class_accuracy"][0][0] == pytest.approx(100 * 0.92 / 3)
    assert not [p for p in draw(load_studies(Store(str(study_db), create=False), [NAME], tmp_path / "ax.log"))
                if p.kind == "compare"]  # no evaluations, no comparison


def test_plots_from_a_missing_database_is_one_line_and_creates_nothing(cli, tmp_path):
    code, _, err = cli("report", "--db", str(tmp_path / "none.db"), "--plots", str(tmp_path / "pictures"))
    assert code == 2 and "no database" in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_report_without_pictures_never_imports_matplotlib(study_db):
    probe = ("import sys\nfrom cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    code = e.code\nprint(code, sorted(m for m in ('matplotlib', 'torch', 'ax') if m in sys.modules),"
             " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, "report", "--all-trials", "--db", str(study_db)],
                          capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines()[-1] == "0 []", done.stderr


LONG_NAMES = ("tshirt_or_top_garment", "trouser_long_leg", "pullover_sweater", "dress_full_length",
              "winter_coat_heavy", "summer_sandal_open", "shirt_button_down", "running_sneaker", "shopping_bag",
              "ankle_boot")
LONG_STUDY = """name = "long"
objective = "val_balanced_accuracy"
[data]
name = "images"
root = "{root}"
image_size = 8
cache_dir = ""
[model]
backbone = "small_cnn"
weights = "none"
[method]
name = "hws"
[params]
epochs = 1
beta = {{ low = 0.1, high = 100, log = true }}
lr_head = {{ low = 0.01, high = 0.3, log = true }}
[budget]
trials = 3
initial = 3
"""


def test_a_real_study_of_ten_long_class_names_draws_pictures_whose_texts_never_overlap(cli, tmp_path):
    """Ten classes of long names, trained for real (1 epoch, 8-pixel images), evaluated on 2 seeds without a
    baseline: no two texts of any picture overlap, the per-class picture's title names the worst class drawn in
    red, and the comparison says it has no baseline and keeps its intervals inside [0, 100]."""
    from conftest import overlapping_texts
    from helpers import write_folder

    write_folder(tmp_path / "images", classes=LONG_NAMES, per_class=5, side=8)
    (tmp_path / "long.toml").write_text(LONG_STUDY.format(root=tmp_path / "images"))
    db, log = str(tmp_path / "long.db"), str(tmp_path / "ax.log")
    for command in (["run", str(tmp_path / "long.toml")], ["evaluate", "long", "--seeds", "2"]):
        code, _, err = cli(*command, "--db", db, "--device", "cpu", "--log-file", log)
        assert code == 0, err
    pictures = {p.kind: p for p in draw(load_studies(Store(db, create=False), None, log))}
    assert {"trace", "per-class", "compare", "map-lr_head-beta"} <= set(pictures)
    assert [found for p in pictures.values() for found in overlapping_texts(p) + texts_off_canvas(p)] == []
    per_class = pictures["per-class"]
    assert [t.get_text() for t in per_class.figure.axes[0].get_yticklabels()] == list(per_class.data["classes"])
    worst = per_class.data["worst"]
    title = per_class.figure.axes[0].get_title().replace("\n", " ")
    assert "worst in red: " + (worst[0] if len(worst) == 1 else f"{len(worst)} classes") in title
    red = [bar.get_y() + bar.get_height() / 2 for bar in per_class.figure.axes[0].patches
           if bar.get_facecolor()[:3] == (0.8392156862745098, 0.15294117647058825, 0.1568627450980392)]
    zero = [line for line in per_class.figure.axes[0].lines if line.get_marker() == ">"]
    shown = set(red) | {y for line in zero for y in line.get_ydata()}  # a red bar, or at 0% a red marker
    assert shown == {per_class.data["classes"].index(name) for name in worst}
    compare = pictures["compare"]
    suptitle = " ".join(compare.figure.get_suptitle().split())
    assert "no baseline evaluated" in suptitle and "against" not in suptitle
    assert all(0 <= low <= high <= 100 for key in ("test_accuracy", "smallest_class_accuracy")
               for low, high in compare.data[f"{key}_interval"])
    assert compare.caption.startswith("long's best configuration re-trained on 2 seeds:")
