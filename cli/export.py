"""`robust-tune export`: what the database holds, written to another tool (MLflow)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from cli.app import app
from cli.options import Db
from cli.render import print_line, stderr, stdout
from pipeline.errors import UserError


@app.command()
def export(
    studies: Annotated[Optional[list[str]], typer.Argument(
        help="Study names (default: every study, and every campaign's verdict).")] = None,
    mlflow: Annotated[Optional[str], typer.Option(
        "--mlflow", metavar="URI",
        help="An MLflow tracking URI: a server (http://HOST:5000), a database (sqlite:///mlflow.db) or a folder "
             "(file:./mlruns). Needs pip install 'robust-tune[mlflow]'.")] = None,
    db: Db = None,
) -> None:
    """Export studies and campaign verdicts to MLflow.

    Write stored studies (a parent run each, a nested run per trial with its per-epoch metrics) and campaign
    verdicts to MLflow. The database is only read; exporting again adds only what is new."""
    if mlflow is None:
        raise UserError("export needs a destination: --mlflow URI (e.g. --mlflow file:./mlruns)")
    from pipeline.report.export_mlflow import Exported, export_to_mlflow, mlflow_client
    from pipeline.store import Store

    store = Store(db, create=False)
    if not store.all_studies():
        raise UserError(f"no studies in {store.shown} yet; run one with `robust-tune run STUDY.toml`")
    mlflow_client(mlflow)  # before reading everything: a missing MLflow is one line

    def on_run(exported: Exported) -> None:
        if exported.kind != "trial":
            stderr.print(f"{exported.kind} {exported.name}: {'exported' if exported.created else 'already there'}")

    done = export_to_mlflow(store, mlflow, studies, on_run)
    new = [e for e in done if e.created]
    counts = {kind: sum(e.kind == kind for e in new) for kind in ("study", "trial", "verdict")}
    print_line(stdout, f"exported to {mlflow}: new runs for {counts['study']} "
               f"stud{'y' if counts['study'] == 1 else 'ies'}, {counts['trial']} trial(s) and {counts['verdict']} "
               f"verdict(s); {len(done) - len(new)} run(s) were there already")
