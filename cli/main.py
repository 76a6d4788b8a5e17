"""Entry point of `robust-tune`: the Typer app and the one place bad input becomes exit code 2."""
from __future__ import annotations

import sys

import typer
from rich.console import Console

from pipeline.errors import TrainingFailed, UserError

app = typer.Typer(
    name="robust-tune",
    help="Tune robust training methods (GI-LS, hardness-weighted DRO) with Bayesian optimisation, "
         "and compare them honestly against plain training.",
    no_args_is_help=True,
    add_completion=False,
)

from cli import train, study, data, bench  # noqa: E402, F401, I001  (each registers its commands, in this order)


def main(argv: list[str] | None = None) -> None:
    """Run the app; bad input prints one line naming the problem and exits with code 2, a training
    run that cannot go on (NaN loss) one line and code 1."""
    errors = Console(stderr=True, highlight=False)
    try:
        code = app(args=argv, prog_name="robust-tune", standalone_mode=False)
    except UserError as error:
        errors.print(f"[bold red]error:[/] {error}", markup=True, soft_wrap=True)
        sys.exit(2)
    except TrainingFailed as error:
        errors.print(f"[bold red]training failed:[/] {error}", markup=True, soft_wrap=True)
        sys.exit(1)
    except typer.TyperException as error:  # usage errors from the argument parser
        errors.print(f"[bold red]error:[/] {error.format_message()} (see robust-tune --help)",
                     markup=True, soft_wrap=True)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        errors.print("aborted")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
