"""Entry point of `robust-tune`: the commands registered on the app, and the one place bad input becomes
exit code 2 (and a failed training or a lost server, exit code 1).

Nothing here or in the command modules imports torch or Ax at the top: `--help`, `report`,
`studies` and `methods` answer at once, and the commands that train import them when they run.
"""
from __future__ import annotations

import sys
from types import ModuleType

import typer
from rich.console import Console
from rich.markup import escape

from cli import train, predict, study, evaluate, campaign, export, data, bench  # noqa: F401, I001  (each registers its commands, in this order)
from cli.app import app
from cli.render import print_line
from pipeline.errors import DatabaseBusy, DatabaseFault, ServerLost, TrainingFailed, UserError

# Options this tool no longer takes, and what to type instead: (the command they belonged to, None for any; the
# old option; the new form). A command line with one is refused in one line before the parser reads it.
OLD_FORMS = (
    (None, "--json", "--json is now --format json"),
    (None, "--markdown", "--markdown is now --format markdown"),
    ("report", "--trials", "report --trials is now report --all-trials"),
    ("train", "--study", "train --study is now train --study-file"),
    ("evaluate", "--param", "evaluate --param is now evaluate --baseline-param"),
    ("evaluate", "-p", "evaluate -p is now evaluate --baseline-param"),
    *(("bench", f"--{mode}", f"bench --{mode} is now robust-tune bench {mode}")
      for mode in ("study", "search", "prefixes", "parallel", "startup")),
)


def old_form(argv: list[str]) -> str | None:
    """The new form of the first old option in `argv` (the arguments after `robust-tune`), None where there is
    none; what follows `--` is an argument, never an option."""
    command, args = (argv[0], argv[1:]) if argv else (None, [])
    if "--" in args:
        args = args[:args.index("--")]
    return next((new for where, old, new in OLD_FORMS if where in (None, command) and old in args), None)


def main(argv: list[str] | None = None) -> None:
    """Run the app; bad input prints one line naming the problem and exits with code 2; a training run that cannot
    go on (NaN loss), a server lost mid-run (the database's, a Dask scheduler), a database another process keeps
    locked, or a fault of the database's file or disk (full, read-only, damaged) one line and code 1. On a terminal
    the line wraps between words."""
    errors = Console(stderr=True, highlight=False)
    if (new := old_form(sys.argv[1:] if argv is None else list(argv))) is not None:
        print_line(errors, f"[bold red]error:[/] {escape(new)}", markup=True)
        sys.exit(2)
    if (health := _store_health()) is not None:
        health.forget()  # what an earlier command in this process opened
    try:
        code = app(args=argv, prog_name="robust-tune", standalone_mode=False)
        if (health := _store_health()) is not None and (damage := health.damage_found()) is not None:
            # a reader showed what it could read of a damaged file
            print_line(errors, f"[bold yellow]warning:[/] {escape(damage)}; what was shown is what could still be "
                       "read", markup=True)
    except DatabaseBusy as error:  # another program keeps the database locked: the environment, not the input
        print_line(errors, f"[bold red]error:[/] {escape(str(error))}", markup=True)
        sys.exit(1)
    except UserError as error:
        print_line(errors, f"[bold red]error:[/] {escape(str(error))}", markup=True)
        sys.exit(2)
    except TrainingFailed as error:
        print_line(errors, f"[bold red]training failed:[/] {escape(str(error))}", markup=True)
        sys.exit(1)
    except (ServerLost, DatabaseFault) as error:  # the environment failed, not the input
        print_line(errors, f"[bold red]error:[/] {escape(str(error))}", markup=True)
        sys.exit(1)
    except typer.TyperException as error:  # usage errors from the argument parser
        if type(error).__name__ == "NoArgsIsHelpError":  # a bare group (`robust-tune`, `robust-tune data`)
            print(error.format_message())  # its help, which is the whole message
            sys.exit(2)
        context = getattr(error, "ctx", None)  # the command the error is about: its own --help
        command = context.command_path if context is not None else "robust-tune"
        print_line(errors, f"[bold red]error:[/] {escape(error.format_message())} (see {command} --help)",
                   markup=True)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        errors.print("aborted")
        sys.exit(130)
    except Exception as error:  # a database kept locked, or its file or disk failed, where the command did not say so
        from pipeline.store import fault_in, is_busy

        if (fault := fault_in(error)) is not None:  # full, read-only, damaged: the first cause, however deep
            print_line(errors, f"[bold red]error:[/] {escape(str(fault))}", markup=True)
            sys.exit(1)
        if not is_busy(error):
            raise
        print_line(errors, "[bold red]error:[/] the database is busy: another process keeps it locked in the middle "
                   "of a write (one paused with Ctrl-Z, perhaps); resume or stop that process, then try again",
                   markup=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _store_health() -> ModuleType | None:
    """The store's notes of the database this command opened (pipeline/store/health.py), once a command has opened
    one; None before: the commands that open none never import SQLAlchemy."""
    return sys.modules.get("pipeline.store.health")
