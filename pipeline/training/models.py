"""Backbone + linear head, so methods can reach the feature map z = f(theta_r; x) and the head.

Backbones: a small CNN for 8x8-32x32 inputs (CPU quickstart), WRN-16-1 for 28x28-32x32 images (the hardness
paper's MNIST network) and torchvision ResNet18/34/50.
Weights: "none", "imagenet" (torchvision's weights, from its local cache) or a path to a state_dict.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn

from pipeline.config import BACKBONES
from pipeline.errors import UserError


class Classifier(nn.Module):
    """features: x -> z (a flat feature map); head: z -> logits (the final linear layer).

    Methods reach z through `embed`, which runs the backbone the way `run_as` set: in bf16 under autocast
    or in fp32, on channels-last or standard tensors. z always comes back in fp32, so the head, the losses
    and the GI-LS transport cost on z are computed in fp32.
    """

    def __init__(self, features: nn.Module, feature_dim: int, num_classes: int) -> None:
        super().__init__()
        self.features = features
        self.head = nn.Linear(feature_dim, num_classes)
        self.autocast: torch.dtype | None = None  # the backbone's dtype under autocast; None: fp32
        self.channels_last = False

    def run_as(self, autocast: torch.dtype | None = None, channels_last: bool = False) -> "Classifier":
        """Set the backbone's precision and memory format (channels-last suits cuDNN's convolutions)."""
        self.autocast, self.channels_last = autocast, channels_last
        return self.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """z = f(x) in fp32, the backbone run as `run_as` set."""
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if self.autocast is None:
            return self.features(images)
        with torch.autocast(images.device.type, dtype=self.autocast):
            return self.features(images).float()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(images))


class RepeatChannels(nn.Module):
    """Feed single-channel images to a three-channel backbone."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.expand(-1, 3, -1, -1) if images.shape[1] == 1 else images


def _conv_block(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
                         nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True))


def small_cnn(in_channels: int) -> tuple[nn.Module, int]:
    """Three conv-BN-ReLU blocks and global average pooling: 128 features, fast on a CPU."""
    trunk = nn.Sequential(_conv_block(in_channels, 32), _conv_block(32, 64), nn.MaxPool2d(2),
                          _conv_block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return trunk, 128


class PreActBlock(nn.Module):
    """A wide ResNet's basic block: BN-ReLU-conv3x3, BN-ReLU-conv3x3, added to the input (through a 1x1
    convolution of the pre-activated input where the width or the stride changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(in_channels), nn.BatchNorm2d(out_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
                         if stride != 1 or in_channels != out_channels else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = torch.relu(self.bn1(x))
        out = self.conv2(torch.relu(self.bn2(self.conv1(activated))))
        return out + (x if self.shortcut is None else self.shortcut(activated))


def wide_resnet(in_channels: int, depth: int = 16, width: int = 1) -> tuple[nn.Module, int]:
    """WRN-depth-width (Zagoruyko & Komodakis 2016, section 2.3): a 3x3 conv to 16 channels, three groups of
    (depth - 4) / 6 pre-activation blocks of 16k, 32k and 64k channels (strides 1, 2, 2), BN-ReLU and global
    average pooling; 64k features. WRN-16-1, the hardness-weighted sampling paper's MNIST network, is (16, 1)."""
    blocks = (depth - 4) // 6
    widths = (16, 16 * width, 32 * width, 64 * width)
    layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)]
    for group, stride in enumerate((1, 2, 2)):
        for block in range(blocks):
            layers.append(PreActBlock(widths[group] if block == 0 else widths[group + 1], widths[group + 1],
                                      stride if block == 0 else 1))
    layers += [nn.BatchNorm2d(widths[3]), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers), widths[3]


# Networks trained from scratch on small images (no ImageNet weights): name -> (in_channels -> trunk, features).
SMALL_NETWORKS: dict[str, Callable[[int], tuple[nn.Module, int]]] = {"small_cnn": small_cnn, "wrn16_1": wide_resnet}

# torchvision's ResNets by name: (builder, ImageNet weights), each looked up when a ResNet is built. torchvision is
# imported only then: its import takes about a second (it imports torch._dynamo), which every trial of a small
# network would pay.
RESNETS = {"resnet18": ("resnet18", "ResNet18_Weights"), "resnet34": ("resnet34", "ResNet34_Weights"),
           "resnet50": ("resnet50", "ResNet50_Weights")}
assert BACKBONES == (*SMALL_NETWORKS, *RESNETS), "pipeline.config.BACKBONES names every network built here"


def _resnet(backbone: str) -> tuple[Callable[..., Any], Any]:
    """torchvision's builder of `backbone` and its ImageNet weights (a torchvision WeightsEnum member)."""
    import torchvision

    builder, weights = RESNETS[backbone]
    return getattr(torchvision.models, builder), getattr(torchvision.models, weights).IMAGENET1K_V1


def imagenet_cache_path(backbone: str) -> Path:
    """Where torchvision keeps the ImageNet weights of `backbone` (under $TORCH_HOME)."""
    url = _resnet(backbone)[1].url
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


def _imagenet_state_dict(backbone: str) -> dict[str, torch.Tensor]:
    cached = imagenet_cache_path(backbone)
    if cached.exists():
        return torch.load(cached, map_location="cpu", weights_only=True)
    if os.environ.get("ROBUST_TUNE_OFFLINE"):
        raise UserError(f"ImageNet weights for {backbone} are not cached at {cached} and downloads are off "
                        f"(ROBUST_TUNE_OFFLINE); copy {_resnet(backbone)[1].url} there or pass weights=<path>")
    try:
        return _resnet(backbone)[1].get_state_dict(progress=False)
    except Exception as error:  # no network, proxy, broken file: all end the same way for the user
        raise UserError(f"ImageNet weights for {backbone} are not cached at {cached} and could not be "
                        f"downloaded ({type(error).__name__}); copy the file there or pass weights=<path>") from None


STATE_DICT_FILE = "a state_dict saved with torch.save(model.state_dict(), path)"


def read_torch_file(path: str, expected: str = STATE_DICT_FILE) -> object:
    """What a file written by torch.save holds, read with weights_only (tensors and plain types, never code);
    a missing, empty or foreign file is a UserError saying what it is and what was `expected` instead."""
    if not Path(path).is_file():
        choices = "use none, imagenet or a path to a state_dict" if expected == STATE_DICT_FILE else f"give {expected}"
        raise UserError(f"weights file not found: {path} ({choices})")
    if Path(path).stat().st_size == 0:
        raise UserError(f"weights file {path} is empty")
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols; the outcome is what matters
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        raise UserError(f"cannot read weights file {path}: {error.strerror or error}") from None
    except Exception as error:
        if "Unsupported global" in str(error):  # torch.save(model) rather than torch.save(model.state_dict())
            raise UserError(f"weights file {path} holds Python objects, not only tensors (a whole pickled "
                            "model?); save model.state_dict() instead") from None
        raise UserError(f"weights file {path} is not a file written by torch.save; give {expected}") from None
    return state


def _file_state_dict(path: str) -> dict[str, torch.Tensor]:
    """The state_dict in a file written by torch.save; anything else is a UserError saying what the file is."""
    state = read_torch_file(path)
    for key in ("state_dict", "model"):  # common checkpoint wrappers
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise UserError(f"weights file {path} holds a {type(state).__name__}, not a state_dict")
    odd = next((key for key, value in state.items() if not isinstance(value, torch.Tensor)), None)
    if odd is not None:
        raise UserError(f"weights file {path} is not a state_dict: its entry {odd!r} is not a tensor but "
                        f"{type(state[odd]).__name__}")
    return _trunk_of_saved_classifier(state)


def _trunk_of_saved_classifier(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Classifier's own state_dict (`train --save`: keys `features.*` and `head.*`) as its trunk's keys, so a
    saved model starts a new run; any other state_dict is returned as it is. The head is trained anew, as with
    ImageNet weights (the new run may have other classes)."""
    if not state or not all(key.startswith(("features.", "head.")) for key in state):
        return state
    trunk = {key.removeprefix("features."): value for key, value in state.items() if key.startswith("features.")}
    if trunk and all(key.startswith("1.") for key in trunk):  # a ResNet behind RepeatChannels (1-channel data)
        trunk = {key.removeprefix("1."): value for key, value in trunk.items()}
    return trunk


def _load_into(module: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load everything but a classifier layer ("fc." keys): the head is always trained anew."""
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    expected = {k for k in module.state_dict() if not k.startswith("fc.")}
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise UserError(f"weights from {source} do not fit the backbone: {len(missing)} missing keys "
                        f"(e.g. {missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]})")
    try:
        module.load_state_dict(state, strict=False)
    except RuntimeError as error:
        details = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise UserError(f"weights from {source} do not fit the backbone: {details[-1]}") from None


def build_model(backbone: str, weights: str, in_channels: int, num_classes: int) -> Classifier:
    """A Classifier with the named backbone and weights; bad names or files are UserErrors."""
    if backbone in SMALL_NETWORKS:
        trunk, feature_dim = SMALL_NETWORKS[backbone](in_channels)
        if weights == "imagenet":
            raise UserError(f"{backbone} has no ImageNet weights; use a resnet backbone or weights=none")
        if weights != "none":
            _load_into(trunk, _file_state_dict(weights), weights)
        return Classifier(trunk, feature_dim, num_classes)
    if backbone not in RESNETS:
        raise UserError(f"unknown backbone {backbone!r}; known: {', '.join(BACKBONES)}")
    resnet = _resnet(backbone)[0](weights=None)
    if weights == "imagenet":
        _load_into(resnet, _imagenet_state_dict(backbone), "the ImageNet cache")
    elif weights != "none":
        _load_into(resnet, _file_state_dict(weights), weights)
    feature_dim = resnet.fc.in_features
    resnet.fc = nn.Identity()  # the trunk now ends in the flat, pooled feature map
    features = nn.Sequential(RepeatChannels(), resnet) if in_channels == 1 else resnet
    return Classifier(features, feature_dim, num_classes)


def check_weights(backbone: str, weights: str, in_channels: int) -> None:
    """Load `weights` into `backbone` once, so a file that is not a fitting state_dict stops a command
    with what is wrong before it trains or touches a database."""
    build_model(backbone, weights, in_channels, num_classes=2)


def make_optimizer(model: Classifier, params: dict) -> tuple[torch.optim.SGD, torch.optim.lr_scheduler.StepLR]:
    """SGD with momentum; separate learning rates for head and backbone; x lr_decay every lr_step epochs."""
    groups = [{"params": model.head.parameters(), "lr": params["lr_head"]}]
    if params["lr_backbone"] > 0:
        groups.append({"params": model.features.parameters(), "lr": params["lr_backbone"]})
    else:  # a frozen feature extractor: no parameter gradients are computed for it
        model.features.requires_grad_(False)
    optimizer = torch.optim.SGD(groups, momentum=params["momentum"], weight_decay=params["weight_decay"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=params["lr_step"], gamma=params["lr_decay"])
    return optimizer, scheduler
