"""A shared set-up on a real PostgreSQL server (a throwaway cluster, see conftest): the server restarts in the middle
of a run's writes (ridden through: a pause and a line) or stays down (one line, exit 1, the resume exact), two
processes from two working folders on one database (one line naming the holder; a paused holder taken over without a
duplicate; a process paused while it creates the tables keeps the other waiting a bounded time)."""
import os
import shlex
import signal
import subprocess
import threading
import time

import psutil
import pytest
import sqlalchemy as sa

from conftest import new_database, throwaway_postgres
from pipeline.spec.study_config import load_study
from pipeline.store import lock as lock_module
from helpers import ROBUST_TUNE, default_sigint, study_file, unwrapped

FAST = 'epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }'


@pytest.fixture(scope="module")
def server():
    """A server of this module's own, which its tests restart; durable as a real one."""
    with throwaway_postgres(durable=True) as server:
        yield server


def rows(url: str, sql: str) -> list[tuple]:
    from pipeline.store import database_url

    engine = sa.create_engine(database_url(url))
    try:
        with engine.connect() as connection:
            return [tuple(r) for r in connection.execute(sa.text(sql))]
    finally:
        engine.dispose()


def ax_trials(study, url: str, log) -> dict[int, tuple[str, dict]]:
    """Ax's stored trials: index -> (status, parameters)."""
    from pipeline.library_logs import quiet_libraries
    from pipeline.store import Store

    quiet_libraries(log)
    from pipeline.search.ax import Searcher

    trials = Searcher(study, Store(url).url).client._experiment.trials
    return {i: (trials[i].status.name.lower(), dict(trials[i].arm.parameters)) for i in sorted(trials)}


def ax_agrees(study, url: str, log) -> bool:
    """Ax's stored trials agree with the table: the same completed trials, each with the table's parameters."""
    ax = ax_trials(study, url, log)
    table = {i: (status, parameters) for i, status, parameters in
             rows(url, "select trial_index, status, parameters from rt_trials")}
    completed = {i for i, (status, _) in table.items() if status == "completed"}
    return ({i for i, (status, _) in ax.items() if status == "completed"} == completed
            and all(ax[i][1] == parameters for i, (_, parameters) in table.items()))


def start_run(path, url: str, log, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([ROBUST_TUNE, "run", str(path), "--db", url, "--device", "cpu", "--log-file", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **env}, preexec_fn=default_sigint)


def test_a_server_restarted_inside_the_runs_writes_costs_a_line_each_and_the_budget_ends_exactly(tmp_path, cli, server):
    """`pg_ctl restart -m fast` while the run is inside a transaction: once as it completes a trial's row, once after
    Ax wrote a trial's result and before the transaction claims the lock row to commit (Ax's client in memory then
    holds what was not stored). Each write is made again once the server answers: exit code 0, a line per restart,
    the budget exact, no parameters twice, Ax agreeing with the table."""
    url, log = new_database(server), tmp_path / "ax.log"
    path = study_file(tmp_path, "restarted", params=FAST, trials=3)
    restarts: list[str] = []

    def restart_inside(connection, cursor, statement, parameters, context, executemany) -> None:
        if threading.current_thread() is not threading.main_thread():  # not the lock's heartbeat
            return
        if statement.startswith("INSERT INTO data_v2"):  # Ax writes a trial's result
            connection.info["ax wrote"] = True
        if (statement.startswith("UPDATE rt_trials SET status") and parameters.get("status") == "completed"
                and not restarts):  # a trial's row completed
            restarts.append("trial's row")
            server.restart()
        elif (statement.startswith("UPDATE rt_study_locks") and connection.info.pop("ax wrote", False)
              and len(restarts) == 1):  # the fence's claim, last in the transaction
            restarts.append("after Ax wrote")
            server.restart()

    sa.event.listen(sa.Engine, "before_cursor_execute", restart_inside)
    try:
        code, out, err = cli("run", str(path), "--db", url, "--device", "cpu", "--log-file", str(log))
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", restart_inside)
    assert restarts == ["trial's row", "after Ax wrote"]
    assert code == 0 and "Traceback" not in err, err
    assert err.count(f"lost the connection to the database server 127.0.0.1:{server.port}; reconnected after ") == 2
    assert "3 trial(s) completed" in out
    stored = rows(url, "select status, parameters from rt_trials order by trial_index")
    assert [status for status, _ in stored] == ["completed"] * 3
    assert len({str(sorted(p.items())) for _, p in stored}) == 3
    assert ax_agrees(load_study(path), url, log)


def test_a_server_that_stays_down_is_one_line_naming_it_and_the_next_run_completes_the_budget(tmp_path, cli, server):
    """The server stopped as a crash would while the run trains, and not back within ROBUST_TUNE_RECONNECT_SECONDS:
    one line naming the server and the command to resume, exit code 1; once it is back, the resume ends the budget
    exactly, the stopped trial run again first."""
    url, log = new_database(server), tmp_path / "ax.log"
    path = study_file(tmp_path, "cut", params=FAST.replace("epochs = 1", "epochs = 3"), trials=2)
    process = start_run(path, url, log, {"ROBUST_TUNE_RECONNECT_SECONDS": "2"})
    while not rows(url, "select 1 from pg_tables where tablename = 'rt_trials'") or \
            not rows(url, "select 1 from rt_trials where status = 'running'"):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGSTOP)  # held in its first trial (which trains in about a second) ...
    server.stop()  # ... while the server stops as a crash would: every connection dropped at once
    process.send_signal(signal.SIGCONT)
    try:
        _, err = process.communicate(timeout=120)
    finally:
        server.start()
    assert process.returncode == 1 and "Traceback" not in err, err
    *progress, last = unwrapped(err).strip().splitlines()  # the study's start, then one line saying why it stopped
    assert progress[0] == "examples per split and class:" and progress[4] == "study cut: budget 2 trials", err
    assert all(line.startswith("trial ") and " completed: " in line for line in progress[5:]), err  # ended before
    assert last.startswith(f"error: lost the database server 127.0.0.1:{server.port} (") and server.password not in err
    assert "; it did not answer for 2 s (ROBUST_TUNE_RECONNECT_SECONDS); " in last
    shown = url.replace(server.password, "***")
    # the trial the stop caught: the first, unless it ended inside the moment between its row and the stop
    (stopped, parameters), = rows(url, "select trial_index, parameters from rt_trials where status = 'running'")
    assert stopped == len(progress[5:]) and stopped in (0, 1)
    assert last.endswith(f"trial {stopped} of study cut was stopped and will run again first; resume with robust-tune "
                         f"run {path} --db {shlex.quote(shown)} --device cpu --log-file {log} once it is back"), last

    code, out, err = cli("run", str(path), "--db", url, "--device", "cpu", "--log-file", str(log))
    assert code == 0, err
    stored = rows(url, "select trial_index, status, parameters from rt_trials order by trial_index")
    statuses = [status for _, status, _ in stored]
    assert statuses == ["completed"] * stopped + ["interrupted", "completed"] + ["completed"] * (1 - stopped)
    assert stored[stopped + 1][2] == parameters  # the stopped trial ran again, once, before anything new
    ax = ax_trials(load_study(path), url, log)
    assert [status for status, _ in ax.values()] == [s.replace("interrupted", "failed") for s in statuses]
    assert rows(url, "select * from rt_study_locks") == []


def stopped(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def test_two_machines_on_one_database_one_says_who_holds_the_study_and_a_paused_holder_is_taken_over(
        tmp_path, cli, postgres_url, monkeypatch):
    """Two working folders stand for two machines. The first, stopped once a trial is stored (before Ax hears of
    it), holds the study: the second's `run` is one line naming it (exit 2). Past the lock's stale time the second
    takes it over and ends the budget; continued, the first stops in one line and writes nothing more: no
    parameters twice, Ax agreeing with the table."""
    first_folder, second_folder = tmp_path / "a", tmp_path / "b"
    first_folder.mkdir(), second_folder.mkdir()
    paths = [study_file(folder, "shared", params=FAST, trials=2) for folder in (first_folder, second_folder)]
    first = subprocess.Popen([ROBUST_TUNE, "run", str(paths[0]), "--db", postgres_url, "--device", "cpu"],
                             cwd=first_folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=default_sigint,
                             env={**os.environ, "ROBUST_TUNE_LOCK_STALE_SECONDS": "3",
                                  "ROBUST_TUNE_STOP_AT": "after-record"})
    try:
        while not stopped(first.pid):  # at its first trial's end: stored, Ax not told yet
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        monkeypatch.chdir(second_folder)
        code, _, err = cli("run", str(paths[1]), "--db", postgres_url, "--device", "cpu")  # its heartbeat is fresh
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"study shared is being run by process {first.pid} on host " in err

        time.sleep(3.5)  # past its stale time
        monkeypatch.setattr(lock_module, "LOCK_STALE_SECONDS", 3)
        code, out, err = cli("run", str(paths[1]), "--db", postgres_url, "--device", "cpu")
        assert code == 0 and "Traceback" not in err, err
    finally:
        first.send_signal(signal.SIGCONT)
        _, first_err = first.communicate(timeout=120)
    assert first.returncode == 2 and "Traceback" not in first_err, first_err
    assert first_err.strip().splitlines()[-1].startswith("error: lost the lock of study shared: "), first_err
    stored = rows(postgres_url, "select status, parameters from rt_trials order by trial_index")
    completed = [str(sorted(p.items())) for status, p in stored if status == "completed"]
    assert len(completed) == 2 and len(set(completed)) == 2
    assert ax_agrees(load_study(paths[1]), postgres_url, second_folder / "runs" / "robust-tune.log")


def test_a_process_paused_while_it_creates_the_tables_keeps_another_one_waiting_a_bounded_time(tmp_path, cli,
                                                                                                postgres_url,
                                                                                                monkeypatch):
    """One process stopped (Ctrl-Z, a frozen machine) while it creates Ax's tables in a new database keeps them
    locked: another `run` there waits ROBUST_TUNE_LOCK_WAIT_MS and says so in one line, exit code 1, where it waited
    for as long as the pause."""
    from pipeline.store import database_url

    monkeypatch.setattr(lock_module, "LOCK_WAIT_MS", 500)
    engine = sa.create_engine(database_url(postgres_url))
    paused = engine.connect()
    paused.execute(sa.text("CREATE TABLE experiment_v2 (id integer)"))  # its transaction left open
    try:
        code, out, err = cli("run", str(study_file(tmp_path, "waits", params=FAST, trials=1)), "--db", postgres_url,
                             "--device", "cpu", "--log-file", str(tmp_path / "ax.log"))
    finally:
        paused.rollback()
        paused.close()
        engine.dispose()
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "could not run study waits: the database server 127.0.0.1:" in err
    assert "is busy, another process keeps it locked in the middle of a write" in err
