"""`robust-tune bench workers`: a study file run as `run` runs it on the default workers (a real Dask LocalCluster)
and with --workers 1, side by side, each into a fresh database; the table says the default trained trials at once
and kept the budget exactly."""
import pytest

from pipeline.search.study import busy_seconds
from pipeline.search.parallel import usable_cores
from helpers import robust_tune, study_file

ERM = "epochs = 1\nlr_backbone = 0.05\nmomentum = 0.0\nlr_head = { low = 0.02, high = 0.1 }"


def test_the_busy_time_is_what_the_union_of_the_spans_covers():
    assert busy_seconds([(6, 10), (0, 4), (1, 2), (3, 5)]) == pytest.approx(9)  # 0 to 5 and 6 to 10
    assert busy_seconds([(0, 5), (5, 10)]) == 10 and busy_seconds([]) == 0


@pytest.mark.skipif(usable_cores() < 2, reason="the default is one worker per core")
def test_bench_workers_runs_a_study_on_the_default_and_on_one_and_prints_their_ratio(tmp_path):
    path = study_file(tmp_path, "pair", "erm", params=ERM, trials=3)
    path.write_text(path.read_text().replace("initial = 2", "initial = 3"))
    done = robust_tune("bench", "workers", str(path), "--set", "seed=1", "--format", "markdown", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    default, one = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| 1 ")]
    assert [cell.strip() for cell in default[1:2] + default[5:]] == ["default, 2", "3/0", default[6].strip(), "yes",
                                                                      "yes"]
    assert [cell.strip() for cell in one[1:2] + one[5:6] + one[7:]] == ["--workers 1", "3/0", "no", "yes"]
    assert one[3].strip() == "1.00x" and default[3].strip().endswith("x")
    assert list(tmp_path.iterdir()) == [path]  # nothing left behind: the databases were temporary
