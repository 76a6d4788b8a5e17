"""A split written as a CUB-200-2011 style manifest folder, so it can be inspected, versioned and reused.

Files (ids are 1-based, one entry a line, fields separated by one space):
  images.txt               <image_id> <path relative to the image root>
  image_class_labels.txt   <image_id> <class_id>
  train_test_split.txt     <image_id> <is_train: 1 train, 0 test>
  classes.txt              <class_id> <class name>
  root.txt                 the image root: one line, absolute or relative to the manifest folder

root.txt is optional: a loader given an explicit image root uses that instead, so a manifest can
be versioned without it and the raw images can live anywhere.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipeline.errors import UserError

MANIFEST_FILES = ("images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt")
ROOT_FILE = "root.txt"


@dataclass(frozen=True)
class Manifest:
    """Images (paths relative to `root`), their class indices (0-based here) and train/test flags."""

    class_names: tuple[str, ...]
    paths: tuple[str, ...]
    labels: tuple[int, ...]
    is_train: tuple[bool, ...]
    root: Path | None = None

    def counts(self) -> dict[str, tuple[int, int]]:
        """(train, test) image counts per class name, in class order."""
        counts = {name: [0, 0] for name in self.class_names}
        for label, train in zip(self.labels, self.is_train):
            counts[self.class_names[label]][0 if train else 1] += 1
        return {name: (train, test) for name, (train, test) in counts.items()}


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Write the manifest files (and root.txt when the manifest has a root) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = range(1, len(manifest.paths) + 1)
    for path in manifest.paths:
        if path != path.strip() or "\n" in path:
            raise UserError(f"image path {path!r} cannot be written to a manifest (leading/trailing space)")
    files = {
        "images.txt": (f"{i} {path}" for i, path in zip(ids, manifest.paths)),
        "image_class_labels.txt": (f"{i} {label + 1}" for i, label in zip(ids, manifest.labels)),
        "train_test_split.txt": (f"{i} {int(train)}" for i, train in zip(ids, manifest.is_train)),
        "classes.txt": (f"{i} {name}" for i, name in enumerate(manifest.class_names, start=1)),
    }
    if manifest.root is not None:
        files[ROOT_FILE] = (line for line in [str(manifest.root)])
    for name, lines in files.items():
        (folder / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def read_manifest(folder: Path, root: Path | None = None) -> Manifest:
    """Read a manifest folder; `root` overrides root.txt. Malformed files are UserErrors naming the line."""
    if not folder.is_dir():
        raise UserError(f"manifest folder not found: {folder}")
    missing = [name for name in MANIFEST_FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(f"manifest folder {folder} lacks {', '.join(missing)}")
    root = root or manifest_root(folder)
    paths = _read_table(folder / "images.txt", _stays_inside(root or folder.resolve()))
    class_ids = {i: _to_int(value, folder / "image_class_labels.txt", f"image {i}")
                 for i, value in _read_table(folder / "image_class_labels.txt").items()}
    flags = _read_table(folder / "train_test_split.txt")
    classes = _read_table(folder / "classes.txt")
    if sorted(classes) != list(range(1, len(classes) + 1)):
        raise UserError(f"{folder / 'classes.txt'}: class ids must be 1..{len(classes)}")
    for name, table in (("image_class_labels.txt", class_ids), ("train_test_split.txt", flags)):
        if set(table) != set(paths):
            odd = sorted(set(table) ^ set(paths))[0]
            raise UserError(f"{folder / name}: image id {odd} is not in both it and images.txt")
    for i in paths:
        if class_ids[i] not in classes:
            raise UserError(f"{folder / 'image_class_labels.txt'}: image {i} has unknown class id {class_ids[i]}")
        if flags[i] not in ("0", "1"):
            raise UserError(f"{folder / 'train_test_split.txt'}: image {i} has is_train {flags[i]!r}, not 0 or 1")
    ids = sorted(paths)
    return Manifest(class_names=tuple(classes[c] for c in sorted(classes)),
                    paths=tuple(paths[i] for i in ids), labels=tuple(class_ids[i] - 1 for i in ids),
                    is_train=tuple(flags[i] == "1" for i in ids), root=root)


def manifest_root(folder: Path) -> Path | None:
    """The image root recorded in root.txt (relative paths are relative to `folder`), or None."""
    file = folder / ROOT_FILE
    if not file.is_file():
        return None
    text = file.read_text(encoding="utf-8").strip()
    return (folder / text).resolve() if text else None


def _stays_inside(root: Path) -> Callable[[str], str | None]:
    """A check that an image path stays inside `root`: not absolute, no '..' that climbs out of it.

    The check is on the path as written (normalised, not resolved), so a link the user placed inside
    the root is still followed, while a manifest cannot name /etc/passwd or ../../anything.
    """
    root = Path(os.path.abspath(root))

    def problem(path: str) -> str | None:
        inside = Path(os.path.normpath(root / path)).is_relative_to(root) and not Path(path).is_absolute()
        return None if inside else f"image path {path!r} is outside the image root {root}"

    return problem


def _read_table(file: Path, check: Callable[[str], str | None] = lambda value: None) -> dict[int, str]:
    """`<id> <value>` lines as {id: value}; blank lines are skipped, duplicate ids and values that fail
    `check` (which returns what is wrong) are errors naming the line."""
    table: dict[int, str] = {}
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        key, _, value = line.strip().partition(" ")
        if not value.strip():
            raise UserError(f"{file}, line {number}: expected '<id> <value>', got {line!r}")
        image_id = _to_int(key, file, f"line {number}")
        if image_id in table:
            raise UserError(f"{file}, line {number}: id {image_id} appears twice")
        if problem := check(value.strip()):
            raise UserError(f"{file}, line {number}: {problem}")
        table[image_id] = value.strip()
    return table


def _to_int(text: str, file: Path, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserError(f"{file}, {where}: {text!r} is not an integer id") from None
