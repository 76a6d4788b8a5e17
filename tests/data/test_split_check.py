"""A class a split lost is refused, never silently left out of balanced and worst-class accuracy; the split sizes
are printed once."""
from __future__ import annotations


from helpers import STUDIES, write_folder


def test_a_two_image_class_is_refused_in_one_line(cli, tmp_path):
    write_folder(tmp_path / "images", classes=("common", "other"), per_class=10)
    write_folder(tmp_path / "rare-only", classes=("rare",), per_class=2)
    (tmp_path / "rare-only" / "rare").rename(tmp_path / "images" / "rare")
    code, out, err = cli("train", "--dataset", "images", "--root", str(tmp_path / "images"), "--cache-dir", "",
                         "-p", "epochs=1")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "class 'rare' (2 example(s) in all) has none in the val and test splits" in lines[0]


def test_train_prints_each_splits_examples_per_class_once(cli, tmp_path):
    code, out, err = cli("train", "-p", "epochs=1", "--imbalance-class", "3", "--imbalance-keep", "0.05")
    assert code == 0, err
    assert err.count("examples per split and class:") == 1  # on stderr, before training
    train_line = next(line for line in err.splitlines() if line.startswith("train "))
    assert " 3*:5 " in train_line  # the rare digit's 5 training examples, shown where they can be checked


def test_run_refuses_a_lost_class_before_any_trial(cli, tmp_path):
    write_folder(tmp_path / "images", classes=("a", "b"), per_class=10)
    write_folder(tmp_path / "more", classes=("c",), per_class=2)
    (tmp_path / "more" / "c").rename(tmp_path / "images" / "c")
    study = STUDIES / "quickstart.toml"
    db = tmp_path / "s.db"
    code, out, err = cli("run", str(study), "--db", str(db), "--set", "data.name=images",
                         "--set", f"data.root={tmp_path / 'images'}", "--set", "data.cache_dir=",
                         "--set", "data.imbalance_class=a", "--log-file", str(tmp_path / "log.txt"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "class 'c'" in lines[0], err
    assert not db.exists()  # refused before the study was created
