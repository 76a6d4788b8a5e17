"""`robust-tune bench` as subcommands: each `--help` lists only the options its benchmark uses, within 80
columns; `bench` alone runs `steps`; an old mode flag (`bench --search ...`) is refused in one line naming the
subcommand."""
import re

import pytest

from helpers import one_line, robust_tune

OWN_OPTIONS = {
    "steps": {"--setting", "--device", "--method", "--precision", "--rounds", "--steps", "--batch-size",
              "--backbone", "--image-size", "--format"},
    "study": {"--device", "--workers", "--trials", "--image-size", "--epochs", "--format"},
    "search": {"--problem", "--strategy", "--pick", "--seeds", "--trials", "--initial", "--splits", "--processes",
               "--plot", "--force", "--format"},
    "prefixes": {"--variant", "--seeds", "--budget", "--initial", "--min-epochs", "--processes", "--plot",
                 "--force", "--format"},
    "parallel": {"--workers", "--trials", "--epochs", "--threads", "--rounds", "--format"},
    "workers": {"--set", "--device", "--rounds", "--format"},
    "runs": {"--runs", "--threads", "--epochs", "--device", "--rounds", "--format"},
    "startup": {"--rounds", "--db", "--format"},
    "verdict": {"--from", "--db", "--campaigns", "--seed", "--truth", "--methods", "--replicates",
                "--max-replicates", "--replicates-per-round", "--seeds", "--seeds-per-round", "--max-seeds", "--trim",
                "--image-correlation", "--collapse", "--primary", "--smallest-effect", "--level", "--test-images",
                "--split-sd", "--seed-sd", "--interaction-sd", "--search-sd", "--correlation", "--processes",
                "--format"},
}


@pytest.mark.parametrize("name", OWN_OPTIONS)
def test_each_subcommands_help_lists_only_its_own_options_within_80_columns(name):
    done = robust_tune("bench", name, "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    options = done.stdout.split("Options:", 1)[1]
    listed = set(re.findall(r"^  (--[a-z-]+)", options, flags=re.MULTILINE))
    assert listed == OWN_OPTIONS[name] | {"--help"}
    assert all(len(line) <= 80 for line in done.stdout.splitlines()), done.stdout
    text = " ".join(done.stdout.split())
    old_modes = ("--study", "--search", "--prefixes", "--parallel", "--startup")  # (verdict's --search-sd is not one)
    assert "With --" not in text and not any(re.search(rf"{flag}(?![\w-])", text) for flag in old_modes)


def test_bench_help_lists_the_subcommands():
    done = robust_tune("bench", "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    commands = [line.split()[0] for line in done.stdout.split("Commands:", 1)[1].strip().splitlines()]
    assert commands == list(OWN_OPTIONS)


@pytest.fixture
def steps_runs(monkeypatch):
    """The step-time benchmark's measurements replaced by a record of what they were asked."""
    asked = []

    def benchmark(setting, device, rounds, steps, *rest):
        asked.append((setting, device, rounds, steps))
        return []

    monkeypatch.setattr("pipeline.bench.steps.benchmark", benchmark)
    return asked


@pytest.mark.parametrize("args, asked", [
    ([], [("digits", "auto", 5, 10), ("resnet18", "auto", 5, 10)]),
    (["steps", "--setting", "paper", "--steps", "3", "--format", "markdown"], [("paper", "auto", 5, 3)]),
])
def test_bench_without_a_subcommand_runs_steps(cli, steps_runs, args, asked):
    code, out, err = cli("bench", *args)
    assert code == 0, err
    assert steps_runs == asked


@pytest.mark.parametrize("old", [["--search", "--seeds", "20"], ["--rounds", "2", "--startup"], ["--prefixes"],
                                 ["--study", "--workers", "2"], ["--parallel"], ["search", "--search"]])
def test_an_old_mode_flag_is_one_line_naming_the_subcommand(cli, old):
    mode = next(arg for arg in old if arg.startswith("--") and arg[2:] in OWN_OPTIONS)
    code, out, err = cli("bench", *old)
    assert (code, out) == (2, "")
    assert one_line(err) == f"error: bench {mode} is now robust-tune bench {mode[2:]}"


def test_a_benchmark_prints_a_table_for_people_or_markdown_for_the_readme(cli, tmp_path):
    code, out, err = cli("bench", "startup", "--rounds", "1", "--db", str(tmp_path / "none.db"))
    assert code == 0, err
    assert "Start-up, the median of 1 rounds" in out and "robust-tune --help" in out and "|---" not in out
    code, out, err = cli("bench", "startup", "--rounds", "1", "--db", str(tmp_path / "none.db"), "--format", "markdown")
    assert code == 0, err
    assert "| `robust-tune --help` |" in out and "|---|" in out
    assert not (tmp_path / "none.db").exists()  # the reading commands it times create nothing
