"""The GI-LS paper's splits (Tables 1 and 2) from fake raw trees with the real pool sizes."""
from pathlib import Path

import pytest
from conftest import MT_POOLS, make_magnetic_tile_tree

from pipeline.data.manifest import read_manifest
from pipeline.data.paper_splits import CARPET, MT, MT_DEFECT, WOOD, magnetic_tile_splits, mvtec_split

TABLES = {"mt-defect": MT_DEFECT, "mt": MT, "wood": WOOD, "carpet": CARPET}


@pytest.fixture(scope="module")
def splits(mt_root, mvtec_root):
    return {**magnetic_tile_splits(mt_root, seed=0), **mvtec_split(mvtec_root, "wood", seed=0),
            **mvtec_split(mvtec_root, "carpet", seed=0)}


@pytest.mark.parametrize("name", TABLES)
def test_each_split_has_exactly_the_papers_counts_per_class_and_split(splits, name):
    assert splits[name].counts() == TABLES[name]
    assert list(splits[name].class_names) == list(TABLES[name])


@pytest.mark.parametrize("name", TABLES)
def test_a_split_holds_distinct_existing_images_and_no_masks(splits, name):
    manifest = splits[name]
    assert len(set(manifest.paths)) == len(manifest.paths)
    for path in manifest.paths:
        assert (manifest.root / path).is_file()
        assert "ground_truth" not in path and not path.endswith("_mask.png")
        assert path.endswith(".jpg") if name.startswith("mt") else path.endswith(".png")


def test_free_is_drawn_from_train_good_and_test_good_pooled(splits):
    free = [p for p, label in zip(splits["wood"].paths, splits["wood"].labels) if label == 0]
    assert {Path(p).parts[1:3] for p in free} <= {("train", "good"), ("test", "good")}
    assert all(p.startswith("wood/") for p in free) and len(free) == 110 + 137


def test_carpet_defects_use_their_whole_pools(splits):
    carpet = splits["carpet"]
    for label, name in enumerate(carpet.class_names[1:], start=1):
        assert (sum(1 for lab in carpet.labels if lab == label)
                == len(list(Path(carpet.root, "carpet", "test", name).iterdir())))


def test_same_seed_same_split_and_another_seed_another_split_with_the_same_counts(mt_root, splits):
    again = magnetic_tile_splits(mt_root, seed=0)
    assert again["mt-defect"] == splits["mt-defect"] and again["mt"] == splits["mt"]
    other = magnetic_tile_splits(mt_root, seed=1)["mt-defect"]
    assert other.counts() == splits["mt-defect"].counts()
    train = {p for p, t in zip(splits["mt-defect"].paths, splits["mt-defect"].is_train) if t}
    other_train = {p for p, t in zip(other.paths, other.is_train) if t}
    assert train != other_train


def test_prepare_mt_writes_cub_style_manifests(cli, mt_root, tmp_path):
    code, out, err = cli("data", "prepare", "mt", "--root", str(mt_root), "--out", str(tmp_path / "splits"))
    assert code == 0, err
    assert "mt-defect" in out and "460" in out
    folder = tmp_path / "splits" / "mt-defect"
    assert sorted(p.name for p in folder.iterdir()) == ["classes.txt", "image_class_labels.txt", "images.txt",
                                                       "root.txt", "train_test_split.txt"]
    assert (folder / "classes.txt").read_text() == "1 Uneven\n2 Blowhole\n3 Break\n4 Crack\n5 Fray\n"
    images = (folder / "images.txt").read_text().splitlines()
    assert len(images) == 54 + 49 + 67 + 48 + 46 + 39 + 28 + 26 + 13 + 16
    assert images[0].startswith("1 MT_Uneven/Imgs/") and images[0].endswith(".jpg")
    assert (folder / "image_class_labels.txt").read_text().splitlines()[-1] == f"{len(images)} 5"
    flags = [line.split()[1] for line in (folder / "train_test_split.txt").read_text().splitlines()]
    assert flags.count("1") == 54 + 67 + 46 + 28 + 13 and set(flags) == {"0", "1"}
    assert Path((folder / "root.txt").read_text().strip()) == mt_root.resolve()
    assert read_manifest(folder) == magnetic_tile_splits(mt_root, seed=0)["mt-defect"]


def test_prepare_mvtec_writes_one_split_per_category(cli, mvtec_root, tmp_path):
    code, out, err = cli("data", "prepare", "mvtec", "--root", str(mvtec_root), "--category", "carpet",
                         "--out", str(tmp_path), "--seed", "3")
    assert code == 0, err
    assert read_manifest(tmp_path / "carpet") == mvtec_split(mvtec_root, "carpet", seed=3)["carpet"]
    assert "metal_contamination" in out


def test_an_existing_split_is_not_overwritten_without_force(cli, mvtec_root, tmp_path):
    args = ("data", "prepare", "mvtec", "--root", str(mvtec_root), "--category", "wood", "--out", str(tmp_path))
    assert cli(*args)[0] == 0
    before = (tmp_path / "wood" / "images.txt").read_text()
    code, _, err = cli(*args, "--seed", "1")
    assert code == 2 and "--force" in err and str(tmp_path / "wood") in err.replace("\n", "")
    assert (tmp_path / "wood" / "images.txt").read_text() == before
    code, _, err = cli(*args, "--seed", "1", "--force")
    assert code == 0, err
    assert (tmp_path / "wood" / "images.txt").read_text() != before


def test_a_short_pool_stops_with_exit_2_naming_class_found_and_needed(cli, tmp_path):
    root = make_magnetic_tile_tree(tmp_path / "raw", pools={**MT_POOLS, "Crack": 20})
    code, out, err = cli("data", "prepare", "mt", "--root", str(root), "--out", str(tmp_path / "splits"))
    assert code == 2 and out == ""
    message = " ".join(err.split())
    assert "class Crack has 20 images, needs 54" in message
    assert not (tmp_path / "splits").exists()


@pytest.mark.parametrize("args, message", [
    (["mvtec", "--category", "grid"], "unknown MVTec category 'grid'"),
    (["mt", "--root", "/nonexistent/raw"], "raw data folder not found"),
])
def test_bad_prepare_input_is_exit_2(cli, mvtec_root, tmp_path, args, message):
    root = [] if "--root" in args else ["--root", str(mvtec_root)]
    code, _, err = cli("data", "prepare", *args, *root, "--out", str(tmp_path))
    assert code == 2 and message in " ".join(err.split())
