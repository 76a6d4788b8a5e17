"""Whole studies timed: the GI-LS paper's Table 3 study (studies/paper/gils-mt-defect-resnet18.toml) over
a generated Magnetic Tile tree of the real size, run one trial at a time in this process and with N
trials at once on Dask workers sharing the device (the study's own machinery: pipeline/search/parallel.py).

Everything lives in a temporary folder that is removed afterwards; nothing is downloaded (the network
starts from random weights, which changes no step's cost).
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from pipeline.config import resolve_device
from pipeline.data import load_dataset
from pipeline.data.paper_splits import MT_POOLS, magnetic_tile_splits, write_splits
from pipeline.errors import UserError
from pipeline.search.parallel import trial_runner
from pipeline.search.study import TrialEnded, run_study
from pipeline.spec.study_config import load_study

STUDY_FILE = Path(__file__).resolve().parents[2] / "studies" / "paper" / "gils-mt-defect-resnet18.toml"
RAW_SIZE = 256  # pixels a side of the generated tiles (the real ones are a few hundred pixels, of varied sizes)


@dataclass(frozen=True)
class StudyTiming:
    workers: int  # 0: one trial at a time in this process
    seconds: float  # wall time of the whole study, from start to its last trial stored
    completed: int
    failed: int


def fake_magnetic_tile_tree(root: Path, size: int = RAW_SIZE, seed: int = 0) -> Path:
    """MT_<Class>/Imgs/<stem>.jpg as many as the real tree holds: grayscale noise around a shade per class
    (learnable, so no trial collapses onto one class)."""
    noise = np.random.default_rng(seed)
    for k, (name, count) in enumerate(MT_POOLS.items()):
        folder = root / f"MT_{name}" / "Imgs"
        folder.mkdir(parents=True)
        for i in range(count):
            pixels = np.clip(noise.normal(40 + 35 * k, 30, (size, size)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"exp_{i}.jpg")
    return root


def study_benchmark(device: str = "auto", workers: tuple[int, ...] = (2, 4, 8), trials: int = 20,
                    image_size: int = 224, epochs: int | None = None, raw_size: int = RAW_SIZE,
                    report: Callable[[str], None] = lambda message: None) -> list[StudyTiming]:
    """Wall time of the Table 3 GI-LS study (`trials` trials) alone and with each number of `workers`
    sharing the device; `epochs` fixes the epochs (otherwise searched in the paper's [21, 60])."""
    if not STUDY_FILE.is_file():
        raise UserError(f"the study benchmark needs the study file {STUDY_FILE}, shipped with the source")
    if any(n < 2 for n in workers):
        raise UserError("--workers for the study benchmark counts trials at once: 2 or more")
    resolved = resolve_device(device)
    with tempfile.TemporaryDirectory(prefix="robust-tune-study-bench-") as folder:
        root = Path(folder)
        report("generating a Magnetic Tile tree of the real size")
        fake_magnetic_tile_tree(root / "raw", raw_size)
        write_splits(root / "splits", magnetic_tile_splits(root / "raw", seed=0))
        overrides = {"data.manifest": str(root / "splits" / "mt-defect"), "data.cache_dir": str(root / "cache"),
                     "data.image_size": image_size, "model.weights": "none", "budget.trials": trials}
        if epochs is not None:
            overrides["params.epochs"] = epochs
        study = load_study(STUDY_FILE, [f"{key}={json.dumps(value)}" for key, value in overrides.items()])
        report("decoding the images once (every run below reads them from the cache)")
        load_dataset(study.train_config({}, study.seed).data, resolved)
        timings = []
        for n in (0, *workers):
            where = f"{n} trials at once" if n else "one trial at a time"

            def on_event(event: Any, where: str = where) -> None:
                if isinstance(event, TrialEnded):
                    report(f"{where}: trial {event.trial_index + 1} {event.status}")

            start = time.perf_counter()
            summary = run_study(study, db=str(root / f"study-{n}.db"), device=device, log_file=root / "study.log",
                                on_event=on_event, runner=trial_runner(n or 1, trials_per_gpu=max(n, 1),
                                                                       device=device, log_file=str(root / "study.log"),
                                                                       oversubscribe=True))
            timings.append(StudyTiming(n, time.perf_counter() - start, summary.completed, summary.failed))
    return timings
