"""Where the libraries' messages go."""
from pathlib import Path

from pipeline.library_logs import SERVER_LOG_FILE, log_file_for


def test_the_log_goes_beside_a_sqlite_database_and_to_a_stated_place_for_a_server():
    assert log_file_for(None, None) == Path("runs/robust-tune.log")  # beside the default database
    assert log_file_for(None, "/data/exp/a.db") == Path("/data/exp/a.log")
    assert log_file_for(None, "sqlite:////data/exp/b.sqlite?timeout=5") == Path("/data/exp/b.log")
    assert log_file_for(None, "postgresql://me@host/db") == SERVER_LOG_FILE
    assert log_file_for("mine.log", "/data/exp/a.db") == Path("mine.log")
