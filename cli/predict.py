"""`robust-tune predict`: a model saved by `train --save` applied to image files, or scored on a labelled folder."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich import box
from rich.table import Table

from cli.app import app
from cli.options import Device, chosen_format
from cli.render import cut_text, metrics_table, print_line, stderr, stdout
from pipeline.errors import UserError
from pipeline.output_file import check_output, write_output

if TYPE_CHECKING:
    from pipeline.training.predict import Prediction

SHOWN_ROWS = 20  # the terminal shows this many images; --out has them all
MIN_PATH_WIDTH = 24  # a path is cut (in the middle) to the room left, never to fewer characters than this


@app.command()
def predict(
    paths: Annotated[list[Path], typer.Argument(help="Image files and folders (searched recursively); with "
                                                     "--labelled, one folder with one sub-folder per class.")],
    weights: Annotated[Path, typer.Option(help="A model saved by robust-tune train --save.")],
    out: Annotated[Optional[Path], typer.Option(
        help="Write every image's row to this CSV file: path, predicted class, one probability per class "
             "(with --labelled, its true class too).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --out replace an existing file.")] = False,
    labelled: Annotated[bool, typer.Option(
        "--labelled", help="PATH is one folder with one sub-folder per class (as train --dataset images --root "
                           "reads it): print accuracy, balanced, per-class and worst-class accuracy.")] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Images per forward pass.")] = 256,
    device: Device = "auto",
    format_: Annotated[str, typer.Option("--format", help="table (for people) or json (the predictions, with "
                                                          "--labelled the metrics, for scripts).")] = "table",
) -> None:
    """Apply a saved model to new images.

    Prints the predicted class and the probability of each class per image."""
    as_json = chosen_format(format_, ("table", "json")) == "json"
    if out is not None:
        check_output(out, force)  # before any work
    if labelled and len(paths) != 1:
        raise UserError(f"--labelled takes one folder (with one sub-folder per class), got {len(paths)} paths")
    from pipeline.config import resolve_device
    from pipeline.training.predict import find_images, predict_images, predict_labelled, read_saved_model

    saved = read_saved_model(weights)
    on = resolve_device(device)
    with stderr.status("predicting"):
        if labelled:
            result = predict_labelled(saved, paths[0], on, batch_size)
            predictions, true_classes = result.predictions, result.true_classes
        else:
            predictions = predict_images(saved, find_images(paths), on, batch_size)
            true_classes = None
    print_line(stderr, f"images: resized to {saved.image_size} x {saved.image_size} px, {saved.channels} "
               f"channel{'s' if saved.channels != 1 else ''}, as {weights.name} was trained (not cached)",
               markup=False, highlight=False)
    if out is not None:
        write_output(out, _csv(predictions, saved.class_names, true_classes), force)
        stderr.print(f"wrote {len(predictions)} rows to {out}", markup=False, highlight=False)
    if labelled:
        if as_json:
            print(json.dumps(asdict(result.metrics), indent=2))
            return
        stdout.print(f"{weights} on {paths[0]}: {len(predictions)} images, {saved.backbone} trained on "
                     f"{saved.data_set_name} ({saved.data_set}; nothing trained here)", markup=False, highlight=False)
        stdout.print(metrics_table({paths[0].name or str(paths[0]): result.metrics}))
        return
    if as_json:
        print(json.dumps([{"path": str(p.path), "predicted": p.predicted,
                           "probabilities": dict(zip(saved.class_names, p.probabilities))} for p in predictions],
                         indent=2))
    elif out is None:
        _print_predictions(predictions, saved.class_names)


def _csv(predictions: list["Prediction"], class_names: list[str], true_classes: list[str] | None) -> str:
    """path, [class,] predicted, then p_<class> for every class in the model's order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["path", *(["class"] if true_classes else []), "predicted", *(f"p_{c}" for c in class_names)])
    for i, p in enumerate(predictions):
        writer.writerow([str(p.path), *([true_classes[i]] if true_classes else []), p.predicted,
                         *(f"{value:.6g}" for value in p.probabilities)])
    return buffer.getvalue()


def _print_predictions(predictions: list["Prediction"], class_names: list[str]) -> None:
    """The first SHOWN_ROWS images as a table that fits the terminal: path, predicted class and its probability,
    and every class's probability when they all fit; a line saying how many more there are."""
    predicted_width = max(len("predicted"), *(len(c) for c in class_names))
    per_class = [f"p_{c}" for c in class_names]
    longest = max(len(str(p.path)) for p in predictions[:SHOWN_ROWS])
    gap = 3  # between two columns: padding, the box's blank divider, padding
    room = stdout.width - 1 - (predicted_width + gap + 5 + gap)  # what the path and the per-class columns share
    classes_width = sum(max(5, len(header)) + gap for header in per_class)
    show_all = room - classes_width >= min(longest, MIN_PATH_WIDTH)
    path_width = max(MIN_PATH_WIDTH, min(longest, room - (classes_width if show_all else 0)))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("image", no_wrap=True)
    table.add_column("predicted", no_wrap=True)
    table.add_column("p", justify="right", no_wrap=True, min_width=5)
    if show_all:
        for header in per_class:
            table.add_column(header, justify="right", no_wrap=True, min_width=5)
    for p in predictions[:SHOWN_ROWS]:
        table.add_row(cut_text(str(p.path), path_width, middle=True), p.predicted,
                      f"{p.probabilities[class_names.index(p.predicted)]:.3f}",
                      *([f"{value:.3f}" for value in p.probabilities] if show_all else []))
    stdout.print(table)
    notes = []
    if len(predictions) > SHOWN_ROWS:
        notes.append(f"... and {len(predictions) - SHOWN_ROWS} more images ({len(predictions)} in all)")
    if not show_all:
        notes.append(f"p is the predicted class's probability; all {len(class_names)} classes' are in --out FILE.csv")
    for note in notes:
        print_line(stdout, note, style="dim", markup=False, highlight=False)
