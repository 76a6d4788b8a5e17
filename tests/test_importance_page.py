"""Parameter importance and the complete HTML page: a study stored through the tool's own loop (real Ax, its real
GP, real SQLite) whose trials return synthetic results, so no training is needed to know which parameter matters."""
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.store import Store
from pipeline.study import run_study
from pipeline.study_config import load_study
from pipeline.trial import InProcessRunner, Outcome, run_trial
from test_study import study_file

# Three searched parameters of three kinds (a log range, a linear range, a choice); the objective depends on lr_head.
SEARCH = ('epochs = 1\nmomentum = 0.0\nbeta = { low = 0.1, high = 1000, log = true }\n'
          'lr_head = { low = 0.01, high = 0.1 }\nimportance_sampling = { values = [false, true] }')
NAME = "onlylr"


class SyntheticRunner(InProcessRunner):
    """Trials that end at once with a real trial's result whose accuracies depend on lr_head alone."""

    def __init__(self, template: dict) -> None:
        super().__init__()
        self.template = template

    def wait(self, on_event):
        job, self.queued = self.queued, None
        result = copy.deepcopy(self.template)
        accuracy = 0.3 + 6.0 * job.parameters["lr_head"]  # 36% to 90%, nothing else matters
        result.update(val_accuracy=accuracy, test_accuracy=accuracy - 0.02, test_worst_class_accuracy=accuracy - 0.2)
        return [Outcome(job.trial_index, result=result)]


@pytest.fixture(scope="module")
def synthetic_db(tmp_path_factory) -> Path:
    """`onlylr` (10 completed trials, all Sobol) and `few` (4 trials, below importance's minimum), stored by the
    study loop; one real 1-epoch digits trial gives their results' shape."""
    folder = tmp_path_factory.mktemp("importance")
    db = folder / "runs.db"
    for name, trials in ((NAME, 10), ("few", 4)):
        path = study_file(folder, name=name, method="hws", params=SEARCH, trials=trials)
        path.write_text(path.read_text().replace("initial = 2", f"initial = {trials}"))
        study = load_study(path)
        template = run_trial(study, {"beta": 1.0, "lr_head": 0.05, "importance_sampling": False}, 0, "cpu")
        run_study(study, str(db), "cpu", log_file=folder / "ax.log", runner=SyntheticRunner(template))
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
    assert any(n.startswith("few: no importance: 4 completed trial(s); it needs at least 8") for n in importance["notes"])
    code, out, err = cli("report", "--db", str(synthetic_db))
    assert code == 0 and "Which parameters mattered" in out and "lr_head" in out


def test_a_report_never_imports_torch_to_show_importance(synthetic_db):
    code = ("import sys; from cli.main import main\ntry: main(['report', '--db', sys.argv[1]])\n"
            "except SystemExit as e: assert not e.code, e.code\nassert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code, str(synthetic_db)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lr_head" in done.stdout
