"""The GI-LS paper's data sets (Tables 1 and 2) drawn from the raw Magnetic Tile and MVTec AD trees.

Each split takes exactly the paper's per-class train/test counts from the class's pool of images,
chosen at random but deterministically for a seed, and is written as a manifest folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.data.manifest import Manifest, write_manifest
from pipeline.errors import UserError

Counts = dict[str, tuple[int, int]]  # class name -> (train, test), in the paper's column order

# Table 1 of the GI-LS paper.
MT_DEFECT: Counts = {"Uneven": (54, 49), "Blowhole": (67, 48), "Break": (46, 39), "Crack": (28, 26), "Fray": (13, 16)}
MT: Counts = {"Free": (460, 492), "Uneven": (41, 62), "Blowhole": (57, 58), "Break": (52, 33), "Crack": (27, 27),
              "Fray": (13, 16)}
# Table 2 ('Free' is drawn from the defect-free images, train/good and test/good pooled).
WOOD: Counts = {"Free": (110, 137), "color": (4, 4), "combined": (4, 7), "hole": (3, 7), "liquid": (4, 6),
                "scratch": (12, 9)}
CARPET: Counts = {"Free": (167, 113), "color": (12, 7), "hole": (12, 5), "thread": (14, 5), "cut": (10, 7),
                  "metal_contamination": (13, 4)}
MVTEC = {"wood": WOOD, "carpet": CARPET}

# Images per class folder of the raw Magnetic Tile tree (the design notes, section 5).
MT_POOLS = {"Blowhole": 115, "Break": 85, "Crack": 57, "Fray": 32, "Free": 952, "Uneven": 103}

FREE = "Free"
JPEG_SUFFIXES = (".jpg", ".jpeg")


@dataclass(frozen=True)
class Pool:
    """The images a class can be drawn from (paths relative to the raw root) and where they were looked for."""

    paths: tuple[str, ...]
    where: str


def magnetic_tile_splits(root: Path, seed: int) -> dict[str, Manifest]:
    """MT-Defect and MT from the Magnetic Tile repository: MT_<Class>/Imgs/*.jpg (the .png masks are skipped)."""
    root = _existing_folder(root)
    pools = {name: Pool(_files(root, root / f"MT_{name}" / "Imgs", JPEG_SUFFIXES), f"MT_{name}/Imgs/*.jpg")
             for name in MT}
    return {"mt-defect": draw_split("mt-defect", pools, MT_DEFECT, seed, root),
            "mt": draw_split("mt", pools, MT, seed, root)}


def mvtec_split(root: Path, category: str, seed: int) -> dict[str, Manifest]:
    """Wood or Carpet from MVTec AD: <category>/train/good and test/<defect> (ground_truth masks are skipped)."""
    if category not in MVTEC:
        raise UserError(f"unknown MVTec category {category!r}; the paper uses {', '.join(MVTEC)}")
    root = _existing_folder(root)
    base = root / category
    if not base.is_dir():
        raise UserError(f"no folder {category!r} in {root}; pass the MVTec AD folder that holds {category}/")
    table = MVTEC[category]
    free = _files(root, base / "train" / "good", (".png",)) + _files(root, base / "test" / "good", (".png",))
    pools = {FREE: Pool(free, f"{category}/train/good + {category}/test/good")}
    pools |= {name: Pool(_files(root, base / "test" / name, (".png",)), f"{category}/test/{name}")
              for name in table if name != FREE}
    return {category: draw_split(category, pools, table, seed, root)}


def draw_split(split: str, pools: dict[str, Pool], table: Counts, seed: int, root: Path) -> Manifest:
    """Draw each class's train and test images from its pool, without overlap; a short pool is a UserError."""
    import torch  # here, not at the top: `robust-tune data --help` should not load it

    generator = torch.Generator().manual_seed(seed)
    paths: list[str] = []
    labels: list[int] = []
    is_train: list[bool] = []
    for label, (name, (n_train, n_test)) in enumerate(table.items()):
        pool = pools[name]
        needed = n_train + n_test
        if len(pool.paths) < needed:
            raise UserError(f"{split}: class {name} has {len(pool.paths)} images, needs {needed} "
                            f"({n_train} train + {n_test} test); looked in {pool.where} under {root}")
        order = torch.randperm(len(pool.paths), generator=generator)[:needed].tolist()
        chosen = sorted((pool.paths[i], rank < n_train) for rank, i in enumerate(order))
        paths += [path for path, _ in chosen]
        is_train += [train for _, train in chosen]
        labels += [label] * needed
    return Manifest(tuple(table), tuple(paths), tuple(labels), tuple(is_train), root)


def write_splits(out: Path, manifests: dict[str, Manifest], force: bool = False) -> list[Path]:
    """Write each manifest to out/<split name>; an existing non-empty folder is refused unless `force`,
    and `out` inside the raw data folder always (the raw data is never written to)."""
    for manifest in manifests.values():
        if manifest.root is not None and out.resolve().is_relative_to(manifest.root.resolve()):
            raise UserError(f"--out {out} is inside the raw data folder {manifest.root}; write the splits elsewhere")
    targets = [out / name for name in manifests]
    for target in targets:
        if target.exists() and not target.is_dir():
            raise UserError(f"{target} exists and is not a folder")
        if target.is_dir() and any(target.iterdir()) and not force:
            raise UserError(f"{target} already exists and is not empty; pass --force to overwrite its manifest")
    for target, manifest in zip(targets, manifests.values()):
        write_manifest(target, manifest)
    return targets


def _existing_folder(root: Path) -> Path:
    if not root.is_dir():
        raise UserError(f"raw data folder not found: {root}")
    return root.resolve()


def _files(root: Path, folder: Path, suffixes: tuple[str, ...]) -> tuple[str, ...]:
    """Files directly in `folder` with one of `suffixes` (any case), as sorted paths relative to `root`."""
    if not folder.is_dir():
        return ()
    return tuple(sorted(path.relative_to(root).as_posix() for path in folder.iterdir()
                        if path.is_file() and path.suffix.lower() in suffixes and not path.name.startswith(".")))
