"""A model saved by `train --save` applied to new images: what it needs to know about its inputs (the model
card saved beside the weights), the images found, decoded and normalised as training did, and its class
probabilities; on a labelled folder, the same metrics `train` reports on its test split."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipeline.config import RunSettings, resolve_precision
from pipeline.data import Dataset, Split
from pipeline.data.decode import decode_images
from pipeline.data.images import IMAGE_SUFFIXES, image_files
from pipeline.errors import UserError
from pipeline.training.metrics import SplitMetrics, split_metrics
from pipeline.training.models import Classifier, build_model, read_torch_file
from pipeline.training.trainer import torch_threads

# The saved file's key for what applying the model needs (see `model_card`); files saved without it are refused.
CARD_KEY = "model_card"
SAVED_MODEL = "a model saved by robust-tune train --save"


def model_card(dataset: Dataset, kind: str, backbone: str) -> dict[str, Any]:
    """What applying a trained model to new images needs, in plain types (the file stays loadable with
    torch.load(weights_only=True)): class names in label order, the normalisation training used (pixels in
    [0, 1]), the image size and channels, the network and the data set (its kind: digits, images, idx, medmnist; its
    name)."""
    height, width = dataset.train.images.shape[-2:]
    return {"class_names": list(dataset.class_names), "pixel_mean": [float(v) for v in dataset.pixel_mean],
            "pixel_std": [float(v) for v in dataset.pixel_std], "image_size": int(width),
            "image_height": int(height), "channels": int(dataset.in_channels), "backbone": backbone,
            "num_classes": int(dataset.num_classes), "data_set": kind, "data_set_name": dataset.name}


@dataclass(frozen=True)
class SavedModel:
    """A model read back from `train --save`: its card's fields, its weights and the settings that trained it."""

    path: Path
    class_names: list[str]
    pixel_mean: tuple[float, ...]
    pixel_std: tuple[float, ...]
    image_size: int
    channels: int
    backbone: str
    data_set: str  # its kind (digits, images, idx, medmnist)
    data_set_name: str
    state_dict: dict[str, torch.Tensor]
    settings: RunSettings


def read_saved_model(path: Path) -> SavedModel:
    """The saved model at `path`; a file that is not one, or one saved before the card existed, is a UserError."""
    saved = read_torch_file(str(path), SAVED_MODEL)
    if not (isinstance(saved, dict) and isinstance(saved.get("state_dict"), dict)
            and isinstance(saved.get("settings"), dict)):
        raise UserError(f"{path} is not {SAVED_MODEL} (it holds no state_dict and settings)")
    card = saved.get(CARD_KEY)
    if not isinstance(card, dict):
        raise UserError(f"{path} was saved by an earlier version, without its class names and normalisation; "
                        "train it again with train --save to use it with predict")
    try:
        model = SavedModel(path, [str(c) for c in card["class_names"]], tuple(map(float, card["pixel_mean"])),
                           tuple(map(float, card["pixel_std"])), int(card["image_size"]), int(card["channels"]),
                           str(card["backbone"]), str(card["data_set"]), str(card["data_set_name"]),
                           saved["state_dict"],
                           RunSettings.from_dict(saved["settings"]))
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"{path}: its model card is incomplete or malformed ({error}); save the model again") from None
    if card.get("image_height", model.image_size) != model.image_size:
        raise UserError(f"{path} was trained on {card['image_height']}x{model.image_size} images; "
                        "predict decodes square images only")
    return model


def load_network(saved: SavedModel, device: torch.device) -> Classifier:
    """The saved network, built as training built it and given the saved weights whole, in eval mode on `device`
    (bf16 where it trained in bf16 and the device computes in it, else fp32)."""
    model = build_model(saved.backbone, "none", saved.channels, len(saved.class_names))
    try:
        model.load_state_dict(saved.state_dict)
    except RuntimeError as error:
        details = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise UserError(f"the weights in {saved.path} do not fit its {saved.backbone}: {details[-1]}") from None
    bf16 = saved.settings.precision == "bf16" and resolve_precision("auto", device) == "bf16"
    return model.to(device).run_as(autocast=torch.bfloat16 if bf16 else None).eval()


def find_images(paths: list[Path]) -> list[Path]:
    """The image files named by `paths`: a file as it is, a folder searched recursively (hidden files skipped),
    in the order given, each file once. A missing path, a file that is not an image or a folder without
    images is a UserError naming it."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            members = image_files(path, path)
            if not members:
                raise UserError(f"folder {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
            found += members
        elif path.is_file():
            if path.suffix.lower() not in IMAGE_SUFFIXES:
                raise UserError(f"{path} is not an image file ({', '.join(IMAGE_SUFFIXES)})")
            found.append(path)
        else:
            raise UserError(f"image or folder not found: {path}")
    return list(dict.fromkeys(found))


def labelled_images(folder: Path, class_names: list[str]) -> tuple[list[Path], torch.Tensor]:
    """The images of a folder with one sub-folder per class (as `train --dataset images --root` reads it) and
    their labels in the model's class order; a class folder the model does not know is a UserError."""
    if not folder.is_dir():
        raise UserError(f"--labelled takes one folder with one sub-folder per class; not a folder: {folder}")
    class_folders = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not class_folders:
        raise UserError(f"{folder} has no class sub-folders (--labelled: one sub-folder of images per class)")
    files: list[Path] = []
    labels: list[int] = []
    for class_folder in class_folders:
        if class_folder.name not in class_names:
            raise UserError(f"class folder {class_folder.name!r} in {folder} is not one of the model's classes: "
                            f"{', '.join(class_names)}")
        members = image_files(class_folder, folder)
        files += members
        labels += [class_names.index(class_folder.name)] * len(members)
    if not files:
        raise UserError(f"the class folders in {folder} hold no images ({', '.join(IMAGE_SUFFIXES)})")
    return files, torch.tensor(labels, dtype=torch.int64)


@dataclass(frozen=True)
class Prediction:
    """One image's predicted class and its probability for every class (softmax, in the model's class order)."""

    path: Path
    predicted: str
    probabilities: tuple[float, ...]


def class_logits(saved: SavedModel, files: list[Path], device: torch.device, batch_size: int) -> torch.Tensor:
    """The model's outputs (N, classes) for `files` in order, on the CPU: decoded and resized by the data sets' own
    decoder, normalised with the saved statistics exactly as training normalised its batches, `batch_size` at a
    time."""
    pixels = decode_images(files, saved.image_size, saved.channels)
    shape = (1, saved.channels, 1, 1)
    mean, std = torch.tensor(saved.pixel_mean), torch.tensor(saved.pixel_std)
    if mean.numel() not in (1, saved.channels) or std.numel() != mean.numel():
        raise UserError(f"{saved.path}: its normalisation has {mean.numel()} channel(s), its images {saved.channels}")
    split = Split(pixels, torch.zeros(len(files), dtype=torch.int64), mean.expand(saved.channels).reshape(shape),
                  std.expand(saved.channels).reshape(shape)).to(device)
    model = load_network(saved, device)
    with torch_threads(saved.settings.threads or 1), torch.no_grad():
        return torch.cat([model(chunk).float() for chunk in split.chunks(batch_size)]).cpu()


def predict_images(saved: SavedModel, files: list[Path], device: torch.device, batch_size: int) -> list[Prediction]:
    """One Prediction per file, in order: the class of the largest output (as `train` scores), its softmax."""
    return _predictions(saved, files, class_logits(saved, files, device, batch_size))


def _predictions(saved: SavedModel, files: list[Path], logits: torch.Tensor) -> list[Prediction]:
    return [Prediction(path, saved.class_names[int(row.argmax())], tuple(row.softmax(dim=0).tolist()))
            for path, row in zip(files, logits)]


@dataclass(frozen=True)
class LabelledResult:
    """The model on a labelled folder: each image's prediction and true class, and the metrics `train` reports
    on its test split (accuracy, balanced, per class, worst class), computed the same way, with no training."""

    predictions: list[Prediction]
    true_classes: list[str]
    metrics: SplitMetrics


def predict_labelled(saved: SavedModel, folder: Path, device: torch.device, batch_size: int) -> LabelledResult:
    """The model applied to every image of a folder with one sub-folder per class, and its metrics there."""
    files, labels = labelled_images(folder, saved.class_names)
    logits = class_logits(saved, files, device, batch_size)
    return LabelledResult(_predictions(saved, files, logits), [saved.class_names[i] for i in labels.tolist()],
                          split_metrics(logits.argmax(dim=1), labels, saved.class_names))
