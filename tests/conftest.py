"""Shared fixtures: the real digits data on CPU, and the CLI run in-process."""
from __future__ import annotations

import os

os.environ["ROBUST_TUNE_OFFLINE"] = "1"  # tests never download; weights come from files they create

import pytest
import torch

from cli.main import main
from pipeline.config import DataConfig
from pipeline.data import Dataset, load_dataset


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return load_dataset(DataConfig(), torch.device("cpu"))


@pytest.fixture
def cli(capsys):
    """Run `robust-tune ARGS...` in this process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
