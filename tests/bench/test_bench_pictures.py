"""The pictures drawn outside a study's report (the verdict, `bench search`, `bench prefixes`) keep every
title, label and legend entry inside the picture, at the sizes they are drawn for a user: many methods, a long
campaign name, every strategy of the search benchmark."""
import random

import pytest

from conftest import texts_off_canvas
from pipeline.library_logs import quiet_libraries


@pytest.fixture(scope="module")
def log_file(tmp_path_factory) -> str:
    return quiet_libraries(str(tmp_path_factory.mktemp("log") / "robust-tune.log"))


def test_a_verdict_of_many_methods_under_a_long_campaign_name_stays_inside_its_picture():
    from pipeline.report.plots import verdict_picture
    from pipeline.compare.decision import Design
    from pipeline.compare.verdict import METRICS, MethodResult, verdict_of

    rng = random.Random(0)
    methods = ["erm", "ls", "gils", "hws", "gils+hws", "cb", "groupdro", "mixup+l2rw"]
    values = {m: {k: {(0, s): 0.5 + rng.gauss(0, 0.05) for s in range(5)} for k in METRICS} for m in methods}
    results = [MethodResult(m, [f"c.{m}"], [{}], 5, {k: (0.5, 0.1) for k in METRICS}, 8, 8, 8, 1.0, 1.0)
               for m in methods]
    design = Design(("test_balanced_accuracy", "smallest_class_accuracy"),
                    {"test_balanced_accuracy": 0.01, "smallest_class_accuracy": 0.05}, seeds=5, max_seeds=5)
    verdict = verdict_of("defects-line-4-resnet50-spring-batch-with-a-long-name", design, values, results,
                         "the training seed and the whole split")
    picture = verdict_picture(verdict)
    assert picture.data["methods"] == methods[1:]
    assert texts_off_canvas(picture) == []


def test_the_search_benchmarks_picture_of_every_strategy_stays_inside_its_canvas(log_file):
    from pipeline.report.plots import search_picture
    from pipeline.bench.search import search_benchmark, strategies

    _, summaries, checkpoints = search_benchmark(("hws-synthetic", "gils-synthetic"), tuple(strategies()), 1, 4, 2,
                                                 1, log_file)
    picture = search_picture(summaries, checkpoints)
    assert len({s.strategy for s in summaries}) == len(strategies())
    assert texts_off_canvas(picture) == []


def test_the_epochs_benchmarks_picture_stays_inside_its_canvas(log_file):
    from pipeline.bench.prefixes import PROBLEM, VARIANTS, epochs_benchmark
    from pipeline.report.plots import epochs_picture

    runs, _, _ = epochs_benchmark(VARIANTS, 1, 12, 2, 2, 1, log_file)
    picture = epochs_picture(runs, 12, PROBLEM)
    assert texts_off_canvas(picture) == []
