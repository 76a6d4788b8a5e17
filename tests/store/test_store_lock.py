"""The study lock tells its holder when it has lost the lock: a real SQLite database, two Stores on it."""
import datetime as dt
import time

import pytest
import sqlalchemy as sa

from pipeline.errors import UserError
from pipeline.store import LockLost, Store, study_locks
from pipeline.store import lock as lock_module
from helpers import stored, check_writes_after_a_takeover_change_nothing


def test_check_passes_while_held_and_stops_the_holder_once_another_process_took_the_lock_over(tmp_path):
    db = str(tmp_path / "runs.db")
    first = Store(db)
    study = stored(first)
    lock = first.lock_study(study)
    lock.check()  # held: nothing to say
    with first.engine.begin() as connection:  # its holder hung: not seen for ten minutes
        connection.execute(study_locks.update().values(heartbeat_at=lock_module.now() - dt.timedelta(minutes=10)))
    second = Store(db)
    taken = second.lock_study(second.require_study("held"))  # the stale lock taken over, as a second process would
    with pytest.raises(LockLost, match=r"^lost the lock of study held: process \d+ on host .+ took it over; stopped"):
        lock.check()
    assert isinstance(LockLost("x"), UserError)  # one line and exit code 2 at the CLI
    with pytest.raises(LockLost):  # and it stays lost
        lock.check()
    lock.release()  # the new holder's lock is not the old holder's to delete
    taken.check()
    taken.release()
    with first.engine.connect() as connection:
        assert connection.execute(study_locks.select()).all() == []


def test_the_heartbeat_records_a_takeover_it_finds(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_module, "LOCK_STALE_SECONDS", 0.6)  # a beat every 0.1 s
    store = Store(str(tmp_path / "runs.db"))
    lock = store.lock_study(stored(store))
    with store.engine.begin() as connection:  # another process's token now: what a takeover writes
        connection.execute(study_locks.update().values(token="another", pid=4321, host="elsewhere"))
    deadline = time.monotonic() + 10
    while lock.lost is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.lost == "another process took it over"
    with pytest.raises(LockLost, match="lost the lock of study held: another process took it over; stopped"):
        lock.check()
    lock.release()
    with store.engine.connect() as connection:  # the other holder's row stays
        assert [row.pid for row in connection.execute(study_locks.select())] == [4321]


def test_a_study_that_lost_its_lock_stops_before_its_next_write_and_leaves_the_trials_to_the_new_holder(tmp_path):
    from pipeline.search.study import TrialStarted, run_study
    from pipeline.spec.study_config import load_study
    from helpers import study_file

    db = str(tmp_path / "runs.db")
    store = Store(db)

    def take_over(event) -> None:  # while the first trial trains, another process takes the study over
        if isinstance(event, TrialStarted):
            with store.engine.begin() as connection:
                connection.execute(study_locks.update().values(token="another", pid=4321, host="elsewhere"))

    path = study_file(tmp_path, params='epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }', trials=2)
    with pytest.raises(LockLost, match="lost the lock of study tiny: process 4321 on host elsewhere took it over"):
        run_study(load_study(path), db, "cpu", log_file=tmp_path / "ax.log", on_event=take_over)
    (trial,) = store.trials(store.require_study("tiny").id)
    assert trial.status == "running"  # not written after the lock was lost, not even to mark it interrupted
    with store.engine.connect() as connection:
        assert [row.pid for row in connection.execute(study_locks.select())] == [4321]


def test_a_write_with_a_lock_another_process_took_over_raises_lock_lost_and_changes_nothing(tmp_path):
    check_writes_after_a_takeover_change_nothing(Store(str(tmp_path / "runs.db")))


def test_ax_is_not_written_once_the_lock_is_lost(tmp_path):
    from pipeline.library_logs import quiet_libraries
    from pipeline.search.study import create_study
    from pipeline.spec.study_config import load_study
    from helpers import study_file

    quiet_libraries(tmp_path / "ax.log")
    from pipeline.search.ax import Searcher

    store = Store(str(tmp_path / "runs.db"))
    study = load_study(study_file(tmp_path, params='epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }'))
    lock = store.lock_study(create_study(store, study))
    searcher = Searcher(study, store.url, lock)
    index, _ = searcher.ask()  # held: stored in Ax
    with store.engine.begin() as connection:
        connection.execute(study_locks.update().values(token="another", pid=4321, host="elsewhere"))
    with pytest.raises(LockLost, match="process 4321 on host elsewhere took it over"):
        searcher.complete(index, {"val_accuracy": 0.5})
    with pytest.raises(LockLost):  # and nothing more is proposed
        searcher.ask()
    lock.release()
    stored_in_ax = Searcher(study, store.url).client._experiment.trials
    assert [(i, t.status.name) for i, t in stored_in_ax.items()] == [(index, "RUNNING")]


def test_a_takeover_leaves_a_holder_that_refreshed_its_heartbeat_after_it_was_read_stale(tmp_path):
    """The takeover decides on the row it read: a holder that woke and beat in between keeps its lock."""
    store = Store(str(tmp_path / "runs.db"))
    study = stored(store)
    lock = store.lock_study(study)
    with store.engine.begin() as connection:  # not seen for ten minutes: stale
        connection.execute(study_locks.update().values(heartbeat_at=lock_module.now() - dt.timedelta(minutes=10)))
    with store.engine.connect() as connection:  # what a second process reads before it takes the lock over
        holder = connection.execute(study_locks.select()).first()
    assert lock.beat()  # ... and the holder wakes up and refreshes its heartbeat in between
    mine = dict(token="second", pid=4321, host="elsewhere", heartbeat_at=lock_module.now())
    assert not lock_module.take_over(store.engine, study_locks, study.id, holder, mine)
    lock.check()  # still its own
    with store.engine.connect() as connection:
        holder = connection.execute(study_locks.select()).first()
    assert lock_module.take_over(store.engine, study_locks, study.id, holder, mine)  # read as it is: taken
    with pytest.raises(LockLost, match="process 4321 on host elsewhere took it over"):
        lock.check()
    lock.release()


def test_loading_ax_writes_nothing_once_the_lock_is_lost(tmp_path):
    """Ax's load saves the experiment and strategy back: a holder that lost the lock before it loaded them
    (paused between taking the lock and loading) stops there, and the new holder's Ax records stay as they are."""
    from pipeline.library_logs import quiet_libraries
    from pipeline.search.study import create_study
    from pipeline.spec.study_config import load_study
    from helpers import study_file

    quiet_libraries(tmp_path / "ax.log")
    from pipeline.search.ax import Searcher

    store = Store(str(tmp_path / "runs.db"))
    study = load_study(study_file(tmp_path, params='epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }'))
    lock = store.lock_study(create_study(store, study))
    with store.engine.begin() as connection:
        connection.execute(study_locks.update().values(token="another", pid=4321, host="elsewhere"))
    with store.engine.connect() as connection:
        before = connection.execute(sa.text("select * from generation_strategy")).all()
    with pytest.raises(LockLost, match="process 4321 on host elsewhere took it over"):
        Searcher(study, store.url, lock)
    with store.engine.connect() as connection:
        assert connection.execute(sa.text("select * from generation_strategy")).all() == before
    lock.release()
