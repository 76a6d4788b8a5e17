"""Campaigns of several tasks trained for real: a two-task campaign through `compare` (killed twice and resumed,
then reported in every format), and the GI-LS paper's Table 5 campaign on fake trees at two tasks."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.store import Store
from pipeline.compare.verdict import METRICS
from helpers import ROBUST_TUNE, STUDIES, TWO_TASKS, in_process, rows



def robust_tune(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([ROBUST_TUNE, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1", **(env or {})})


# --- a real two-task campaign, killed and resumed -----------------------------------------------------------------

@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory) -> tuple[Path, Path, list[subprocess.CompletedProcess]]:
    """erm + cb on the digits with digit 3 rare and with digit 8 rare, 2 trials of 1 epoch, 2 pairs: killed in the
    first task's re-training, killed again in the second task's search, then run to its end."""
    folder = tmp_path_factory.mktemp("two-tasks")
    path = folder / "pair.toml"
    path.write_text(TWO_TASKS)
    args = ("compare", str(path), "--db", str(folder / "c.db"), "--device", "cpu", "--log-file", str(folder / "ax.log"))
    done = [robust_tune(*args, env={"ROBUST_TUNE_KILL_AT": kill} if kill else {})
            for kill in ("after-evaluation-1", "after-tell", None)]
    return folder / "c.db", path, done


def test_a_two_task_campaign_killed_twice_resumes_without_a_duplicate_and_ranks_nothing(two_tasks):
    db, _, done = two_tasks
    assert [d.returncode for d in done] == [-9, -9, 0], done[-1].stderr
    assert not any("Traceback" in d.stderr for d in done)
    assert rows(db, "select name from rt_studies order by name") == [
        ("pair.rare3.cb",), ("pair.rare3.erm",), ("pair.rare8.cb",), ("pair.rare8.erm",)]
    assert rows(db, "select count(*) from rt_trials where status = 'completed'") == [(8,)]
    assert rows(db, "select count(*), count(distinct study_id || '-' || variant || '-' || seed) from rt_evaluations") \
        == [(8, 8)]
    assert rows(db, "select count(*) from rt_campaigns") == [(1,)]
    assert rows(db, "select count(*) from rt_campaign_locks") == [(0,)]
    out, err = done[-1].stdout, done[-1].stderr
    assert "campaign pair, task rare8 (2/2)" in err
    assert "Verdict of campaign pair.rare3" in out and "Verdict of campaign pair.rare8" in out
    assert "Cannot rank the methods across tasks: 2 tasks: a test on ranks needs at least 5" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80


def test_report_verdict_reprints_the_across_task_verdict_in_every_format_and_changes_nothing(two_tasks, tmp_path, cli):
    db, _, _ = two_tasks
    before = db.read_bytes()
    shown = {fmt: in_process(cli, "report", "--verdict", "pair", "--db", str(db), "--format", fmt)
             for fmt in ("table", "json", "markdown", "html")}
    assert all(s.returncode == 0 for s in shown.values()), [s.stderr for s in shown.values()]
    assert db.read_bytes() == before
    tables = {t["title"]: t for t in json.loads(shown["json"].stdout)}
    ranks = tables["Campaign pair across its 2 tasks: mean rank of each method (1 = best)"]
    assert [r["metric"] for r in ranks["rows"]] == list(METRICS)
    assert all(r["test"] is None and "needs at least 5" in r["refusal"] for r in ranks["rows"])
    assert set(ranks["rows"][0]["scores"]) == {"rare3", "rare8"}
    versus = tables["Campaign pair across its 2 tasks: each method against tuned ERM"]
    assert {(r["method"], r["tasks"]) for r in versus["rows"]} == {("cb", 2)}
    for task in ("rare3", "rare8"):
        verdict = tables[next(t for t in tables if t.startswith(f"Verdict of campaign pair.{task}"))]
        assert {r["method"] for r in verdict["rows"]} == {"erm", "cb"}
        curves = tables[f"Expected best validation score after n trials, campaign pair.{task}"]
        assert [len(r["expected"]) for r in curves["rows"]] == [2, 2]
    for fmt in ("table", "markdown", "html"):
        assert "Reading across tasks" in shown[fmt].stdout
    page = shown["html"].stdout
    assert 'id="picture-pair-rare3-budget"' in page and 'id="picture-pair-rare8-verdict"' in page
    one = in_process(cli, "report", "--verdict", "pair.rare8", "--db", str(db), "--format", "json")
    assert [t["title"].split(":")[0] for t in json.loads(one.stdout)][:1] == ["Campaign pair.rare8"]
    assert "across" not in one.stdout and db.read_bytes() == before


# --- the paper's Table 5 as one campaign, on fake trees -----------------------------------------------------------

def test_table5_runs_end_to_end_on_fake_trees_at_two_tasks(tmp_path, mt_root, mvtec_root, cli):
    """studies/paper/table5.toml with two of its twelve tasks (MT-Defect and Wood, ResNet18), no ImageNet weights,
    small images, 2 trials of 1 epoch and 2 pairs: one `compare` on splits `data prepare` wrote from fake trees."""
    splits = tmp_path / "splits"
    assert cli("data", "prepare", "mt", "--root", str(mt_root), "--out", str(splits))[0] == 0
    wood = ("--root", str(mvtec_root), "--category", "wood", "--out", str(splits))
    assert cli("data", "prepare", "mvtec", *wood)[0] == 0
    text = (STUDIES / "paper" / "table5.toml").read_text()
    head, *tasks = text.split("\n[tasks.")
    kept = [t for t in tasks if t.startswith(("mt-defect-r18.", "wood-r18."))]
    assert len(tasks) == 24 and len(kept) == 4  # twelve tasks of two tables each
    small = (head.replace('weights = "imagenet"', 'weights = "none"').replace("image_size = 224", "image_size = 16")
             .replace("trials = 20\ninitial = 5", "trials = 2\ninitial = 2").replace("seeds = 5", "seeds = 2")
             .replace("max_seeds = 10", "max_seeds = 2")
             .replace("momentum = 0.9", "momentum = 0.9\nepochs = 1\nlr_head = { low = 0.01, high = 0.1, log = true }")
             .replace("low = 16, high = 112", "low = 2, high = 8"))
    path = tmp_path / "table5.toml"
    path.write_text(small + "".join("\n[tasks." + t for t in kept).replace('"data/splits/', f'"{splits}/'))
    code, out, err = cli("compare", str(path), "--db", str(tmp_path / "t.db"), "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"))
    assert code == 0, err
    store = Store(str(tmp_path / "t.db"), create=False)
    names = sorted(s.name for s in store.all_studies())
    assert names == sorted(f"table5.{t}.{m}" for t in ("mt-defect-r18", "wood-r18")
                           for m in ("erm", "gils", "cutmix", "cutout", "mixup"))
    assert all(len(store.evaluations(s.id)) == 2 for s in store.all_studies())
    flat = " ".join(out.split())
    assert "Verdict of campaign table5.mt-defect-r18" in flat and "Verdict of campaign table5.wood-r18" in flat
    assert "Campaign table5 across its 2 tasks" in flat and "Cannot rank the methods across tasks" in flat
