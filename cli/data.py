"""`robust-tune data prepare mt|mvtec`: the GI-LS paper's splits written as manifest folders."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from cli.app import app
from cli.render import stdout

if TYPE_CHECKING:  # pipeline.data loads torch: imported by the commands, not by --help
    from pipeline.data.manifest import Manifest


data_app = typer.Typer(help="Prepare data sets.", no_args_is_help=True)
prepare_app = typer.Typer(
    help="Draw the GI-LS paper's splits from raw data.\n\nEach split (Tables 1 and 2) is written as a manifest folder "
         "(images.txt, image_class_labels.txt, train_test_split.txt, classes.txt, root.txt) under OUT/<split>. "
         "Train on one with `robust-tune train --dataset images --manifest OUT/<split>`.",
    no_args_is_help=True)
data_app.add_typer(prepare_app, name="prepare")
app.add_typer(data_app, name="data")

Root = Annotated[Path, typer.Option(help="The raw data folder.")]
Out = Annotated[Path, typer.Option(help="Where to write the split folders (OUT/<split>).")]
Seed = Annotated[int, typer.Option(help="Seed of the draw: the same seed gives the same split.")]
Force = Annotated[bool, typer.Option(
    "--force", help="Overwrite the manifest files of an existing split folder (otherwise a non-empty one is "
                    "refused).")]


@prepare_app.command("mt")
def prepare_mt(root: Root, out: Out, seed: Seed = 0, force: Force = False) -> None:
    """Draw the MT-Defect and MT splits (Table 1).

    From the Magnetic Tile defect repository (MT_<Class>/Imgs/*.jpg)."""
    from pipeline.data.paper_splits import magnetic_tile_splits

    _write(out, magnetic_tile_splits(root, seed), force)


@prepare_app.command("mvtec")
def prepare_mvtec(
    root: Annotated[Path, typer.Option(help="The MVTec AD folder that holds <category>/train and /test.")],
    category: Annotated[str, typer.Option(help="wood or carpet.")],
    out: Out, seed: Seed = 0, force: Force = False,
) -> None:
    """Draw the Wood or Carpet splits (Table 2) from MVTec AD.

    'Free' is drawn from train/good and test/good together."""
    from pipeline.data.paper_splits import mvtec_split

    _write(out, mvtec_split(root, category, seed), force)


def _write(out: Path, manifests: dict[str, "Manifest"], force: bool) -> None:
    from pipeline.data.paper_splits import write_splits

    for folder, manifest in zip(write_splits(out, manifests, force), manifests.values()):
        stdout.print(_counts_table(folder, manifest))


def _counts_table(folder: Path, manifest: "Manifest") -> Table:
    """Images per class and split, as in the paper's tables, titled with where the manifest went."""
    counts = manifest.counts()
    table = Table(title=f"{folder.name}: {len(manifest.paths)} images, manifest in {folder}", title_justify="left")
    table.add_column("")
    for name in counts:
        table.add_column(name, justify="right")
    table.add_row("train", *(str(train) for train, _ in counts.values()))
    table.add_row("test", *(str(test) for _, test in counts.values()))
    return table
