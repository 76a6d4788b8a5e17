"""Backbone + head models, their weights and the optimiser schedule."""
import pytest
import torch
import torchvision

from pipeline.errors import UserError
from pipeline.training.models import build_model, imagenet_cache_path, make_optimizer
from pipeline.params import TRAINING_PARAMS, resolve


def test_small_cnn_exposes_features_and_head():
    model = build_model("small_cnn", "none", 1, 10)
    x = torch.randn(4, 1, 8, 8)
    z = model.features(x)
    assert z.shape == (4, 128)
    assert torch.equal(model(x), model.head(z))
    assert model.head.weight.shape == (10, 128)


@pytest.mark.parametrize("backbone, dim", [("resnet18", 512), ("resnet34", 512), ("resnet50", 2048)])
def test_resnets_are_a_feature_extractor_and_a_linear_head(backbone, dim):
    model = build_model(backbone, "none", 3, 6).eval()
    assert model.features(torch.randn(2, 3, 32, 32)).shape == (2, dim)
    assert model.head.out_features == 6


def test_grayscale_images_reach_a_three_channel_backbone():
    model = build_model("resnet18", "none", 1, 3).eval()
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 3)


def test_weights_from_a_state_dict_file(tmp_path):
    torch.manual_seed(1)
    source = torchvision.models.resnet18(num_classes=1000)
    path = tmp_path / "resnet18.pt"
    torch.save({"state_dict": source.state_dict()}, path)
    model = build_model("resnet18", str(path), 3, 4)
    assert torch.equal(model.features.conv1.weight, source.conv1.weight)
    assert torch.equal(model.features.layer4[1].bn2.running_var, source.layer4[1].bn2.running_var)


def test_imagenet_weights_come_from_torchvisions_local_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    cached = imagenet_cache_path("resnet18")
    assert str(cached).startswith(str(tmp_path)) and cached.name.startswith("resnet18-")
    with pytest.raises(UserError, match="not cached at .*resnet18"):
        build_model("resnet18", "imagenet", 3, 4)
    torch.manual_seed(2)
    source = torchvision.models.resnet18()
    cached.parent.mkdir(parents=True)
    torch.save(source.state_dict(), cached)
    model = build_model("resnet18", "imagenet", 3, 4)
    assert torch.equal(model.features.layer1[0].conv1.weight, source.layer1[0].conv1.weight)


@pytest.mark.parametrize("weights, message", [
    ("missing.pt", "weights file not found"),
    ("wrong", "do not fit the backbone"),
    ("garbage", "is not a file written by torch.save"),
])
def test_bad_weights_are_one_line_errors(tmp_path, weights, message):
    path = tmp_path / "w.pt"
    if weights == "wrong":
        torch.save(torchvision.models.resnet34().state_dict(), path)
    elif weights == "garbage":
        path.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=message):
        build_model("resnet18", str(path) if weights != "missing.pt" else weights, 3, 4)


def test_unknown_backbone_and_imagenet_small_cnn():
    with pytest.raises(UserError, match="unknown backbone 'vgg'"):
        build_model("vgg", "none", 3, 2)
    with pytest.raises(UserError, match="small_cnn has no ImageNet weights"):
        build_model("small_cnn", "imagenet", 1, 2)


def test_head_and_backbone_learning_rates_decay_by_0_3_every_20_epochs():
    model = build_model("small_cnn", "none", 1, 3)
    optimizer, scheduler = make_optimizer(model, resolve(TRAINING_PARAMS, {}, "erm"))
    head, backbone = optimizer.param_groups
    assert (head["lr"], backbone["lr"], head["momentum"]) == (1e-2, 1e-3, 0.9)
    assert {id(p) for p in head["params"]} == {id(p) for p in model.head.parameters()}
    optimizer.step()  # the schedule counts epochs after the first optimiser step
    for _ in range(20):
        scheduler.step()
    assert head["lr"] == pytest.approx(3e-3) and backbone["lr"] == pytest.approx(3e-4)
    for _ in range(20):
        scheduler.step()
    assert head["lr"] == pytest.approx(9e-4)


def test_a_zero_backbone_learning_rate_freezes_the_feature_extractor():
    model = build_model("small_cnn", "none", 1, 3)
    optimizer, _ = make_optimizer(model, resolve(TRAINING_PARAMS, {"lr_backbone": 0}, "erm"))
    assert len(optimizer.param_groups) == 1
    assert not any(p.requires_grad for p in model.features.parameters())


def test_wrn16_1_has_the_published_size_and_a_64_feature_head():
    """WRN-16-1 at 10 classes on 3-channel images has 175,066 parameters, the layer-by-layer sum of
    Zagoruyko & Komodakis (2016, section 2.3) at depth 16 and width 1: stem conv 432; group 1 (16 -> 16,
    2 blocks) 9,344; group 2 (16 -> 32, stride 2, 1x1 shortcut) 32,992; group 3 (32 -> 64) 131,520; final
    BN 128; head 64 x 10 + 10 = 650. Published as about 0.17 M; a grayscale stem (144) makes 174,778."""
    model = build_model("wrn16_1", "none", in_channels=3, num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == 175_066
    grayscale = build_model("wrn16_1", "none", in_channels=1, num_classes=10)
    assert sum(p.numel() for p in grayscale.parameters()) == 174_778
    images = torch.randn(4, 1, 28, 28)
    assert grayscale.embed(images).shape == (4, 64) and grayscale(images).shape == (4, 10)
    assert torch.equal(grayscale.head(grayscale.embed(images)), grayscale(images))
    with pytest.raises(UserError, match="wrn16_1 has no ImageNet weights"):
        build_model("wrn16_1", "imagenet", 1, 10)


def test_a_small_network_trains_without_importing_torchvision_and_its_version_is_read_as_torchvision_says():
    """torchvision's import costs about a second a process (it imports torch._dynamo): only a ResNet or a mixer
    imports it; the version stored with every run is still torchvision.__version__, build label included."""
    import subprocess
    import sys

    script = ("import sys\n"
              "import torch\n"
              "from pipeline.config import DataConfig, TrainConfig\n"
              "from pipeline.data import load_dataset\n"
              "from pipeline.training.trainer import train, torchvision_version\n"
              "digits = load_dataset(DataConfig(), torch.device('cpu'))\n"
              "train(TrainConfig(method='erm', params={'epochs': 1}, device='cpu'), digits)\n"
              "version = torchvision_version()\n"
              "assert 'torchvision' not in sys.modules, 'imported'\n"
              "import torchvision\n"
              "assert version == torchvision.__version__, (version, torchvision.__version__)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
