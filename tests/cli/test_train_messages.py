"""What `train` says around a run (the counts before it, the rare class, a warning when it ends near chance), its
default learning rates from scratch, and errors that name where the mistake is: the --set option, a suggestion for a
mistyped name, no advice about quotes nobody typed, and nothing written for a refused input."""
from __future__ import annotations

import json
import shutil

import torch

from helpers import DATA, STUDIES, rows, write_folder


def test_train_prints_the_counts_before_training_within_80_columns_marking_the_rare_class(cli):
    code, out, err = cli("train", "-p", "epochs=1", "--imbalance-class", "3", "--imbalance-keep", "0.05",
                         "--format", "json")
    assert code == 0, err
    json.loads(out)  # the counts go to stderr, before training: stdout stays the result
    lines = err.splitlines()
    start = lines.index("examples per split and class:")
    counts = lines[start + 1:start + 5]
    assert all(len(line) <= 80 for line in counts), counts  # a pipe, not a terminal: 80 wide
    assert counts[0].startswith("train ") and " 3*:5" in counts[0] and counts[-1] == "* the rare class: 3", counts


def test_a_run_near_chance_is_warned_about_with_what_to_try(cli):
    code, out, err = cli("train", "-p", "epochs=1", "-p", "lr_head=1e-6", "-p", "lr_backbone=0")
    assert code == 0, err
    assert "warning: balanced accuracy near chance" in err and "chance is 10.0%" in err, err
    assert "classes got no test example right" in err
    assert "it has barely learned; try more epochs (-p epochs=30)" in err


def test_the_hint_for_classes_never_right_offers_only_weighing_methods_the_run_lacks_wrapped_at_the_width():
    import io

    from rich.console import Console

    from cli.render import print_line
    from helpers import run_result
    from pipeline.training.metrics import poor_run_warnings

    def hint(method: str) -> str:
        result = run_result({"val_balanced_accuracy": 0.5, "test_balanced_accuracy": 0.5},
                            {"test": {"a": 1.0, "r": 0.0}}, {"method": method, "params": {"epochs": 10}},
                            epoch_train_loss=[0.6, 0.1], epoch_val_accuracy=[0.5, 0.5])
        return poor_run_warnings(result)[-1]

    assert hint("erm").endswith("a method that weighs them (cb, groupdro, hws)")
    assert hint("hws").endswith("another method that weighs them (cb, groupdro)")  # not the one it already is
    assert hint("groupdro+hws").endswith("another method that weighs them (cb)")
    terminal = io.StringIO()
    print_line(Console(file=terminal, width=80, force_terminal=True, color_system=None), hint("hws"), markup=False)
    lines = terminal.getvalue().splitlines()
    assert len(lines) > 3 and all(len(line) <= 80 and line.startswith("  ") for line in lines), lines


def test_a_run_that_learned_gets_no_warning(cli):
    code, out, err = cli("train", "-p", "epochs=2")
    assert code == 0 and "warning" not in err, err


def test_a_small_cnn_from_scratch_trains_its_feature_extractor_at_the_heads_rate_and_pretrained_at_the_papers(
        cli, tmp_path):
    code, out, err = cli("train", "-p", "epochs=1", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["settings"]["params"]["lr_backbone"] == 0.01
    from pipeline.training.models import small_cnn

    torch.save(small_cnn(1)[0].state_dict(), tmp_path / "trunk.pt")
    code, out, err = cli("train", "-p", "epochs=1", "--weights", str(tmp_path / "trunk.pt"), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["settings"]["params"]["lr_backbone"] == 0.001


def test_a_study_stored_before_the_default_changed_keeps_its_rate(cli, tmp_path):
    """old-ls (tests/fixtures/v0.1.0.db, its 2 trials done) leaves lr_backbone to the default 0.001 of 0.1.0: its
    file is still that study, not another one refused."""
    db = tmp_path / "old.db"
    shutil.copy(DATA / "v0.1.0.db", db)
    code, out, err = cli("run", str(DATA / "old-ls.toml"), "--db", str(db), "--log-file", str(tmp_path / "log"))
    assert code == 0, err
    stored = json.loads(rows(db, "select config from rt_studies where name = 'old-ls'")[0][0])
    assert stored["fixed"]["lr_backbone"] == 0.001


def test_a_set_mistake_names_the_option_and_suggests_the_known_name(cli, tmp_path):
    db = tmp_path / "s.db"
    code, out, err = cli("run", str(STUDIES / "quickstart.toml"), "--db", str(db), "--set", "budget.trails=6")
    assert code == 2 and err.strip() == "error: --set budget.trails: unknown field (did you mean trials?)", err
    assert not db.exists()
    code, out, err = cli("run", str(STUDIES / "quickstart.toml"), "--db", str(db), "--set", "params.epoch=3")
    assert code == 2 and err.startswith("error: --set params.epoch: unknown parameter for method hws (did you mean "
                                        "epochs?)"), err


def test_a_word_given_for_a_number_is_not_told_to_drop_quotes_nobody_typed(cli, tmp_path):
    code, out, err = cli("run", str(STUDIES / "quickstart.toml"), "--db", str(tmp_path / "s.db"),
                         "--set", "params.epochs=three")
    assert code == 2 and "--set params.epochs:" in err and "must be an integer, got 'three'" in err, err
    assert "quotes" not in err
    study = tmp_path / "quoted.toml"
    study.write_text((STUDIES / "quickstart.toml").read_text().replace("epochs = 20", 'epochs = "20"'))
    code, out, err = cli("run", str(study), "--db", str(tmp_path / "s.db"))
    assert code == 2 and f"{study}: params.epochs:" in err and "write it without quotes" in err, err


def test_unknown_names_in_a_campaign_file_get_a_suggestion(cli, tmp_path):
    code, out, err = cli("compare", str(STUDIES / "digits-campaign.toml"), "--db", str(tmp_path / "c.db"),
                         "--set", "evaluate.seed=3")
    assert code == 2 and err.startswith("error: --set evaluate.seed: unknown field (did you mean seeds?)"), err
    campaign = tmp_path / "c.toml"
    campaign.write_text((STUDIES / "digits-campaign.toml").read_text() + "\n[method_params.cb]\ncb_powr = 0.5\n")
    code, out, err = cli("compare", str(campaign), "--db", str(tmp_path / "c.db"))
    assert code == 2 and f"{campaign}: method_params.cb.cb_powr:" in err and "(did you mean cb_power?)" in err, err


def test_a_refused_image_folder_writes_no_cache(cli, tmp_path):
    write_folder(tmp_path / "images", classes=("a", "b"), per_class=6)
    write_folder(tmp_path / "one", classes=("c",), per_class=1)
    (tmp_path / "one" / "c").rename(tmp_path / "images" / "c")
    cache = tmp_path / "cache"
    code, out, err = cli("train", "--dataset", "images", "--root", str(tmp_path / "images"), "--cache-dir", str(cache),
                         "-p", "epochs=1")
    assert code == 2 and "class 'c' (1 example(s) in all)" in err, err
    assert not cache.exists()
