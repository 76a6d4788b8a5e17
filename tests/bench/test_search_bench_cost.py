"""`bench search`'s cheaper acquisition variants (`gp-fast`, `gp-fast2`) and its seconds per proposal: tiny budgets."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.bench.problems import Problem
from pipeline.params import Range


def peaked() -> Problem:
    """One learning rate, its best inside the box."""
    search = {"lr_head": Range(0.01, 1.0, log=True)}

    def truth(parameters):
        return float(0.9 - 0.1 * (np.log10(parameters["lr_head"]) + 1) ** 2)

    return Problem("peaked", "", search, {"lr_head": "float"}, truth, lambda p, rng: truth(p), 0.9)


@pytest.mark.parametrize("strategy, restarts, raw_samples",
                         [("gp", 20, 1024), ("gp-fast", 5, 256), ("gp-fast2", 2, 64)])
def test_a_fast_variant_runs_and_ax_optimises_its_acquisition_with_its_settings(monkeypatch, strategy, restarts,
                                                                                 raw_samples):
    """What BoTorch's optimiser is handed for every GP proposal, read where Ax calls it: the study's gp keeps Ax's
    defaults; the variants run only when named."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries("/dev/null")
    from ax.generators.torch.botorch_modular import acquisition

    from pipeline.bench.search import run_search, strategies

    handed = []
    optimize_acqf = acquisition.optimize_acqf

    def spy(**kwargs):
        handed.append((kwargs["num_restarts"], kwargs["raw_samples"]))
        return optimize_acqf(**kwargs)

    monkeypatch.setattr(acquisition, "optimize_acqf", spy)
    run = run_search(peaked(), strategy, 0, 4, 2, (4,))
    assert len(run.truths) == 4 and len(run.model_seconds()) == 2
    assert handed == [(restarts, raw_samples)] * 2
    assert (strategy in strategies()) == (strategy == "gp")


def test_the_benchmark_prints_seconds_per_proposal_and_the_ratio_to_gp(cli):
    code, out, err = cli("bench", "search", "--trials", "3", "--initial", "2", "--seeds", "1",
                         "--problem", "hws-synthetic", "--strategy", "gp", "--strategy", "gp-fast",
                         "--format", "markdown")
    assert code == 0, err
    assert "**Seconds per proposal after the first 2 trainings" in out
    assert "| strategy | hws-synthetic | ratio to gp |" in out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| gp")}
    assert rows["gp"].endswith("| 1.00 |") and "gp-fast" in rows
