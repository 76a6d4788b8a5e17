"""What the complete report page (`report --format html`) holds: every selected study's tables (best combination,
Pareto set, the model's pick, parameter importance, trials), their evaluations compared, the verdict of each campaign
they belong to, and every picture of them; one page, so a reader needs no other command."""
from __future__ import annotations

import datetime as dt
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.report.study_tables import (_select, best_table, compare_table, importance_table, model_pick_table,
                                          pareto_tables, trials_table)
from pipeline.store import Store
from pipeline.report.html_report import Image
from pipeline.report.tables import Table

if TYPE_CHECKING:
    from pipeline.report.plots import Picture
    from pipeline.compare.verdict import Verdict


def page_tables(store: Store, names: list[str] | None, baseline: str | None = None,
                compare: bool = False) -> tuple[list[Table], list[Verdict]]:
    """The page's tables in reading order, and the verdicts of the campaigns whose studies are selected and have
    evaluations (their pictures go on the page too). With `compare` (report --compare) studies without evaluations
    are refused, as in every other format."""
    from pipeline.compare.verdict import take_verdict
    from pipeline.report.verdict_report import verdict_tables

    selected = _select(store, names)
    evaluated = {s.name for s in selected if store.evaluations(s.id)}
    tables = [best_table(store, names), *pareto_tables(store, names)]
    tables += [t for t in (model_pick_table(store, names), importance_table(store, names)) if t is not None]
    if evaluated or compare:  # compare_table refuses when nothing was evaluated
        tables.append(compare_table(store, [s.name for s in selected if s.name in evaluated] or names, baseline))
    verdicts = [take_verdict(store, task) for campaign in store.all_campaigns() for _, task in campaign.task_records()
                if evaluated & {name for method in task.methods for name in task.study_names(method)}]
    for verdict in verdicts:
        tables += verdict_tables(verdict)
    tables += [trials_table(store, s.name) for s in selected]
    return tables, verdicts


def page_pictures(store: Store, names: list[str] | None, verdicts: list[Verdict], log_file: str | Path
                  ) -> list[Picture]:
    """Every picture of the selected studies (plots.draw), then each verdict's and its budget curves'."""
    from pipeline.report.plots import budget_picture, draw, load_studies, verdict_picture  # matplotlib, Ax: drawing

    pictures = draw(load_studies(store, names, log_file))
    for verdict in verdicts:
        pictures += [p for p in (verdict_picture(verdict), budget_picture(verdict)) if p is not None]
    return pictures


def page_images(pictures: list[Picture]) -> dict[str, list[Image]]:
    """The pictures as the page shows them: under each study's (or data set's, or campaign's) name, each with its
    file name and its sentence (the file name where it has none)."""
    images: dict[str, list[Image]] = {}
    for picture in pictures:
        images.setdefault(picture.study, []).append((picture.file_name, picture.caption or picture.file_name,
                                                     picture.png))
    return images


def page_source(database: str) -> str:
    """Where a page came from, for its reader: the tool's version, when it was drawn, and the database."""
    try:
        tool = f"robust-tune {version('robust-tune')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        tool = "robust-tune (version unknown: not installed)"
    drawn = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"Drawn by {tool} on {drawn} from the database {database}."
