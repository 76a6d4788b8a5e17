"""`robust-tune train` and `robust-tune methods`: one configuration, and what each method takes."""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Annotated, Iterator, Optional, Sequence

import typer
from rich.table import Table

from cli.app import app
from cli.options import Db, Device, Precision, ResultFormat, Threads, chosen_format
from cli.render import (batches_line, params_line, print_image_line, print_line, print_wrapped, result_table,
                        result_title, stderr, stdout, terminal_width, training_progress)
from pipeline.config import BACKBONES, DEFAULT_THREADS, DataConfig, TrainConfig, image_size_for, resolve_device
from pipeline.errors import FieldError, UserError
from pipeline.output_file import check_output
from pipeline.methods import EXAMPLES, parse_method
from pipeline.methods.declarations import FAMILIES, PAPERS
from pipeline.spec.study_config import data_with, naming_source
from pipeline.params import TRAINING_PARAMS, Choice, HParam, Range, parse_assignment


@app.command()
def train(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="digits (built in); images (your own: --root "
                                                                 "and/or --manifest); idx (MNIST-format files in "
                                                                 "--root); medmnist (a .npz at --path).")] = "digits",
    method: Annotated[str, typer.Option("--method", "-m", help=f"Parts joined with +, for example {EXAMPLES}; "
                                                         "see `robust-tune methods`.")] = "erm",
    param: Annotated[Optional[list[str]], typer.Option(
        "--param", "-p", metavar="NAME=VALUE",
        help="A hyper-parameter of the configuration trained, as name=value; repeat it. See `robust-tune "
             "methods`.")] = None,
    backbone: Annotated[str, typer.Option(help=f"One of {', '.join(BACKBONES)}.")] = "small_cnn",
    weights: Annotated[str, typer.Option(help="none, imagenet (from the local torchvision cache) "
                                              "or a path to a state_dict.")] = "none",
    device: Device = "auto",
    precision: Precision = "auto",
    threads: Threads = None,
    seed: Annotated[int, typer.Option(help="Training seed (model initialisation and batch order).")] = 0,
    split_seed: Annotated[int, typer.Option(help="Seed of the train/validation/test split.")] = 0,
    imbalance_class: Annotated[Optional[str], typer.Option(
        help="Keep only a fraction of this class in training (and validation with --imbalance-in train+val); "
             "the test split is unchanged.")] = None,
    imbalance_keep: Annotated[float, typer.Option(
        help="Fraction of --imbalance-class kept (at least one example).")] = 0.01,
    imbalance_in: Annotated[str, typer.Option(
        help="train (validation keeps the natural class shares, the hardness paper's protocol) or train+val.")]
    = "train",
    val_fraction: Annotated[float, typer.Option(
        help="Share of the images held out for validation (with --manifest: of its training images).")] = 0.2,
    test_fraction: Annotated[float, typer.Option(
        help="Share of the images held out for testing (not with --manifest: it names its test images).")] = 0.2,
    root: Annotated[Optional[str], typer.Option(
        help="images: a folder with one sub-folder of images per class; with --manifest, the folder its "
             "image paths are relative to (instead of its root.txt); idx: the folder with the four "
             "MNIST-format files.")] = None,
    manifest: Annotated[Optional[str], typer.Option(
        help="images: a manifest folder, as written by `robust-tune data prepare`.")] = None,
    path: Annotated[Optional[str], typer.Option(
        help="medmnist: the .npz archive (its own train, validation and test splits).")] = None,
    image_size: Annotated[Optional[int], typer.Option(
        help="images: resize every image to this many pixels a side (default: 32 for small_cnn and wrn16_1, 224 "
             "for the ResNets, as in study files).")] = None,
    cache_dir: Annotated[str, typer.Option(
        help="images: where decoded, resized images are cached (\"\" turns the cache off).")] = "runs/cache",
    flip: Annotated[bool, typer.Option("--flip", help="Randomly flip training images left-right.")] = False,
    crop_padding: Annotated[int, typer.Option(
        help="Randomly shift training images by up to this many pixels (padded crop); 0 is off.")] = 0,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="data.FIELD=VALUE", help="Set any field of the data set as a study file's [data] does, "
                                                  "e.g. --set data.channels=1 --set data.normalize=dataset "
                                                  "(repeat); see docs/guide/data-sets.md.")] = None,
    format_: ResultFormat = "table",
    from_study: Annotated[Optional[str], typer.Option(
        help="Train a stored study's best configuration (its data, network, method and every parameter) at its "
             "seed and thread count; --param, --seed, --device and --threads still apply.")] = None,
    trial: Annotated[Optional[int], typer.Option(
        help="With --from-study: this trial instead of the best.")] = None,
    study_file: Annotated[Optional[Path], typer.Option(
        "--study-file", help="Train the one configuration a study file fixes (as `robust-tune best` writes it): "
                             "its data, network, method, parameters and seed; --param, --seed, --device and "
                             "--threads still apply.")] = None,
    db: Db = None,
    save: Annotated[Optional[Path], typer.Option(
        help="Write the trained weights, the settings that produced them and what applying them needs (class names, "
             "normalisation, image size): torch.save; loads with --weights and robust-tune predict.")]
    = None,
) -> None:
    """Train and evaluate one configuration.

    It runs the same code path a study trial runs."""
    as_json = chosen_format(format_, ("table", "json")) == "json"
    if save is not None and save.exists():
        raise UserError(f"{save} exists; --save never replaces a file, give another name")
    if save is not None:
        check_output(save, option="--save")  # before training: a refused --save would throw the model away
    if from_study is None and trial is not None:
        raise UserError("--trial goes with --from-study")
    with naming_options():
        given = DataConfig(name=dataset, split_seed=split_seed, val_fraction=val_fraction, test_fraction=test_fraction,
                          imbalance_class=imbalance_class, imbalance_keep=imbalance_keep, imbalance_in=imbalance_in,
                          root=root, manifest=manifest, path=path,
                          image_size=image_size_for(dataset, backbone) if image_size is None else image_size,
                          cache_dir=cache_dir, augment_flip=flip, augment_crop_padding=crop_padding)
    config = TrainConfig(
        data=given,
        backbone=backbone, weights=weights, method=method,
        params=dict(parse_assignment(text) for text in param or []), seed=seed, device=device,
        precision=precision, threads=DEFAULT_THREADS if threads is None else threads)
    if set_:
        fields = data_with(config.data, list(set_))
        if image_size is None and not any(text.startswith("data.image_size") for text in set_):
            fields = replace(fields, image_size=image_size_for(fields.name, backbone))  # --set data.name=images
        config = replace(config, data=fields)
    if from_study is not None and study_file is not None:
        raise UserError("--from-study and --study-file each name the configuration: give one")
    if from_study is not None:
        config = _study_config(ctx, from_study, trial, db, config)
    elif study_file is not None:
        config = _file_config(ctx, study_file, param or [], config)
    dataset, method = config.data.name, config.method
    parse_method(method).resolve(config.params)  # validate before loading anything
    from pipeline.data import load_dataset

    with stderr.status(f"loading {dataset}"), _naming_data_fields(set_ or [], study_file, from_study):
        data = load_dataset(config.data, resolve_device(device))
    from pipeline.training.models import check_weights

    # a bad weights file is named before training starts
    check_weights(config.backbone, config.weights, data.in_channels)
    print_image_line(config.data)  # once the data loaded: bad input stays one line
    # the counts before training, where they can still stop a run that would waste its time; 80 wide on a pipe
    counts = data.split_summary(terminal_width(stderr), data.rare_class(config.data.imbalance_class))
    print_line(stderr, "\n".join(["examples per split and class:", *counts]), markup=False, highlight=False)
    from pipeline.training.metrics import poor_run_warnings
    from pipeline.training.trainer import train as run_training

    with training_progress(f"{method} on {dataset}") as on_event:
        result = run_training(config, data, on_event)
    if save is not None:
        import torch

        from pipeline.training.predict import CARD_KEY, model_card

        assert result.model is not None  # the trainer's own result keeps its model
        torch.save({"state_dict": result.model.state_dict(), "settings": result.settings.to_dict(),
                    CARD_KEY: model_card(data, config.data.name, config.backbone)}, save)
        stderr.print(f"wrote {save}")
    for line in poor_run_warnings(result):
        print_line(stderr, line, style="yellow", markup=False, highlight=False)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    stdout.print(result_title(result), highlight=False)
    stdout.print(result_table(result))
    print_line(stdout, batches_line(result))
    print_line(stdout, params_line(result), style="dim")


@contextmanager
def naming_options() -> Iterator[None]:
    """Inside the block, a data field's own problem ("imbalance_in must be one of ...": DataConfig's) names the option
    that set it (--imbalance-in)."""
    try:
        yield
    except UserError as error:
        field, _, problem = str(error).partition(" ")
        if field not in {f.name for f in fields(DataConfig)}:
            raise
        raise UserError(f"{OPTION_OF_FIELD.get(field, '--' + field.replace('_', '-'))}: {problem}") from None


OPTION_OF_FIELD = {"name": "--dataset", "augment_flip": "--flip", "augment_crop_padding": "--crop-padding"}
# The options that set a data field: an error about the field found as the data loads (an unknown class, a missing
# folder) names the option.
DATA_OPTIONS = {"data.imbalance_class": "--imbalance-class", "data.root": "--root", "data.manifest": "--manifest",
                "data.path": "--path"}


@contextmanager
def _naming_data_fields(overrides: list[str], study_file: Path | None, from_study: str | None) -> Iterator[None]:
    """An error about a data field found as the data loads names where the field was set: --set, the study file,
    the stored study, or the option of DATA_OPTIONS."""
    source = str(study_file) if study_file is not None else f"study {from_study}" if from_study is not None else ""
    try:
        with naming_source(source, overrides):
            yield
    except FieldError as error:
        if error.source or error.key not in DATA_OPTIONS:
            raise
        raise UserError(f"{DATA_OPTIONS[error.key]}: {error.problem}") from None


# With --from-study or --study-file the configuration is the study's: options that would change it are refused,
# not ignored.
_FROM_STUDY_OPTIONS = {"from_study", "study_file", "trial", "db", "save", "param", "seed", "device", "precision",
                       "threads", "format_"}


def _on_command_line(ctx: typer.Context, key: str) -> bool:
    """Whether the user gave option `key` (not its default or an environment variable)."""
    source = ctx.get_parameter_source(key)
    return source is not None and source.name == "COMMANDLINE"  # typer bundles its own click: compare by name


def _refuse_clashing_options(ctx: typer.Context, option: str) -> None:
    """A one-line refusal of the first option that would change a configuration `option` names."""
    clashing = [f"--{key.replace('_', '-')}" for key in ctx.params if key not in _FROM_STUDY_OPTIONS
                and _on_command_line(ctx, key)]
    if clashing:
        raise UserError(f"{clashing[0]} does not go with {option}: the data, network and method are the study's")


def _file_config(ctx: typer.Context, path: Path, params: list[str], given: TrainConfig) -> TrainConfig:
    """The configuration a study file fixes (--param applied to its [params]), with the command line's settings."""
    from pipeline.spec.study_config import load_configuration

    _refuse_clashing_options(ctx, "--study-file")
    study = load_configuration(path, params)
    return _with_command_line(ctx, study.train_config({}, study.seed), given)


def _study_config(ctx: typer.Context, name: str, trial: int | None, db: str | None,
                  given: TrainConfig) -> TrainConfig:
    """A stored trial's full configuration, with the command line's settings."""
    from pipeline.compare.evaluate import pareto_note, study_and_trial, trial_config
    from pipeline.store import Store

    _refuse_clashing_options(ctx, "--from-study")
    store = Store(db, create=False)
    record, chosen = study_and_trial(store, name, trial)
    if trial is None and (note := pareto_note(store, record, chosen.trial_index)):
        print_line(stderr, f"note: {note}", markup=False, highlight=False)
    return _with_command_line(ctx, trial_config(record, chosen), given)


def _with_command_line(ctx: typer.Context, config: TrainConfig, given: TrainConfig) -> TrainConfig:
    """A study's configuration with --param over its parameters, the device and precision given, and --seed and
    --threads where the command line names them."""
    seed = given.seed if _on_command_line(ctx, "seed") else config.seed
    threads = given.threads if _on_command_line(ctx, "threads") else config.threads
    return replace(config, params={**config.params, **given.params}, seed=seed, device=given.device,
                   precision=given.precision, threads=threads)


@app.command()
def methods(format_: ResultFormat = "table") -> None:
    """List the training methods and their hyper-parameters.

    Each part of a method (loss, sampler, mixer, generator, weights) with the hyper-parameters it takes, their
    defaults, valid values, study ranges and which ends of a range a study may widen (soft ends: see
    docs/guide/study-files.md, "Ranges that widen")."""
    # (family, part, source, parameters): the shared trainer's first, then every part of every family
    parts: list[tuple[str | None, str | None, str, Sequence[HParam]]] = [
        (None, None, "the shared trainer", TRAINING_PARAMS),
        *((family, part.name, part.source, part.params) for family, registry in FAMILIES.items()
          for part in registry.values())]
    if chosen_format(format_, ("table", "json")) == "json":
        stdout.print_json(json.dumps([{"family": family, "name": name, "source": source,
                                       "parameters": [_param_record(p) for p in params]}
                                      for family, name, source, params in parts]))
        return
    sections = [(f"every method: {source}" if family is None else f"{family} {name}: {source}", params)
                for family, name, source, params in parts]
    narrow = stdout.width < _table_width([p for _, params in sections for p in params])
    for title, params in sections:
        if not params:
            print_wrapped(stdout, f"{title}\n  (no parameters of its own)", hang=2, markup=False, highlight=False)
        elif narrow:
            _print_block(title, params)
        else:
            table = Table(title=title, title_justify="left")
            for column in COLUMNS:
                table.add_column(column, no_wrap=True)
            table.add_column("meaning", overflow="fold")
            for p in params:
                table.add_row(p.name, _default_text(p.default), _valid_text(p), _search_text(p.search),
                              _widens_text(p), p.help)
            stdout.print(table)
    cited = " ".join(title + " " + " ".join(p.help for p in params) for title, params in sections)
    stdout.print("Papers named above:", style="bold", highlight=False)
    for name, title in PAPERS.items():
        if name in cited:
            print_wrapped(stdout, f"{name}: {title}", indent=2, hang=2, markup=False, highlight=False)
    print_wrapped(stdout, "A method joins parts with + in any order: one loss (default erm; gils implies ls), one "
                  "sampler (default uniform), at most one mixer or a chain of generators (gils, then at most one "
                  f"attack), at most one weights part. For example: {EXAMPLES}.", markup=False, highlight=False)


MEANING_WIDTH = 30  # the least room the table's meaning column gets; narrower terminals get one block per part
COLUMNS = ("parameter", "default", "valid", "study range", "widens")


def _param_record(p: HParam) -> dict[str, object]:
    """A parameter as `methods --format json` lists it: the table's columns, as text, and its meaning."""
    return {"parameter": p.name, "default": p.default, "valid": _valid_text(p), "study_range": _search_text(p.search),
            "widens": _widens_text(p), "meaning": p.help}


def _table_width(params: Sequence[HParam]) -> int:
    """How wide the parameters table must be for its meaning column to get MEANING_WIDTH: the four columns
    that never wrap at their widest, and a border and a space either side of every column."""
    widest = [max(len(text) for text in texts) for texts in zip(
        *((p.name, _default_text(p.default), _valid_text(p), _search_text(p.search), _widens_text(p))
          for p in params), COLUMNS)]
    return sum(widest) + MEANING_WIDTH + 3 * (len(COLUMNS) + 1) + 1


def _print_block(title: str, params: Sequence[HParam]) -> None:
    """A part as a block, for a terminal too narrow for the table: its title, then a line per parameter with its
    default, valid values and study range, and its meaning under it; long lines wrap between words, indented
    under their first."""
    print_wrapped(stdout, title, hang=2, style="bold", markup=False, highlight=False)
    for p in params:
        print_wrapped(stdout, f"{p.name} = {p.default}  (valid {_valid_text(p)}; study {_search_text(p.search)}; "
                      f"widens {_widens_text(p)})", indent=2, hang=2, markup=False, highlight=False)
        print_wrapped(stdout, p.help, indent=6, style="dim", markup=False, highlight=False)


def _default_text(value: object) -> str:
    """A default as a person reads it: 0.0313725 for 8/255, not 0.03137254901960784."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _widens_text(p: HParam) -> str:
    """Which ends of a study range may widen (both, lower, upper or no), and how far at most where that is not the
    valid values: `upper to 0.9`."""
    if not p.soft:
        return "no"
    if not p.limit:
        return p.soft
    return f"{p.soft} to {p.widen_limit.high:g}" if p.soft == "upper" else f"{p.soft} in {p.limit}"


def _valid_text(p: HParam) -> str:
    return " | ".join(p.valid) if isinstance(p.valid, tuple) else p.valid or "true | false"


def _search_text(search: Range | Choice | None) -> str:
    if search is None:
        return "fixed"
    if isinstance(search, Choice):
        return " | ".join(str(v).lower() for v in search.values)
    return f"[{search.low:g}, {search.high:g}]" + (" log" if search.log else "")
