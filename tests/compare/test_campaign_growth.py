"""A campaign of tasks grows: a task added to a stored campaign runs alone, the stored tasks' studies, trials, runs
and verdicts kept as they are, and the verdict across tasks covers them all; a stored task removed or changed is
refused in one line (real Ax, real PyTorch, real SQLite, through `compare` and `report --verdict`)."""
import io
import json
import shutil
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from cli.main import main
from pipeline.compare.workload import campaign_work
from pipeline.spec.campaign_config import parse_campaign
from pipeline.store import Store
from helpers import TWO_TASKS, rows

RARE8 = '[tasks.rare8.data]\nimbalance_class = "8"\n'
ONE_TASK = TWO_TASKS.replace(RARE8, "")  # rare3 alone: erm and cb, 2 trials of 1 epoch, 2 pairs
OLD = ("select * from rt_studies where name like 'pair.rare3.%' order by id",
       "select t.* from rt_trials t join rt_studies s on s.id = t.study_id where s.name like 'pair.rare3.%' "
       "order by t.id",
       "select e.* from rt_evaluations e join rt_studies s on s.id = e.study_id where s.name like 'pair.rare3.%' "
       "order by e.id")


def compare(path: Path, db: Path) -> tuple[int, str, str]:
    """`robust-tune compare` in this process (torch and Ax loaded once): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit) as done:
        main(["compare", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(path.parent / "ax.log")])
    return done.value.code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> dict:
    """A one-task campaign compared, then its file given a second task and compared again."""
    folder = tmp_path_factory.mktemp("grown")
    path, db = folder / "pair.toml", folder / "c.db"
    path.write_text(ONE_TASK)
    first = compare(path, db)
    assert first[0] == 0, first[2]
    shutil.copy(db, folder / "one-task.db")
    before = [rows(db, query) for query in OLD]
    path.write_text(TWO_TASKS)
    return {"db": db, "path": path, "one_task": folder / "one-task.db", "before": before, "first": first,
            "second": compare(path, db)}


def test_a_task_added_to_a_stored_campaign_runs_alone_and_keeps_every_stored_row(grown):
    db = grown["db"]
    code, out, err = grown["second"]
    assert code == 0, err
    assert "Traceback" not in err
    assert [rows(db, query) for query in OLD] == grown["before"]  # the same rows: nothing retrained, nothing added
    assert "campaign pair grows: task rare8 added; stored task rare3 kept as it is" in " ".join(err.split())
    assert "4 trial(s) and 4 re-training run(s) now" in " ".join(err.split())  # rare8's alone
    assert rows(db, "select name from rt_studies order by name") == [
        ("pair.rare3.cb",), ("pair.rare3.erm",), ("pair.rare8.cb",), ("pair.rare8.erm",)]
    assert rows(db, "select s.name, count(*) from rt_trials t join rt_studies s on s.id = t.study_id "
                    "where s.name like 'pair.rare8.%' and t.status = 'completed' group by s.name") == [
        ("pair.rare8.cb", 2), ("pair.rare8.erm", 2)]
    assert rows(db, "select count(*), count(distinct study_id || '-' || seed) from rt_evaluations") == [(8, 8)]
    assert rows(db, "select id, name from rt_campaigns") == rows(grown["one_task"], "select id, name from rt_campaigns")
    flat = " ".join(out.split())
    assert "Verdict of campaign pair.rare3" in flat and "Verdict of campaign pair.rare8" in flat
    assert "Campaign pair across its 2 tasks" in flat
    assert "across its 1 task" in " ".join(grown["first"][1].split())


def test_compare_says_what_is_left_to_train_and_how_long_from_the_stored_trials_before_it_starts(grown, tmp_path):
    """The first compare has no trial to time its work by; the second times the added task's by the stored one's."""
    first, second = (" ".join(grown[call][2].split()) for call in ("first", "second"))
    assert "left to train: 4 trials, 4 re-training runs expected time: known once the first trials end" in first
    assert "left to train: 4 trials, 4 re-training runs expected time: about" in second
    assert "on 1 worker, from 8 stored trials and runs" in second  # the tests train in this process

    db = tmp_path / "c.db"
    shutil.copy(grown["one_task"], db)
    store = Store(str(db), create=False)
    work = campaign_work(store, _settled(parse_campaign(tomllib.loads(TWO_TASKS.replace("max_seeds = 2",
                                                                                        "max_seeds = 6")),
                                                        "pair.toml")), workers=2)
    assert (work.trials, work.runs, work.more_runs, work.workers, work.measured) == (4, 4, 16, 2, 8)
    trials = [(t.train_seconds or 0) + (t.proposal_seconds or 0) for s in store.all_studies()
              for t in store.trials(s.id)]
    runs = {m: [e.train_seconds for e in store.evaluations(store.study(f"pair.rare3.{m}").id)] for m in ("erm", "cb")}
    assert work.trial_seconds == pytest.approx(4 * sum(trials) / len(trials))  # rare8's by rare3's of its method
    assert work.more_seconds == pytest.approx(sum(8 * sum(r) / len(r) for r in runs.values()))  # 4 more per study
    assert work.seconds() == pytest.approx((work.trial_seconds + work.run_seconds) / 2)


def test_the_grown_campaigns_verdict_across_tasks_covers_both_and_a_second_compare_trains_nothing(grown, tmp_path,
                                                                                                  cli):
    db = tmp_path / "c.db"
    shutil.copy(grown["db"], db)
    code, out, err = compare(grown["path"], db)
    assert code == 0 and "nothing was missing, nothing changed" in " ".join(err.split()), err
    assert "grows" not in err
    code, out, err = cli("report", "--verdict", "pair", "--db", str(db), "--format", "json")
    assert code == 0, err
    tables = {t["title"]: t for t in json.loads(out)}
    ranks = tables["Campaign pair across its 2 tasks: mean rank of each method (1 = best)"]
    assert set(ranks["rows"][0]["scores"]) == {"rare3", "rare8"}
    versus = tables["Campaign pair across its 2 tasks: each method against tuned ERM"]
    assert {(r["method"], r["tasks"]) for r in versus["rows"]} == {("cb", 2)}


def test_a_stored_task_removed_or_changed_or_tasks_dropped_is_refused_in_one_line_and_changes_nothing(grown, tmp_path,
                                                                                                      cli):
    db = tmp_path / "c.db"
    shutil.copy(grown["db"], db)
    before = db.read_bytes()
    path = tmp_path / "pair.toml"
    for text, said in [
        (TWO_TASKS.replace('[tasks.rare3.data]\nimbalance_class = "3"\n', ""),
         "campaign 'pair' is stored with task rare3, which this file lacks"),
        (TWO_TASKS.replace('imbalance_class = "3"', 'imbalance_class = "5"'),
         "task rare3 is stored with other settings (differs in: data.imbalance_class); a changed task is another task"),
        (TWO_TASKS.replace('[tasks.rare3.data]\nimbalance_class = "3"\n', "").replace(RARE8, 'imbalance_class = "3"\n'),
         "campaign 'pair' is stored with [tasks], which this file lacks"),
        (TWO_TASKS.replace('"cb"', '"cb", "ls"') + '[tasks.rare5.data]\nimbalance_class = "5"\n',
         "a different campaign named 'pair' is already stored (differs in: methods, tasks)"),
    ]:
        path.write_text(text)
        code, out, err = cli("compare", str(path), "--db", str(db), "--device", "cpu",
                             "--log-file", str(tmp_path / "ax.log"))
        assert code == 2 and len(err.strip().splitlines()) == 1 and said in " ".join(err.split()), err
        assert db.read_bytes() == before


def test_tasks_cannot_be_added_to_a_campaign_stored_without_tasks(tmp_path, cli):
    """A campaign without [tasks] is one unnamed task (its studies NAME.METHOD): a file adding tasks to it is
    refused before anything is stored."""
    one = parse_campaign(_without_tasks(ONE_TASK), "pair.toml")
    store = Store(str(tmp_path / "c.db"))
    store.save_campaign(_settled(one))
    before = (tmp_path / "c.db").read_bytes()
    path = tmp_path / "pair.toml"
    path.write_text(TWO_TASKS)
    code, out, err = cli("compare", str(path), "--db", str(tmp_path / "c.db"), "--device", "cpu",
                         "--log-file", str(tmp_path / "ax.log"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "campaign 'pair' is stored without [tasks] (its studies are pair.METHOD)" in " ".join(err.split())
    assert (tmp_path / "c.db").read_bytes() == before


def _without_tasks(text: str) -> dict:
    """The one-task campaign's file as a campaign without [tasks]: digit 3 rare in its [data]."""
    document = tomllib.loads(text)
    document["data"] |= document.pop("tasks")["rare3"]["data"]
    return document


def _settled(campaign):
    """A new campaign with every setting a first `compare` settles."""
    return campaign.settled(None)


def test_a_campaign_of_tasks_stored_before_tasks_could_be_added_keeps_its_fingerprint_and_meaning():
    """The identity rule for tasks leaves a stored campaign's fingerprint as it was (0.11.0 stored this one), and
    reads a file against it as adding, removing or changing tasks."""
    two = _settled(parse_campaign(tomllib.loads(TWO_TASKS), "pair.toml"))
    earlier = {"studies": {m: {"fixed": {"lr_backbone": 1e-3}} for m in two.methods}}  # 0.11.0's default
    as_stored = two.settle_defaults({**earlier, "tasks": {t: earlier for t in two.tasks}})
    assert as_stored.fingerprint() == "ce1927803236e1f6"
    stored = json.loads(json.dumps(two.to_dict(), default=str))
    one = _settled(parse_campaign(tomllib.loads(ONE_TASK), "pair.toml"))
    three = _settled(parse_campaign(tomllib.loads(TWO_TASKS + '[tasks.rare5.data]\nimbalance_class = "5"\n'),
                                    "pair.toml"))
    assert (three.task_changes(stored).added, three.task_changes(stored).removed) == (["rare5"], [])
    assert one.task_changes(stored).removed == ["rare8"] and not one.task_changes(stored).added
    assert two.task_changes(stored).changed == {} and two.task_changes(stored).added == []
    more = _settled(parse_campaign(tomllib.loads(TWO_TASKS.replace('"cb"', '"cb", "ls"')), "pair.toml"))
    assert more.task_changes(stored) is None  # other methods: another campaign, whatever its tasks


def test_report_verdict_of_a_campaign_grown_but_not_yet_run_says_what_is_missing(grown, tmp_path, cli):
    """A `compare` that stored the added task and was stopped before training it: the report reads what there is."""
    db = tmp_path / "c.db"
    shutil.copy(grown["one_task"], db)
    Store(str(db)).save_campaign(_settled(parse_campaign(tomllib.loads(TWO_TASKS), "pair.toml")))
    before = db.read_bytes()
    code, out, err = cli("report", "--verdict", "pair", "--db", str(db))
    assert code == 0 and "Traceback" not in err, err
    assert "Verdict of campaign pair.rare3" in " ".join(out.split()) and db.read_bytes() == before
