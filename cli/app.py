"""The Typer app every command module registers its commands on, and its --version option.

Command modules import `app` from here; cli/main.py imports them (so they register) and runs the app.
"""
from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated

import typer

app = typer.Typer(
    name="robust-tune",
    help="Tune robust training methods (GI-LS, hardness-weighted DRO) with Bayesian optimisation, "
         "and compare them honestly against plain training.",
    no_args_is_help=True,
    add_completion=True,
    # Plain help: typer's Rich help panels print every flag as `--wide <bool>`, as if it took a value.
    rich_markup_mode=None,
)


def _print_version(asked: bool) -> None:
    if asked:
        print(f"robust-tune {package_version('robust-tune')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    pass
