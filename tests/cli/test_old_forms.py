"""Options the tool no longer takes: each is refused in one line naming what to type now (exit 2), whatever else
the command line holds, and nothing runs; an option's new name works where its old one is refused."""
import pytest

from helpers import one_line

from cli.main import OLD_FORMS


@pytest.mark.parametrize("args, line", [
    (["train", "--json"], "error: --json is now --format json"),
    (["predict", "x", "--weights", "m.pt", "--json"], "error: --json is now --format json"),
    (["bench", "steps", "--markdown"], "error: --markdown is now --format markdown"),
    (["bench", "--search"], "error: bench --search is now robust-tune bench search"),
    (["report", "--trials"], "error: report --trials is now report --all-trials"),
    (["train", "--study", "best.toml"], "error: train --study is now train --study-file"),
    (["evaluate", "s", "-p", "beta=2"], "error: evaluate -p is now evaluate --baseline-param"),
    (["evaluate", "s", "--param", "beta=2"], "error: evaluate --param is now evaluate --baseline-param"),
])
def test_an_old_form_is_one_line_naming_the_new_one(cli, args, line):
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert one_line(err) == line


def test_an_option_of_that_name_elsewhere_keeps_its_meaning(cli, tmp_path):
    """run's --trials is its budget and train's -p its parameter: only report's and evaluate's forms are old."""
    code, _, err = cli("run", str(tmp_path / "none.toml"), "--trials", "2")
    assert code == 2 and "is now" not in err and "none.toml" in one_line(err)
    code, _, err = cli("report", "--db", str(tmp_path / "none.db"), "--", "--trials")
    assert "is now" not in err


def test_every_new_form_is_an_option_of_its_command():
    """The line's advice works: each new option exists where it says."""
    from typer.main import get_command

    from cli.app import app

    root = get_command(app)
    for command, _, new in OLD_FORMS:
        words = new.split(" is now ")[1].removeprefix("robust-tune ").split()
        if command is None:
            assert words[0] == "--format"
            continue
        target = root.commands[words[0]]  # type: ignore[attr-defined]
        if len(words) > 1 and not words[1].startswith("-"):
            target = target.commands[words[1]]
        else:
            assert words[1] in {name for p in target.params for name in p.opts}, new
