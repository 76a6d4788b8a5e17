"""Validated configuration objects: plain, frozen data that fully describe a training run."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from pipeline.errors import FieldError, UserError, did_you_mean, one_of


if TYPE_CHECKING:
    import torch

NORMALIZATIONS = ("auto", "imagenet", "dataset")
BACKBONES = ("small_cnn", "wrn16_1", "resnet18", "resnet34", "resnet50")  # built by pipeline.training.models
# Where the imbalance applies. "train": the hardness paper's protocol, only training loses examples of
# the rare class and validation and test keep the natural distribution (so a rare class can be seen
# by the objective). "train+val": validation is skewed too, for data whose validation images come
# from the same skewed source as training.
IMBALANCE_SPLITS = ("train", "train+val")
# The kinds of data set (pipeline/data LOADERS reads each; a test checks the two agree): named here so that a study
# file's data.name is checked, with a suggestion, as it is read, without loading torch.
DATA_SETS = ("digits", "images", "idx", "medmnist")
# Which examples of the rare class stay. "drawn": a draw seeded by the split seed, so each split seed (each pair of
# a campaign that resplits) keeps other ones. "first": the first ones by index, whatever the split seed, as every
# version before the choice existed did; a study stored then keeps it (DataConfig.from_dict).
RARE_KEPT = ("drawn", "first")
# Arithmetic of the network's forward passes (training, the GI-LS ascent, the attacks, evaluation). bf16 runs
# the backbone under autocast; the head, the losses, the transport cost and the hardness weights stay fp32.
# auto: bf16 on a GPU that computes in it natively, fp32 elsewhere (a CPU gains nothing from it).
PRECISIONS = ("auto", "fp32", "bf16")
# torch's CPU threads for every run, whatever runs it (this process, a Dask worker, `train`, `evaluate`): the
# thread count sets the order of float sums on a CPU, and on a few hundred images a last-bit difference grows
# into points of accuracy, so one count everywhere is what makes a stored run reproduce exactly. One, because
# every machine has it (a count tied to the cores would differ between a laptop and a cluster node), N workers
# of one thread each fill N cores without oversubscribing them, and it is never the slow case: on 2 idle cores a
# quickstart trial takes 1.4x as long as on 2 threads, but with the cores shared 2 threads took twice as long
# as 1 (measured in docs/design/performance.md). A study created with more threads keeps them.
DEFAULT_THREADS = 1
DEFAULT_TRIALS_PER_GPU = 2  # trials sharing one GPU by default: most of 4's gain (docs/design/performance.md)
WORKER_MEMORY_GIB = 2  # free memory per default local worker: its libraries, its copy of the data set and a trial
# Where the database lives when no --db, ROBUST_TUNE_DB or study says otherwise (a SQLite file).
DEFAULT_DB = "runs/robust-tune.db"
MAX_THREADS = 1024


# The image size per backbone where no file or option gives one (train, study and campaign files): the small CNN
# and WRN-16-1 are made for small images (a 3-trial study of 326 images took 18 min at 224 px, 4.4 s at 32), the
# ResNets for ImageNet's 224 px. A study stored with another size keeps it (StudyConfig.settle_image_size).
SMALL_IMAGE_SIZE = {"small_cnn": 32, "wrn16_1": 32}
# The data set kinds that resize image files; the others (digits, idx, medmnist) keep their arrays' own size.
IMAGE_FILE_DATA = ("images",)


def sqlite_path(db: str | None) -> Path | None:
    """The file of the SQLite database `db` names (a path or a sqlite:/// URL; None: DEFAULT_DB), read off the text
    without loading a database driver; None for a database on a server or in memory."""
    db = db or DEFAULT_DB
    path = db.removeprefix("sqlite:///").split("?")[0] if db.startswith("sqlite:///") else None if "://" in db else db
    return None if not path or path == ":memory:" else Path(path)


def default_image_size(backbone: str) -> int:
    """The side image files are resized to when nothing says: 32 px for the small CNN and WRN-16-1, else 224 px."""
    return SMALL_IMAGE_SIZE.get(backbone, 224)


def image_size_for(dataset: str, backbone: str) -> int:
    """`data.image_size` where no file or option gives it: the backbone's default for image files; for the data
    sets that keep their own size it does nothing and stays at DataConfig's 224, as every study stored it (so
    their studies keep their identity)."""
    return default_image_size(backbone) if dataset in IMAGE_FILE_DATA else DataConfig.image_size


@dataclass(frozen=True)
class DataConfig:
    """Which data set and how to split it. The split seed is separate from the training seed so
    that several training seeds can be compared on the same split."""

    name: str = "digits"
    split_seed: int = 0
    # Folder per class: both fractions of all images. Manifest: val_fraction of its training images
    # (its test images are the manifest's own) and test_fraction is not used. val_fraction = 0 trains on
    # the whole training split with an empty validation split (the GI-LS paper's protocol: ranked on test).
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    # Train on a sample of the data set (a first campaign on a large one): a count of images per class (an int: at
    # most that many of each class in all, spread over the parts the files give, e.g. IDX's training and test
    # files, in their proportions) or a fraction of each class of each part (a float in (0, 1]); drawn with the
    # split seed before anything else (splits.draw_sample), so the rare class keeps imbalance_keep of its sample.
    # None: every image.
    sample: int | float | None = None
    imbalance_class: str | None = None  # keep only `imbalance_keep` of this class in the splits of imbalance_in
    imbalance_keep: float = 0.01
    imbalance_in: str = "train"  # one of IMBALANCE_SPLITS; the test split is never changed
    rare_kept: str = "drawn"  # one of RARE_KEPT: which of imbalance_class's examples stay
    # Image data sets (name "images"): one sub-folder per class under `root`, or a manifest folder.
    root: str | None = None  # the folder per class; with a manifest, the image root (overrides its root.txt)
    manifest: str | None = None  # a manifest folder as written by `robust-tune data prepare`
    # name "idx": `root` holds the four MNIST-format files. name "medmnist": `path` is a MedMNIST .npz (its own
    # validation and test splits; val_fraction and test_fraction are not used). Both keep their arrays' own
    # size and channels: image_size, channels and cache_dir apply to image files only.
    path: str | None = None
    # every image is resized to image_size x image_size; where a file or option does not say: image_size_for
    image_size: int = 224
    channels: int = 3  # 3: grayscale replicated (what ImageNet backbones expect); 1: luminance only
    normalize: str = "auto"  # imagenet | dataset (per-channel train statistics) | auto (imagenet iff pretrained)
    cache_dir: str = "runs/cache"  # decoded, resized pixels are kept here; "" turns the cache off
    # Light augmentation of training batches, on the device; off by default. Applies to every data set.
    augment_flip: bool = False  # random horizontal flip
    augment_crop_padding: int = 0  # random crop of the same size from the image padded by this many pixels

    def __post_init__(self) -> None:
        if (not (0 <= self.val_fraction < 1 and 0 < self.test_fraction < 1)
                or self.val_fraction + self.test_fraction >= 1):
            raise UserError("val_fraction must be in [0, 1) and test_fraction in (0, 1), summing to less than 1")
        if self.sample is not None and not (_is_int(self.sample) and self.sample >= 1 or isinstance(
                self.sample, float) and 0 < self.sample <= 1):
            raise UserError("sample must be a count of images per class (a whole number, 1 or more) or a fraction of "
                            f"each class (a number above 0, at most 1), got {self.sample!r}")
        if not 0 < self.imbalance_keep <= 1:
            raise UserError(f"imbalance_keep must be in (0, 1], got {self.imbalance_keep}")
        if self.imbalance_in not in IMBALANCE_SPLITS:
            raise UserError(f"imbalance_in {one_of(self.imbalance_in, IMBALANCE_SPLITS)}")
        if self.rare_kept not in RARE_KEPT:
            raise UserError(f"rare_kept {one_of(self.rare_kept, RARE_KEPT)}")
        if self.name == "images" and not (self.root or self.manifest):
            raise UserError("data set images needs root (a folder with one sub-folder per class) or manifest "
                            "(a folder written by `robust-tune data prepare`)")
        if self.name == "idx" and not self.root:
            raise UserError("data set idx needs root (a folder with train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                            "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each gzipped or not)")
        if self.name == "medmnist" and not self.path:
            raise UserError("data set medmnist needs path (a MedMNIST .npz archive)")
        if not _is_int(self.image_size) or not 8 <= self.image_size <= 4096:
            raise UserError(f"image_size must be an integer in [8, 4096], got {self.image_size!r}")
        if self.channels not in (1, 3) or not _is_int(self.channels):
            raise UserError(f"channels must be 1 or 3, got {self.channels!r}")
        if self.normalize not in NORMALIZATIONS:
            raise UserError(f"normalize {one_of(self.normalize, NORMALIZATIONS)}")
        if self.name not in DATA_SETS:
            raise UserError(f"name {one_of(self.name, DATA_SETS)}")
        if self.normalize == "imagenet" and self.channels != 3:
            raise UserError("ImageNet normalisation (pretrained weights) needs channels = 3")
        if not _is_int(self.augment_crop_padding) or not 0 <= self.augment_crop_padding < self.image_size:
            raise UserError("augment_crop_padding must be an integer in [0, image_size), "
                            f"got {self.augment_crop_padding!r}")
        if not isinstance(self.augment_flip, bool):
            raise UserError(f"augment_flip must be true or false, got {self.augment_flip!r}")

    def location(self, key: str) -> Path:
        """Where `key` (root, manifest or path) points: one this data set's kind requires (see above)."""
        value = getattr(self, key)
        if value is None:
            raise FieldError("", f"data.{key}", f"data set {self.name} needs {key}")
        return Path(value)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DataConfig:
        """A stored DataConfig (a study's, or a run's settings) as this version reads it: a field added since it
        was stored is at the value that reproduces what it did (its default but for imbalance_in, which was
        train+val for an imbalanced split, and rare_kept, which was the first ones); one since removed is dropped."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        if values.get("imbalance_class") is not None:
            values.setdefault("imbalance_in", "train+val")
        values.setdefault("rare_kept", "first")
        return cls(**values)

    def used(self) -> dict[str, Any]:
        """The fields this data set reads, by name: none at None, no imbalance setting without a rare class, no
        split fraction its kind takes from its files, no image-file setting for arrays. A study file that
        reproduces it needs these and no others (`best` writes them)."""
        unused = set()
        if self.imbalance_class is None:
            unused |= {"imbalance_keep", "imbalance_in", "rare_kept"}
        if self.name not in IMAGE_FILE_DATA:
            unused |= {"image_size", "channels", "cache_dir"}
        if self.name in ("idx", "medmnist") or self.manifest:  # their own test split
            unused.add("test_fraction")
        if self.name == "medmnist":  # its own validation split too
            unused.add("val_fraction")
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None and f.name not in unused}

    @property
    def rare_drawn(self) -> bool:
        """Whether the rare class's examples kept in training are drawn with the split seed (RARE_KEPT)."""
        return self.imbalance_class is not None and self.rare_kept == "drawn"


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class TrainConfig:
    """One training run: data, network, method and its parameter values (unresolved: as given)."""

    data: DataConfig = field(default_factory=DataConfig)
    backbone: str = "small_cnn"
    weights: str = "none"
    method: str = "erm"
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"  # one of PRECISIONS; like the device, how the run computes, not what it learns
    threads: int = DEFAULT_THREADS  # torch's CPU threads while the run trains and evaluates

    def __post_init__(self) -> None:
        check_precision(self.precision)
        check_threads(self.threads)
        if self.data.normalize == "auto":  # pretrained weights expect the statistics they were trained on
            normalize = "dataset" if self.weights == "none" else "imagenet"
            object.__setattr__(self, "data", replace(self.data, normalize=normalize))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RunSettings:
    """The settings one run trained with, as the trainer resolved them: what a result, a stored trial or
    evaluation and a saved model carry, so that any of them can be trained again exactly."""

    data: DataConfig
    backbone: str
    weights: str
    method: str  # the method's canonical name
    params: dict[str, Any]  # every parameter, defaults filled in
    seed: int
    device: str  # where it ran: cpu, cuda, ...
    precision: str  # fp32 | bf16, resolved
    threads: int | None = None  # torch's CPU threads; None for runs stored before it was recorded
    versions: dict[str, str] | None = None  # python, torch, torchvision, robust-tune; None before they were recorded

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunSettings:
        """Stored settings as this version reads them; a run stored before a field existed gets the value
        that reproduces what it did (fp32 before precision could be chosen), or None where it is unknown
        (the thread count, the library versions)."""
        default = TrainConfig()
        return cls(data=DataConfig.from_dict(raw.get("data") or {}), backbone=raw.get("backbone", default.backbone),
                   weights=raw.get("weights", default.weights), method=raw.get("method", default.method),
                   params=dict(raw.get("params") or {}), seed=raw.get("seed", default.seed),
                   device=raw.get("device", "cpu"), precision=raw.get("precision", "fp32"),
                   threads=raw.get("threads"), versions=raw.get("versions"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def train_config(self) -> TrainConfig:
        """The configuration that trains this run again, on the device, at the precision and with the thread
        count it ran with (the default where none was recorded)."""
        return TrainConfig(data=self.data, backbone=self.backbone, weights=self.weights, method=self.method,
                           params=dict(self.params), seed=self.seed, device=self.device, precision=self.precision,
                           threads=self.threads or DEFAULT_THREADS)


def resolve_device(name: str) -> "torch.device":
    """auto -> cuda when available, else cpu; asking for cuda without a GPU is a UserError.
    torch is imported here, not at the top, so reading configurations never loads it."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda was asked for but no CUDA GPU is available; use --device cpu or auto")
    if name not in ("cpu", "cuda"):
        raise UserError(f"unknown device {name!r}{did_you_mean(name, ('auto', 'cpu', 'cuda'))}; use auto, cpu or cuda")
    return torch.device(name)


def check_precision(name: str) -> None:
    """A UserError naming the choices unless `name` is one of PRECISIONS."""
    if name not in PRECISIONS:
        raise UserError(f"unknown precision {name!r}{did_you_mean(name, PRECISIONS)}; use {', '.join(PRECISIONS)}")


def check_threads(threads: object) -> None:
    """A UserError unless `threads` is a whole number of torch CPU threads, 1 to MAX_THREADS."""
    if not _is_int(threads) or not 1 <= threads <= MAX_THREADS:
        raise UserError(f"threads must be a whole number from 1 to {MAX_THREADS} (torch's CPU threads), "
                        f"got {threads!r}")


def resolve_precision(name: str, device: "torch.device") -> str:
    """auto -> bf16 on a GPU with native bf16 arithmetic, else fp32; bf16 on a GPU without it is a UserError."""
    import torch

    native = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    if name == "auto":
        return "bf16" if native else "fp32"
    if name == "bf16" and device.type == "cuda" and not native:
        raise UserError(f"this GPU ({torch.cuda.get_device_name(device)}) has no native bf16 arithmetic; "
                        "use --precision fp32")
    return name
