"""Parameter importance and the complete HTML page: a study stored through the tool's own loop (real Ax, its real
GP, real SQLite) whose trials return synthetic results, so no training is needed to know which parameter matters."""
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from pipeline.search.trial import InProcessRunner, Outcome, run_trial
from pipeline.training.result import RunResult
from helpers import CHROMIUM, in_a_window, parsed, rendered, study_file

# Three searched parameters of three kinds (a log range, a linear range, a choice); the objective depends on lr_head.
SEARCH = ('epochs = 1\nmomentum = 0.0\nbeta = { low = 0.1, high = 1000, log = true }\n'
          'lr_head = { low = 0.01, high = 0.1 }\nimportance_sampling = { values = [false, true] }')
NAME = "onlylr"


class SyntheticRunner(InProcessRunner):
    """Trials that end at once with a real trial's result whose accuracies depend on lr_head alone; the trials in
    `collapsed` end at 5% instead, whatever their parameters."""

    def __init__(self, template: RunResult, collapsed: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.template, self.collapsed = template, collapsed

    def wait(self, on_event):
        job, self.queued = self.queued, None
        accuracy = 0.3 + 6.0 * job.parameters["lr_head"]  # 36% to 90%, nothing else matters
        if job.trial_index in self.collapsed:
            accuracy = 0.25
        test = replace(self.template.test, accuracy=accuracy - 0.02, worst_class_accuracy=accuracy - 0.2)
        result = replace(self.template, val=replace(self.template.val, accuracy=accuracy), test=test)
        return [Outcome(job.trial_index, result=result)]


@pytest.fixture(scope="module")
def synthetic_db(tmp_path_factory) -> Path:
    """`onlylr` (10 completed trials, all Sobol), `few` (4 trials, below importance's minimum) and `collapsed` (as
    onlylr, trial 6 collapsed), stored by the study loop; one real 1-epoch digits trial gives their results' shape."""
    folder = tmp_path_factory.mktemp("importance")
    db = folder / "runs.db"
    template = None
    for name, trials, collapsed in ((NAME, 10, ()), ("few", 4, ()), ("collapsed", 10, (6,))):
        path = study_file(folder, name=name, method="hws", params=SEARCH, trials=trials)
        path.write_text(path.read_text().replace("initial = 2", f"initial = {trials}"))
        study = load_study(path)
        template = template or run_trial(study, {"beta": 1.0, "lr_head": 0.05, "importance_sampling": False}, 0, "cpu")
        run_study(study, str(db), "cpu", log_file=folder / "ax.log", runner=SyntheticRunner(template, collapsed))
    return db


def test_importance_ranks_the_one_parameter_the_objective_depends_on_first(synthetic_db, cli):
    store = Store(str(synthetic_db), create=False)
    stored = store.importance(store.study(NAME).id)
    assert stored.fitted_on == 10 and stored.objective == "val_accuracy"
    first, *others = stored.parameters
    assert first.name == "lr_head" and first.low > 0.5 and first.share > 0.8
    assert {p.name for p in others} == {"beta", "importance_sampling"} and all(p.share < 0.1 for p in others)
    assert all(0 <= p.low <= p.share <= p.high <= 1 for p in stored.parameters)

    code, out, err = cli("report", "--db", str(synthetic_db), "--format", "json")
    assert code == 0, err
    importance = next(t for t in json.loads(out) if t["title"].startswith("Which parameters mattered"))
    assert [r["parameter"] for r in importance["rows"] if r["study"] == NAME][0] == "lr_head"
    assert not [r for r in importance["rows"] if r["study"] == "few"]  # refused, with its note:
    assert any(n.startswith("few: no importance: 4 completed trial(s); it needs at least 8")
               for n in importance["notes"])
    code, out, err = cli("report", "--db", str(synthetic_db))
    assert code == 0 and "Which parameters mattered" in out and "lr_head" in out


def test_a_report_never_imports_torch_to_show_importance(synthetic_db):
    code = ("import sys; from cli.main import main\ntry: main(['report', '--db', sys.argv[1]])\n"
            "except SystemExit as e: assert not e.code, e.code\nassert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code, str(synthetic_db)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lr_head" in done.stdout


@pytest.fixture(scope="module")
def page(synthetic_db, tmp_path_factory) -> Path:
    """`report --format html` of the synthetic studies, `onlylr` evaluated on 2 seeds against ERM first."""
    from cli.main import main

    folder = tmp_path_factory.mktemp("page")
    db = folder / "runs.db"
    shutil.copy(synthetic_db, db)
    for command in (["evaluate", NAME, "--seeds", "2", "--device", "cpu"], ["report", "--format", "html", "--out",
                                                                          str(folder / "report.html")]):
        with pytest.raises(SystemExit) as done:
            main([*command, "--db", str(db), "--log-file", str(folder / "ax.log")])
        assert done.value.code in (0, None)
    return folder / "report.html"


PAGE_TABLES = ("Best combination of hyper-parameters", "The best observed trial and the model's pick",
               "Which parameters mattered", "Evaluation over seeds", f"Trials of {NAME} ", "Trials of few ",
               "Trials of collapsed ")


def test_the_html_page_holds_every_table_and_picture_with_its_contents(page):
    found = parsed(page.read_text())
    for title in PAGE_TABLES:
        assert any(c.startswith(title) for c in found["captions"]), title
    assert {link[1:] for link in found["links"]} <= found["ids"] and len(found["links"]) >= len(PAGE_TABLES) + 2
    assert {f"picture-{NAME}-importance", f"picture-{NAME}-trace", f"picture-{NAME}-compare",
            f"picture-{NAME}-per-class", "picture-few-trace"} <= found["ids"]
    alts = [image["alt"] for image in found["images"]]  # a sentence saying what each shows, not a file name
    assert all(alt.endswith(".") and ".png" not in alt and len(alt.split()) >= 10 for alt in alts), alts
    assert all(image["src"].startswith("data:image/png;base64,") for image in found["images"])  # nothing fetched
    text = page.read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert re.search(r"Drawn by robust-tune [\w.+-]+ on \d{4}-\d\d-\d\d \d\d:\d\d UTC from the database sqlite:///"
                     r"\S*runs\.db\.", text)
    seeds = re.search(r"<details><summary>Each seed&#x27;s values \(2 runs\)</summary>(.*?)</details>", text, re.S)
    assert seeds and seeds.group(1).count("<tr><td>onlylr</td><td>tuned</td>") == 2  # seeds 0 and 1


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; "
                                             ".ci/run installs it)")
def test_the_html_page_renders_in_chromium_every_image_decoded_every_table_there(page, tmp_path):
    dom = rendered(page, tmp_path)
    assert int(dom["body"]["data-images"]) == len(dom["images"]) == len(parsed(page.read_text())["images"]) >= 10
    assert all(int(image["data-decoded"]) > 100 for image in dom["images"]), [
        image["alt"] for image in dom["images"] if int(image["data-decoded"]) <= 100]
    for title in PAGE_TABLES:
        assert any(c.startswith(title) for c in dom["captions"]), title
    broken = tmp_path / "broken.html"  # the check itself: an image that does not decode reads 0
    broken.write_text(page.read_text().replace("data:image/png;base64,iVBOR", "data:image/png;base64,AAAA", 1))
    assert sorted(int(image["data-decoded"]) for image in rendered(broken, tmp_path)["images"])[0] == 0


def test_the_map_marks_a_trial_the_model_does_not_believe():
    """A smooth hill over x measured at 12 points, one far from the top measured high by luck: the study's GP smooths
    it over, and the map marks it as a trial the model does not believe, the one it disbelieves most, while the
    trials on the hill's top are not marked. z is searched but the same in every trial, so the model cannot
    explain the lucky trial by it."""
    import numpy as np
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from pipeline.config import DataConfig
    from pipeline.params import Range
    from pipeline.report.plots import StudyData, disagreements, map_pictures
    from pipeline.store import StudyRecord, TrialRecord
    from pipeline.spec.study_config import StudyConfig
    from pipeline.search.surrogate import fit_gp

    client = Client(random_seed=0)
    client.configure_experiment(parameters=[RangeParameterConfig(name=n, bounds=(0.0, 1.0), parameter_type="float")
                                            for n in ("x", "z")])
    client.configure_optimization(objective="val_accuracy")
    xs, zs = np.linspace(0.0, 1.0, 12), np.full(12, 0.5)
    values = 0.8 - 0.8 * (xs - 0.6) ** 2 + np.random.default_rng(1).normal(0, 0.005, 12)
    values[1] = 0.83  # x = 0.09, truly about 0.59
    trials = []
    for i, (x, z, value) in enumerate(zip(xs, zs, values)):
        client.attach_trial(parameters={"x": float(x), "z": float(z)})
        client.complete_trial(trial_index=i, raw_data={"val_accuracy": float(value)})
        trials.append(TrialRecord(i, i, "completed", {"x": float(x), "z": float(z)}, 0, {"val_accuracy": float(value)},
                                  {"test": {"0": 1.0}}, 1.0, 0.0, None))
    experiment = client._experiment
    config = StudyConfig(name="hill", data=DataConfig(name="digits"), backbone="small_cnn", weights="none",
                         method="erm", fixed={}, search={"x": Range(0.0, 1.0), "z": Range(0.0, 1.0)})
    study = StudyData(StudyRecord(1, "hill", "", config, None), trials,
                      fit_gp(experiment, experiment.lookup_data(), "val_accuracy"))
    found = disagreements(study)
    assert max(found, key=lambda d: abs(d["observed"] - d["predicted"]))["trial"] == 1
    assert found[[d["trial"] for d in found].index(1)]["predicted"] < 75  # the model does not believe 83
    assert not {d["trial"] for d in found} & set(range(3, 10))  # the hill's top: model and trials agree
    (picture,) = map_pictures(study)
    assert picture.data["disagree"] == found
    assert any("disagree" in text.get_text() for text in picture.figure.axes[0].get_legend().get_texts())


def test_each_picture_names_its_study_and_method_and_hides_nothing(page):
    """On the evaluated synthetic studies: every study's picture names the study and the method in its title; the
    classes at 0% carry a marker; the comparison names the tuned method; the trace's legend is outside the plot."""
    from pipeline.report.plots import draw, load_studies

    pictures = {p.file_name: p for p in draw(load_studies(Store(str(page.parent / "runs.db"), create=False), None,
                                                          page.parent / "ax.log"))}
    for name, picture in pictures.items():
        titles = [picture.figure.get_suptitle()] + [axes.get_title() for axes in picture.figure.axes]
        if not name.startswith("digits-"):  # the data set's trace names its studies in the legend
            assert any(picture.study in t and "hws" in t for t in titles), (name, titles)
    per_class = pictures[f"{NAME}-per-class.png"]
    zero = [i for i, value in enumerate(per_class.data["test_accuracy"]) if value < 1]
    assert zero  # the synthetic results' template has classes at 0%
    (markers,) = [line for line in per_class.figure.axes[0].lines if line.get_marker() == ">"]
    assert list(markers.get_ydata()) == zero and list(markers.get_xdata()) == [0] * len(zero)
    ticks = [t.get_text() for t in pictures[f"{NAME}-compare.png"].figure.axes[0].get_xticklabels()]
    assert any(t.startswith("tuned hws") for t in ticks), ticks
    legend = pictures[f"{NAME}-trace.png"].figure.axes[0].get_legend()
    assert legend.get_bbox_to_anchor().x0 > pictures[f"{NAME}-trace.png"].figure.axes[0].bbox.x1 - 1
    from conftest import texts_off_canvas

    assert {"importance", "compare", "trace"} <= {p.kind for p in pictures.values()}
    assert [off for p in pictures.values() for off in texts_off_canvas(p)] == []


def test_the_trace_of_nearly_equal_results_keeps_a_readable_y_axis():
    from pipeline.config import DataConfig
    from pipeline.params import Range
    from pipeline.report.plots import MIN_SPAN, StudyData, trace_pictures
    from pipeline.store import StudyRecord, TrialRecord
    from pipeline.spec.study_config import StudyConfig

    config = StudyConfig(name="flat", data=DataConfig(name="digits"), backbone="small_cnn", weights="none",
                         method="erm", fixed={}, search={"x": Range(0.0, 1.0)})
    values = [0.94032, 0.94046, 0.94040, 0.94035]
    trials = [TrialRecord(i, i, "completed", {"x": i / 4}, 0, {"val_accuracy": v}, None, 1.0, 0.0, None)
              for i, v in enumerate(values)]
    (trace,) = trace_pictures(StudyData(StudyRecord(1, "flat", "", config, None), trials))
    low, high = trace.figure.axes[0].get_ylim()
    assert high - low >= MIN_SPAN and low < 94.032 and high > 94.046
    assert "flat (erm, small_cnn)" in trace.figure.axes[0].get_title()


def test_html_tables_keep_a_number_and_its_interval_on_one_line_and_say_why_a_table_is_empty():
    from pipeline.report.html_report import html_table
    from pipeline.report.tables import Table

    table = Table("Evaluation", ["variant", "test accuracy", "difference"],
                  [["tuned hws", "92.0 ± 2.5", "[+1.0, +3.0]"], ["erm", "87.0 ± 6.5", "96.4-97.8"]])
    html = html_table(table, "table-1")
    assert html.count('<td class="number">') == 4 and "<td>tuned hws</td>" in html
    empty = Table("Which parameters mattered", ["study", "share"], [],
                  ["few: no importance: 4 completed trial(s); it needs at least 8."])
    html = html_table(empty, "table-2")
    assert "<table" not in html and "<th>" not in html and 'id="table-2"' in html
    assert "none to show. few: no importance: 4 completed trial(s); it needs at least 8." in html


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_in_a_narrow_window_chromium_keeps_every_number_of_the_page_on_one_line(page, tmp_path):
    narrow = tmp_path / "narrow.html"
    lines = ("<script>window.addEventListener('load', () => { for (const td of document.querySelectorAll('td.number'))"
             " { const r = document.createRange(); r.selectNodeContents(td); "
             "td.setAttribute('data-lines', String(r.getClientRects().length)); } });</script>")
    narrow.write_text(page.read_text().replace("</body>", lines + "</body>"))
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=480,800",
                           "--virtual-time-budget=10000", "--dump-dom", narrow.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import re
    counts = [int(n) for n in re.findall(r'data-lines="(\d+)"', done.stdout)]
    assert len(counts) >= 10 and set(counts) == {1}, counts
    assert any("±" in cell for cell in re.findall(r'<td class="number"[^>]*>([^<]*)</td>', done.stdout))


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_the_page_reads_at_480_and_at_1280_pixels_wide_tables_scrolling_in_their_own_box(page, tmp_path):
    """Nothing on the page is wider than a 480- or a 1280-pixel window: a table wider than the window scrolls in its
    own box, its caption wraps in the window. The page without those boxes is measured too, and overflows."""
    for width in (480, 1280):
        found = in_a_window(page, tmp_path, width)
        assert found["scroll"] <= found["window"] <= width and found["wide"] == [], (width, found)
    unboxed = tmp_path / "unboxed.html"
    unboxed.write_text(page.read_text().replace(".scroll{overflow-x:auto", ".scroll{overflow-x:visible"))
    found = in_a_window(unboxed, tmp_path, 480)
    assert found["scroll"] > found["window"], found


def test_a_verdict_reads_in_order_its_warnings_its_table_with_the_word_first_its_reading_then_its_legend():
    """Warnings first and plain to see, then the table (its word beside the method and metric), then the reading,
    then the legend's notes; each seed's values fold under it."""
    from pipeline.report.html_report import html_table
    from pipeline.report.tables import Table

    detail = Table("Each seed's values (2 runs)", ["variant", "seed", "test acc"], [["tuned", "0", "90.0"],
                                                                                    ["tuned", "1", "80.0"]])
    table = Table("Verdict", ["method", "metric", "mean ± 95%", "vs ERM", "P>ERM %", "verdict"],
                  [["hws", "balanced", "85.0 ± 2.0", "+1.0 [+0.5, +1.5]", "60 [40, 80]", "better"]],
                  ["Accuracies in %.", "Warning: erm never got class '3' right.",
                   "Reading: hws is better. Check before trusting it (the warnings above)."],
                  summary="Reading: hws is better. Check before trusting it (the warnings above).", detail=detail)
    html = html_table(table, "table-1")
    warning = html.index('<p class="warning">Warning: erm never got class &#x27;3&#x27; right.</p>')
    reading = html.index('<p class="summary">Reading: hws is better.')
    assert warning < html.index("<table") < reading < html.index('<p class="note">Accuracies in %.</p>')
    assert html.count("hws is better") == 1 and html.count("never got class") == 1 and 'id="table-1"' in html
    assert re.findall(r"<th>([^<]*)</th>", html)[:3] == ["method", "metric", "verdict"]
    assert "<td>better</td><td class=\"number\">85.0 ± 2.0</td>" in html
    assert html.count('<div class="scroll">') == 2 and "<details><summary>Each seed&#x27;s values (2 runs)" in html
