"""A database written by robust-tune 0.1.0 (tests/fixtures) is upgraded in place by the first writing command,
once, with a copy kept; its studies list, report, resume and evaluate. Reading commands never change a byte;
a database from a newer version is refused; a kill during the upgrade leaves the old database usable.
Real SQLite files (and a real PostgreSQL server), the CLI as a user runs it, real processes for the kill."""
import functools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.store import Store, database_url
from pipeline.store.schema import BASELINE, HEAD, VERSIONS
import helpers
from helpers import DATA, STUDY_FILES, digest, unwrapped

UPGRADED = "upgraded database"


@pytest.fixture
def old(tmp_path, monkeypatch) -> Path:
    """A copy of the 0.1.0 database, with the study files that made it beside it; the working folder."""
    for name in ("v0.1.0.db", "old-quick.toml", "old-ls.toml"):
        shutil.copy(DATA / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)  # the default log (runs/) lands here
    return tmp_path / "v0.1.0.db"


def rows(db: Path, sql: str) -> list[tuple]:
    """Rows read through a read-only connection (the reading itself changes nothing)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def tables(db: Path) -> set[str]:
    return {name for (name,) in rows(db, "select name from sqlite_master where type = 'table'")}


def backups(db: Path) -> list[Path]:
    return sorted(db.parent.glob(db.name + ".bak*"))


robust_tune = functools.partial(helpers.robust_tune, columns=160)


def test_the_fixture_is_a_0_1_0_database_at_the_baseline(old):
    assert "rt_schema_version" not in tables(old) and {"rt_studies", "rt_trials", "experiment_v2"} <= tables(old)
    assert rows(old, "select name from rt_studies order by id") == [("old-quick",), ("old-ls",)]
    assert VERSIONS[BASELINE] == "0.1.0" and list(VERSIONS)[-1] == HEAD


def test_the_migrations_known_to_alembic_are_the_versions_the_schema_names():
    from alembic.script import ScriptDirectory

    from pipeline.store.upgrade import MIGRATIONS

    script = ScriptDirectory(str(MIGRATIONS))
    assert script.get_current_head() == HEAD
    assert [r.revision for r in reversed(list(script.walk_revisions()))] == list(VERSIONS)


def test_reading_commands_leave_an_old_database_byte_identical(old, cli):
    before, listing = digest(old), sorted(old.parent.iterdir())
    code, out, err = cli("studies", "--db", str(old))
    assert code == 0, err
    assert "old-quick" in out and "old-ls" in out and "2 of 3" in out
    code, out, err = cli("report", "--db", str(old), "--format", "markdown", "--all-trials")
    assert code == 0, err
    assert "| digits (class 3 at 5% in train) | small_cnn | hws |" in out and "| digits | small_cnn | ls |" in out
    code, out, err = cli("report", "--db", str(old), "--compare", "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["rows"][0]["seeds"] == [0, 1]
    code, out, err = cli("best", "old-quick", "--db", str(old))
    assert code == 0 and 'name = "old-quick-best"' in out and 'imbalance_in = "train"' in out
    code, out, err = cli("best", "old-ls", "--db", str(old), "--format", "json")
    assert code == 0 and json.loads(out)["train"]["method"] == "ls"
    code, out, err = cli("train", "--from-study", "old-ls", "--db", str(old), "--device", "cpu", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["settings"]["method"] == "ls"
    assert UPGRADED not in err
    assert digest(old) == before and sorted(old.parent.iterdir()) == listing  # no byte, no file, no backup


def test_a_writing_command_upgrades_once_keeping_a_copy_and_the_studies_resume_and_evaluate(old, cli):
    original = digest(old)
    code, out, err = cli("run", "old-quick.toml", "--db", str(old), "--device", "cpu", "--set", "budget.trials=4")
    assert code == 0, err
    said = [line for line in unwrapped(err).splitlines() if UPGRADED in line]
    assert said == [f"upgraded database sqlite:///{old} from robust-tune 0.1.0 to {VERSIONS[HEAD]}; "
                    f"the old one is kept as {old}.bak-0.1.0"]
    assert backups(old) == [old.with_name("v0.1.0.db.bak-0.1.0")] and digest(backups(old)[0]) == original
    assert rows(old, "select version_num from rt_schema_version") == [(HEAD,)]
    # The study resumed to its new budget: its two 0.1.0 trials kept, two more run.
    store = Store(str(old), create=False)
    trials = store.trials(store.require_study("old-quick").id)
    assert [(t.trial_index, t.status) for t in trials] == [(i, "completed") for i in range(4)]
    assert trials[0].settings.threads is None and trials[3].settings.threads >= 1  # recorded since 0.2.0
    assert store.require_study("old-quick").study.search_seed == 0

    code, out, err = cli("evaluate", "old-ls", "--db", str(old), "--seeds", "3", "--device", "cpu")
    assert code == 0, err
    assert UPGRADED not in err  # the second open does not upgrade again
    assert "3 run(s), 2 already stored, 1 to run" in err
    assert backups(old) == [old.with_name("v0.1.0.db.bak-0.1.0")]
    code, out, err = cli("studies", "--db", str(old))
    assert code == 0 and "4 (budget 3)" in out and "old-ls" in out
    assert "took this study past it" in " ".join(out.split())  # the note says why the count passed the budget
    code, out, err = cli("report", "--db", str(old), "--compare", "--format", "json")
    assert code == 0 and json.loads(out)[0]["rows"][0]["seeds"] == [0, 1, 2]


def test_a_study_stored_before_fields_existed_is_the_same_study_at_their_old_values(old, cli):
    """A study stored before search_seed and data.imbalance_in: the same study file at those fields' old
    behaviour (imbalance in train+val, Ax seeded by the seed) resumes it; a file that changes them is refused."""
    with sqlite3.connect(old) as connection:
        (config,), = connection.execute("select config from rt_studies where name = 'old-quick'").fetchall()
        config = json.loads(config)
        del config["search_seed"], config["data"]["imbalance_in"]
        connection.execute("update rt_studies set config = ? where name = 'old-quick'", (json.dumps(config),))
    code, out, err = cli("run", "old-quick.toml", "--db", str(old), "--device", "cpu")  # imbalance in train only
    assert code == 2 and "a different study named 'old-quick'" in err and "data.imbalance_in" in err
    assert "search_seed" not in err
    code, out, err = cli("run", "old-quick.toml", "--db", str(old), "--device", "cpu",
                         "--set", 'data.imbalance_in="train+val"')
    assert code == 0, err
    assert "resuming after 2 trial(s)" in err
    (config,), = rows(old, "select config from rt_studies where name = 'old-quick'")
    assert json.loads(config)["search_seed"] == 0 and json.loads(config)["data"]["imbalance_in"] == "train+val"


def test_a_database_from_a_newer_version_is_refused_in_one_line_and_left_alone(old, cli):
    with sqlite3.connect(old) as connection:
        connection.execute("create table rt_schema_version (version_num varchar(32) primary key)")
        connection.execute("insert into rt_schema_version values ('0099_from_the_future')")
    before = digest(old)
    for command in (["studies"], ["report"], ["best", "old-ls"],
                    ["run", "old-quick.toml", "--device", "cpu"], ["evaluate", "old-ls", "--seeds", "3"],
                    ["studies", "delete", "old-ls", "--yes"]):
        code, out, err = cli(*command, "--db", str(old))
        assert code == 2, (command, err)
        assert "written by a newer robust-tune (schema 0099_from_the_future" in err, command
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert digest(old) == before and backups(old) == []


def test_a_kill_during_the_upgrade_leaves_the_old_database_usable(old, cli):
    original = digest(old)
    killed = robust_tune("evaluate", "old-ls", "--db", str(old), "--seeds", "2", "--device", "cpu",
                         env={"ROBUST_TUNE_KILL_AT": "in-migration"})
    assert killed.returncode == -signal.SIGKILL
    assert "rt_schema_version" not in tables(old)  # the transaction never committed
    code, out, err = cli("studies", "--db", str(old))
    assert code == 0 and "old-quick" in out and "old-ls" in out, err
    assert digest(old) == original
    code, out, err = cli("studies", "delete", "old-quick", "--db", str(old), "--yes")
    assert code == 0, err
    assert [line for line in unwrapped(err).splitlines() if UPGRADED in line] == [
        f"upgraded database sqlite:///{old} from robust-tune 0.1.0 to {VERSIONS[HEAD]}; "
        f"the old one is kept as {old}.bak-0.1.0"]
    assert backups(old) == [old.with_name("v0.1.0.db.bak-0.1.0")] and digest(backups(old)[0]) == original
    assert rows(old, "select name from rt_studies") == [("old-ls",)]
    assert rows(old, "select version_num from rt_schema_version") == [(HEAD,)]


def test_an_old_layout_this_version_cannot_read_says_to_run_a_writing_command(old, cli):
    with sqlite3.connect(old) as connection:
        connection.execute("alter table rt_trials drop column proposal_seconds")
    before = digest(old)
    code, out, err = cli("studies", "--db", str(old))
    assert code == 2 and "lacks rt_trials.proposal_seconds" in err and "run a writing command" in err
    assert len(err.strip().splitlines()) == 1 and digest(old) == before


def test_a_postgresql_database_in_the_0_1_0_layout_is_upgraded_in_one_transaction(tmp_path, cli, postgres_url):
    """The 0.1.0 layout on PostgreSQL: this version's tables less the version table and the new index. A
    reader leaves it so; an upgrade killed midway leaves it so; the next writer upgrades it and it resumes."""
    from pipeline.search.study import run_study
    from pipeline.spec.study_config import load_study
    from helpers import study_file

    path, log = study_file(tmp_path, "shared", params='epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }',
                           trials=1), tmp_path / "ax.log"
    run_study(load_study(path), postgres_url, "cpu", log_file=log)
    engine = sa.create_engine(database_url(postgres_url))
    with engine.begin() as connection:  # back to what 0.1.0 left
        connection.execute(sa.text("drop table rt_schema_version"))
        connection.execute(sa.text("drop index ix_rt_trials_study_status"))

    def layout() -> tuple[bool, bool]:
        inspector = sa.inspect(engine)
        return (inspector.has_table("rt_schema_version"),
                any(i["name"] == "ix_rt_trials_study_status" for i in inspector.get_indexes("rt_trials")))

    code, out, err = cli("studies", "--db", postgres_url)
    assert code == 0 and "shared" in out and layout() == (False, False)
    killed = subprocess.run([sys.executable, "-c", "import sys; from pipeline.store import Store; Store(sys.argv[1])",
                             postgres_url], env={**os.environ, "ROBUST_TUNE_KILL_AT": "in-migration"},
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert layout() == (False, False)
    code, out, err = cli("run", str(path), "--db", postgres_url, "--device", "cpu", "--trials", "2",
                         "--log-file", str(log))
    assert code == 0, err
    shown = sa.engine.make_url(database_url(postgres_url)).render_as_string(hide_password=True)
    assert [line for line in unwrapped(err).splitlines() if UPGRADED in line] == [
        f"upgraded database {shown} from robust-tune 0.1.0 to {VERSIONS[HEAD]} in one transaction"]
    assert layout() == (True, True)
    store = Store(postgres_url, create=False)
    assert [t.status for t in store.trials(store.require_study("shared").id)] == ["completed", "completed"]
    engine.dispose()


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.stem)
def test_every_study_file_reads_back_from_its_stored_json_as_the_same_study(path):
    from pipeline.spec.study_config import StudyConfig, load_study

    study = load_study(path)
    stored = json.loads(json.dumps(study.to_dict(), default=str))  # as the database's JSON column gives it back
    assert StudyConfig.from_dict(stored) == study
    assert StudyConfig.from_dict(stored).differences(study) == [] and study.differences(study) == []


def test_a_0_5_0_database_keeps_its_trials_and_resumes_with_epoch_prefixes_after_the_upgrade(tmp_path, cli):
    """A database in the 0.5.0 layout (no rt_trials.prefix_of): a reader reads it unchanged; the next `run`
    upgrades it to this version, keeps every trial (each its own run), and goes on storing prefixes."""
    from helpers import prefixes_study_file as study_file

    path, db, log = study_file(tmp_path, trials=2), tmp_path / "v050.db", str(tmp_path / "ax.log")
    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", log)
    assert code == 0, err
    trained = rows(db, "select trial_index, parameters, metrics from rt_trials where prefix_of is null")
    with sqlite3.connect(db) as connection:  # back to what 0.5.0 left: no prefixes, no prefix_of, its version
        connection.execute("delete from rt_trials where prefix_of is not null")
        connection.execute("alter table rt_trials drop column prefix_of")
        connection.execute("update rt_schema_version set version_num = '0006_epoch_metrics'")
    before = digest(db)
    code, out, err = cli("studies", "--db", str(db))
    assert code == 0 and "pf" in out and digest(db) == before
    code, out, err = cli("run", str(path), "--db", str(db), "--device", "cpu", "--trials", "3", "--log-file", log)
    assert code == 0, err
    assert f"from robust-tune 0.5.0 to {VERSIONS[HEAD]}" in unwrapped(err)
    assert backups(db) == [db.with_name("v050.db.bak-0.5.0")]
    assert rows(db, "select trial_index, parameters, metrics from rt_trials where trial_index in "
                    f"({', '.join(str(t[0]) for t in trained)})") == trained
    store = Store(str(db), create=False)
    trials = store.trials(store.require_study("pf").id)
    assert sum(t.ran for t in trials) == 3
    new = max((t for t in trials if t.prefix_of is None), key=lambda t: t.trial_index)
    assert len([t for t in trials if t.prefix_of == new.trial_index]) == new.parameters["epochs"] - 1
