"""The study lock tells its holder when it has lost the lock: a real SQLite database, two Stores on it."""
import datetime as dt
import time

import pytest

from pipeline.errors import UserError
from pipeline.store import LockLost, Store, study_locks
from pipeline.store import lock as lock_module
from pipeline.study_config import parse_study


def stored(store: Store, name: str = "held"):
    return store.create_study(parse_study({"name": name, "method": {"name": "ls"}}, f"{name}.toml"))


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
    from pipeline.study import TrialStarted, run_study
    from pipeline.study_config import load_study
    from test_study import study_file

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
