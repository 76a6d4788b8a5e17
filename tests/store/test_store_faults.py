"""When the database's file or disk fails: a garbled file, a read-only file or folder, a full disk. Each is one line
naming the database, the cause and what to do, exit code 1, never a traceback; a damaged file is never written to;
a full disk loses nothing stored, and the run resumed once there is room completes the budget exactly. Real SQLite;
the full disk as SQLite's page limit (SQLITE_FULL, as a full disk raises it) and, where this runs as root and may
mount one, a real small tmpfs."""
import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.errors import DatabaseFault
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from pipeline.store import Store, fault_in, watch
from helpers import FAST, ax_trials, robust_tune, rows, study_file


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A database holding a finished two-trial study `kept` (tests copy it)."""
    folder = tmp_path_factory.mktemp("stored")
    run_study(load_study(study_file(folder, "kept", params=FAST, trials=2)), str(folder / "runs.db"), "cpu",
              log_file=folder / "ax.log")
    return folder / "runs.db"


def garble(file: Path, where: str) -> None:
    """Overwrite part of `file` with seeded random bytes: the header after its magic string, 8 KB in the middle, or
    the last 8 KB."""
    size = file.stat().st_size
    offset, length = {"header": (16, 84), "middle": (size // 2, 8192), "end": (size - 8192, 8192)}[where]
    with open(file, "r+b") as handle:
        handle.seek(offset)
        handle.write(random.Random(where).randbytes(length))


@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_run_refuses_a_garbled_database_in_one_line_and_leaves_it_unchanged(tmp_path, stored, cli, where):
    db = tmp_path / "runs.db"
    shutil.copyfile(stored, db)
    garble(db, where)
    before = db.read_bytes()
    code, out, err = cli("run", str(study_file(tmp_path, "kept", params=FAST, trials=3)), "--db", str(db),
                         "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert len(err.strip().splitlines()) <= 3
    assert f"the database {db} is damaged" in last and "nothing was written to it" in last
    assert f'sqlite3 {db} ".recover" | sqlite3 {tmp_path / "runs-recovered.db"}' in last
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("runs")) == ["runs.db"]  # no journal left


@pytest.mark.parametrize("command", [("studies",), ("best", "kept"), ("report",)])
def test_readers_of_a_file_damaged_in_the_middle_read_what_they_can_and_say_it_is_damaged(tmp_path, stored, cli,
                                                                                             command):
    db = tmp_path / "runs.db"
    shutil.copyfile(stored, db)
    garble(db, "middle")
    before = db.read_bytes()
    code, out, err = cli(*command, "--db", str(db))
    assert code in (0, 1) and "Traceback" not in err, err  # 0: it read what it showed; 1: nothing could be read
    assert len(err.strip().splitlines()) == 1 and f"the database {db} is damaged" in err, err
    assert db.read_bytes() == before


@pytest.fixture(scope="module")
def two_studies(stored, tmp_path_factory) -> Path:
    """`stored` with a second study, `other` (class-balanced weights, two trials)."""
    folder = tmp_path_factory.mktemp("two")
    shutil.copyfile(stored, folder / "runs.db")
    run_study(load_study(study_file(folder, "other", "cb", params="epochs = 1\ncb_power = { low = 0.2, high = 1.0 }",
                                    trials=2)), str(folder / "runs.db"), "cpu", log_file=folder / "ax.log")
    return folder / "runs.db"


def test_readers_leave_out_a_study_whose_records_lie_on_a_damaged_page_and_name_it(tmp_path, two_studies, cli,
                                                                                   monkeypatch):
    """The page of the trials table holding study `other`'s rows garbled: `studies`, `report` and `export` show
    (export) study `kept` and say in their warning that `other` was left out, where they stopped at the damage;
    `best other` is one line saying the database is damaged. Nothing is written."""
    db = tmp_path / "runs.db"
    shutil.copyfile(two_studies, db)
    connection = sqlite3.connect(db)
    pages = [page for (page,) in connection.execute("select pageno from dbstat where name = 'rt_trials' and "
                                                    "pagetype = 'leaf'")]
    size = connection.execute("pragma page_size").fetchone()[0]
    connection.close()
    content = db.read_bytes()
    (page,) = [p for p in pages if b"cb_power" in content[(p - 1) * size:p * size]
               and b'"alpha"' not in content[(p - 1) * size:p * size]]
    with open(db, "r+b") as handle:
        handle.seek((page - 1) * size + 100)
        handle.write(random.Random(1).randbytes(size - 200))
    before = db.read_bytes()
    for command in (("studies",), ("report", "--all-trials")):
        code, out, err = cli(*command, "--db", str(db))
        assert code == 0 and "Traceback" not in err, err
        assert "kept" in out and "other" not in out
        assert len(err.strip().splitlines()) == 1 and f"the database {db} is damaged" in err, err
        assert "left out, as its records could not be read: study other; what was shown is what could still be " \
               "read" in err
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # newer MLflow refuses a folder store without it
    code, out, err = cli("export", "--mlflow", f"file:{tmp_path / 'mlruns'}", "--db", str(db))
    assert code == 0 and "Traceback" not in err and "new runs for 1 study" in out, err
    assert "study kept: exported" in err and "study other: " not in err
    assert "left out, as its records could not be read: study other" in err
    code, out, err = cli("best", "other", "--db", str(db))
    assert code == 1 and len(err.strip().splitlines()) == 1 and f"the database {db} is damaged" in err, err
    assert db.read_bytes() == before


@contextlib.contextmanager
def read_only(path: Path):
    """`path` made read-only for this process: immutable as root (whom permissions do not stop), else without write
    permission; restored after."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)],
                                                            capture_output=True).returncode != 0:
            pytest.skip("as root only an immutable file is read-only, and chattr +i is not available here")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        return
    mode = path.stat().st_mode
    path.chmod(mode & 0o555)
    try:
        yield
    finally:
        path.chmod(mode)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_run_on_a_read_only_file_or_folder_is_one_line_saying_to_make_it_writable(tmp_path, stored, cli, what):
    folder = tmp_path / "db"
    folder.mkdir()
    db = folder / "runs.db"
    shutil.copyfile(stored, db)
    before = db.read_bytes()
    with read_only(db if what == "file" else folder):
        code, out, err = cli("run", str(study_file(tmp_path, "kept", params=FAST, trials=3)), "--db", str(db),
                             "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    assert code == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert str(db) in last and "writable" in last and "what was stored is kept" in last, err
    assert db.read_bytes() == before


@contextlib.contextmanager
def disk_of(pages: int, file: Path):
    """Every SQLite connection to `file` opened in this process meanwhile can grow it to `pages` pages, no more: a
    disk that fills there (SQLite raises SQLITE_FULL, as on a full disk)."""
    def limit(dbapi_connection, record) -> None:
        names = [row[2] for row in dbapi_connection.execute("PRAGMA database_list")]
        if names and names[0] and Path(names[0]).resolve() == file.resolve():
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    sa.event.listen(sa.pool.Pool, "connect", limit)
    try:
        yield
    finally:
        sa.event.remove(sa.pool.Pool, "connect", limit)


# From an empty file: full while Ax's tables are created (after ours), while the study and its Ax experiment are
# created (in one transaction), and in the third trial.
@pytest.mark.parametrize("pages", [30, 36, 38])
def test_a_full_disk_is_one_line_loses_nothing_and_the_resumed_run_completes_the_budget_exactly(tmp_path, cli,
                                                                                                  pages):
    path, db = study_file(tmp_path, "filled", params=FAST, trials=4), tmp_path / "runs.db"
    args = ("run", str(path), "--db", str(db), "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    with disk_of(pages, db):
        code, out, err = cli(*args)
    assert code == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert f"the disk holding the database {db} is full" in last and "free space" in last, err
    kept = rows(db, "select trial_index, parameters, metrics from rt_trials where status = 'completed'")
    assert sqlite3.connect(db).execute("PRAGMA quick_check").fetchall() == [("ok",)]
    resumed = robust_tune(*args, threads=1)  # a fresh process: room again
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    completed = rows(db, "select trial_index, parameters, metrics from rt_trials where status = 'completed'")
    assert set(kept) <= set(completed) and len(completed) == 4  # what was stored stays; the budget exactly
    assert rows(db, "select count(*) from rt_trials where status = 'running'") == [(0,)]
    statuses = [status for status, _ in ax_trials(load_study(path), db).values()]
    assert statuses.count("completed") == 4 and "running" not in statuses  # Ax agrees with the table


def test_a_fault_a_library_retried_past_is_still_the_one_named(tmp_path):
    """Ax retries a failed write, and the retry raises the closed transaction's own error: the disk's is named."""
    db = tmp_path / "full.db"
    store = Store(str(db))
    with disk_of(int(sqlite3.connect(db).execute("PRAGMA page_count").fetchone()[0]), db):
        engine = sa.create_engine(store.url)
        watch(engine)  # as the store watches its engine and Ax's
        with pytest.raises(sa.exc.OperationalError), engine.begin() as connection:
            connection.exec_driver_sql("create table filler (x)")
            connection.exec_driver_sql("insert into filler values (randomblob(100000))")
    fault = fault_in(sa.exc.InvalidRequestError("Can't operate on closed transaction inside context manager."))
    assert isinstance(fault, DatabaseFault) and f"the disk holding the database {db} is full" in str(fault)


def test_a_real_full_disk_is_one_line_and_the_run_resumes_once_there_is_room(tmp_path, stored, cli):
    """A 400 KB tmpfs filled to its last pages (root only, where mounting is allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a small real disk needs root and a tmpfs mount, which this machine does not allow")
    try:
        db, filler = mount / "runs.db", mount / "filler"
        shutil.copyfile(stored, db)
        free = shutil.disk_usage(mount).free
        filler.write_bytes(bytes(max(0, free - 16 * 1024)))
        args = ("run", str(study_file(tmp_path, "kept", params=FAST, trials=5)), "--db", str(db), "--device", "cpu",
                "--log-file", str(mount / "ax.log"))
        code, out, err = cli(*args)
        assert code == 1 and "Traceback" not in err, err
        assert "is full" in err.strip().splitlines()[-1] and str(mount) in err
        assert rows(db, "select trial_index, status from rt_trials where status = 'completed'") == \
            [(0, "completed"), (1, "completed")]
        filler.unlink()
        resumed = robust_tune(*args, threads=1)
        assert resumed.returncode == 0, resumed.stderr
        assert rows(db, "select count(*) from rt_trials where status = 'completed'") == [(5,)]
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)
