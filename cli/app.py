"""The Typer app every command module registers its commands on, and its --version option.

Command modules import `app` from here; cli/main.py imports them (so they register) and runs the app.
"""
from __future__ import annotations

import importlib
import importlib.util
import textwrap
from importlib.metadata import version as package_version
from typing import Annotated, Any

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


# The click that formats the help: the one typer bundles (0.2x), else click itself.
_WRAPPING = importlib.import_module("typer._click._textwrap" if importlib.util.find_spec("typer._click")
                                    else "click._textwrap")
_CLICKS_WRAPPER = getattr(_WRAPPING, "TextWrapper")


def _between_words(self: textwrap.TextWrapper, *args: Any, **kwargs: Any) -> None:
    """click's help wrapper, breaking lines between words only: never at a hyphen inside one, nor inside a word too
    long for the line, so an option (--trials-per-gpu), a path (studies/digits-campaign.toml) or a command
    ('robust-tune[postgres]') is copied whole from `--help` at any width."""
    _CLICKS_WRAPPER.__init__(self, *args, **{**kwargs, "break_on_hyphens": False, "break_long_words": False})


# That click wraps every help text, option and usage line with the wrapper its wrap_text takes from here when it
# wraps (tests/cli/test_fits_80.py checks it still does): help formatted in this process only.
setattr(_WRAPPING, "TextWrapper", type("WordWrapper", (_CLICKS_WRAPPER,), {"__init__": _between_words}))


def _print_version(asked: bool) -> None:
    if asked:
        print(f"robust-tune {package_version('robust-tune')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    pass
