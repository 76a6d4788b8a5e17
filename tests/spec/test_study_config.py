"""Study files: defaults from the papers, overrides, and one-line errors naming file and field."""

import pytest

from pipeline.errors import UserError
from pipeline.params import Choice, Range
from pipeline.spec.study_config import load_study
from helpers import CAMPAIGN_FILES, DATA, STUDIES, STUDY_FILES, is_campaign, rows, stored_before_rare_kept

MINIMAL = 'name = "s"\n[method]\nname = "gils"\n'


def write(tmp_path, text: str):
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_paper_search_spaces_are_the_defaults(tmp_path):
    gils = load_study(write(tmp_path, MINIMAL))
    assert gils.search == {"epochs": Range(21, 60), "alpha": Range(0.0, 0.5), "T": Range(1, 15),
                           "eta": Range(1.5, 3.0)}
    assert gils.fixed["gamma"] == 1e-3 and gils.fixed["lr_head"] == 1e-2 and gils.fixed["lr_step"] == 20
    assert gils.budget.trials == 20 and gils.objective == "val_accuracy" and not gils.selected_on_test
    hws = load_study(write(tmp_path, 'name = "h"\n[method]\nname = "hws"\n'))
    assert hws.search["beta"] == Range(0.1, 1000.0, log=True)
    assert hws.search["importance_sampling"] == Choice((False, True))
    assert set(load_study(write(tmp_path, 'name = "l"\n[method]\nname = "ls"\n')).search) == {"epochs", "alpha"}
    assert set(load_study(write(tmp_path, 'name = "e"\n[method]\nname = "erm"\n')).search) == {"epochs"}


def test_a_study_overrides_ranges_fixes_values_and_sets_everything_else(tmp_path):
    study = load_study(write(tmp_path, 'objective = "test_accuracy"\n' + MINIMAL + """
[data]
imbalance_class = 3
imbalance_keep = 0.05
[params]
T = { low = 1, high = 5 }
epochs = 3
perturb = "feature"
"""))
    assert study.search["T"] == Range(1, 5) and "epochs" not in study.search
    assert study.fixed["epochs"] == 3 and study.fixed["perturb"] == "feature"
    assert study.data.imbalance_class == "3" and study.selected_on_test


def test_overrides_from_the_command_line(tmp_path):
    study = load_study(write(tmp_path, MINIMAL), ["budget.trials=3", "params.epochs=2", "seed=7",
                                                  'params.alpha={ low = 0.1, high = 0.2 }'])
    assert study.budget.trials == 3 and study.fixed["epochs"] == 2 and study.seed == 7
    assert study.search["alpha"] == Range(0.1, 0.2)


def test_the_fingerprint_ignores_the_budget_only(tmp_path):
    base = load_study(write(tmp_path, MINIMAL))
    assert load_study(write(tmp_path, MINIMAL), ["budget.trials=3"]).fingerprint() == base.fingerprint()
    assert load_study(write(tmp_path, MINIMAL), ["params.epochs=3"]).fingerprint() != base.fingerprint()


@pytest.mark.parametrize("text, message", [
    ('[method]\nname = "gils"\n', "name: is required"),
    ('name = "s"\n', "method: is required"),
    ('name = "s"\n[method]\nname = "sgd"\n', "method.name: unknown method 'sgd'"),
    (MINIMAL + "[params]\nalpha = { low = 0.4, high = 0.1 }\n", "params.alpha: low 0.4 must be below high 0.1"),
    ('name = "s"\n[method]\nname = "hws"\n[params]\nbeta = { low = 0.0, high = 10.0, log = true }\n',
     "params.beta: a log-scale range must start above 0"),
    (MINIMAL + "[params]\nalpha = { low = 0.0, high = 1.5 }\n",
     "params.alpha: high: parameter alpha must be in [0, 1)"),
    (MINIMAL + '[params]\nT = "five"\n', "params.T: value: parameter T must be an integer"),
    (MINIMAL + "[params]\nbeta = 3\n", "params.beta: unknown parameter for method gils"),
    (MINIMAL + "[params]\nalpha = { low = 0.0 }\n", "params.alpha: expected a value"),
    (MINIMAL + '[budget]\ntrials = "many"\n', "budget.trials: must be an integer"),
    (MINIMAL + "[budget]\ntrials = 0\n", "budget.trials: must be between 1 and 10000"),
    (MINIMAL + '[data]\nval_fraction = "x"\n', "data.val_fraction: must be a number"),
    (MINIMAL + '[data]\nfolder = "x"\n', "data.folder: unknown field"),
    (MINIMAL + '[model]\nbackbone = "vgg"\n', "model.backbone: unknown backbone 'vgg'"),
    ('objective = "loss"\n' + MINIMAL, "objective: must be one of"),
    (MINIMAL + 'objective = "loss"\n', "method.objective: unknown field"),
    ('name = "a b"\n[method]\nname = "gils"\n', "name: must be letters"),
    ('name = "s"\nmethod = "gils"\n', "method: must be a table"),
    ('name = "s\n', "not valid TOML"),
    ("colour = 1\n" + MINIMAL, "colour: unknown field"),
])
def test_malformed_study_files_name_the_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as error:
        load_study(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)


def test_a_missing_study_file(tmp_path):
    with pytest.raises(UserError, match="study file not found"):
        load_study(tmp_path / "nope.toml")


@pytest.mark.parametrize("text, message", [
    (MINIMAL + "[params]\nalpha = { low = 0.4, high = 0.1 }\n", "params.alpha: low 0.4 must be below high 0.1"),
    ('name = "s"\n[method]\nname = "dro"\n', "method.name: unknown method 'dro'"),
    ('name = "s"\n[data]\nname = "images"\nmanifest = "no/such/split"\n[method]\nname = "gils"\n',
     "manifest folder not found: no/such/split"),
])
def test_run_refuses_a_malformed_study_or_missing_data_with_exit_code_2(tmp_path, cli, text, message):
    db = tmp_path / "db.sqlite"
    code, out, err = cli("run", str(write(tmp_path, text)), "--db", str(db))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in err
    assert not db.exists()  # nothing was started


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.stem)
def test_every_shipped_study_file_is_valid(path):
    study = load_study(path)
    assert study.name == path.stem and not study.selected_on_test


@pytest.mark.parametrize("path", CAMPAIGN_FILES, ids=lambda p: p.stem)
def test_every_shipped_campaign_file_is_valid(path):
    from pipeline.spec.campaign_config import load_campaign

    campaign = load_campaign(path)
    assert campaign.name == path.stem and campaign.methods[0] == "erm"
    assert len(campaign.methods) >= {"demo-campaign": 2, "digits-tasks": 4}.get(path.stem, 5)  # the demo: hws and ERM
    assert not any(study.selected_on_test for study in campaign.all_studies())


def test_the_paper_set_ups_use_the_papers_settings():
    paper = sorted(p for p in (STUDIES / "paper").glob("*.toml")
                   if p.stem != "hws-mnist-wrn16-1" and not is_campaign(p))
    # GI-LS and hws x MT-Defect, MT, Wood, Carpet, and Tables 5-7's 12 methods x MT-Defect, MT; x ResNet18/34/50
    assert len(paper) == 2 * 4 * 3 + 12 * 2 * 3
    for path in paper:
        study = load_study(path)
        assert ((study.data.name, study.data.image_size, study.weights, study.budget.trials)
                == ("images", 224, "imagenet", 20))
        assert study.search["epochs"] == Range(21, 60) and study.fixed["lr_step"] == 20
        if study.method.startswith("gils"):
            assert study.search["T"] == Range(1, 15) and study.fixed["gamma"] == 1e-3
    baseline = load_study(STUDIES / "paper" / "gils-mt-resnet34.toml", ["name=erm-mt-resnet34", "method.name=erm"])
    assert baseline.method == "erm" and set(baseline.search) == {"epochs"}


def test_the_hardness_papers_mnist_set_up_uses_its_settings():
    """Section 4.1 and appendix 8.1: 1% of digit 3 in training only, WRN-16-1, SGD at 0.01 without momentum,
    weight decay, augmentation or importance sampling, beta over [0.1, 100] on a log scale, ranked on validation."""
    study = load_study(STUDIES / "paper" / "hws-mnist-wrn16-1.toml")
    data = study.data
    assert (data.name, data.imbalance_class, data.imbalance_keep, data.imbalance_in) == ("idx", "3", 0.01, "train")
    assert data.val_fraction > 0 and not data.augment_flip and data.augment_crop_padding == 0
    assert (study.backbone, study.weights, study.method, study.objective) == ("wrn16_1", "none", "hws", "val_accuracy")
    assert study.search["beta"] == Range(0.1, 100, log=True)
    fixed = study.fixed
    assert (fixed["lr_head"], fixed["lr_backbone"], fixed["momentum"], fixed["weight_decay"]) == (0.01, 0.01, 0, 0)
    assert fixed["importance_sampling"] is False and fixed["lr_decay"] == 1


def test_a_data_field_added_since_0_5_0_leaves_stored_fingerprints_as_they_were():
    """Campaigns are matched to the stored one by fingerprint: data.path at its default must not change it, nor
    resplit where off (as every campaign stored before 0.7.0 was), nor rare_kept at "first" (what a campaign
    stored before it kept, and what its file then settles to); resplit on or rare_kept drawn makes it another."""
    import dataclasses

    from pipeline.spec.campaign_config import load_campaign

    campaign = load_campaign(STUDIES / "digits-campaign.toml")  # its file asks for resplit
    one_split = dataclasses.replace(campaign, evaluation=dataclasses.replace(campaign.evaluation, resplit=False))
    assert stored_before_rare_kept(one_split).fingerprint() == "26d0f3b898a9f987"  # as 0.5.0 stored it
    assert one_split.fingerprint() != "26d0f3b898a9f987"  # new: the rare examples drawn
    assert stored_before_rare_kept(campaign).fingerprint() != stored_before_rare_kept(one_split).fingerprint()
    quickstart = load_study(STUDIES / "quickstart.toml")
    assert quickstart.settle_rare_kept("first").settle_widen(False).fingerprint() == "664d5edae8b82a64"
    assert quickstart.fingerprint() != "664d5edae8b82a64" and quickstart.data.rare_kept == "drawn"
    medmnist = load_study(STUDIES / "quickstart.toml", ["data.name=medmnist", "data.path=derma.npz"])
    assert medmnist.identity()["data"]["path"] == "derma.npz"


def test_rare_kept_is_drawn_for_a_new_study_and_as_stored_for_a_stored_one_unless_its_file_says(tmp_path):
    """data.rare_kept: a file that does not say draws the rare examples kept when the study is new, and keeps the
    stored study's choice (the first ones, for a study stored before the choice existed, with its fingerprint); a
    file that says keeps its word; another value is refused naming the field."""
    from pipeline.spec.study_config import StudyConfig

    new = load_study(write(tmp_path, MINIMAL + '[data]\nimbalance_class = "3"\n'))
    assert new.data.rare_kept == "drawn" and not new.rare_kept_given and new.settle_rare_kept(None) == new
    stored = new.to_dict()
    del stored["data"]["rare_kept"]  # as a version before it stored the study
    old = StudyConfig.from_dict(stored)
    assert old.data.rare_kept == "first" and "rare_kept" not in old.identity()["data"]
    assert new.differences(old) == ["data.rare_kept"]  # unsettled, the file would be another study
    settled = new.settle_rare_kept(old.data.rare_kept)
    assert settled.data.rare_kept == "first" and not old.differences(settled)
    assert settled.fingerprint() == old.fingerprint()
    said = load_study(write(tmp_path, MINIMAL + '[data]\nimbalance_class = "3"\nrare_kept = "drawn"\n'))
    assert said.rare_kept_given and said.settle_rare_kept("first").data.rare_kept == "drawn"
    with pytest.raises(UserError, match="data.rare_kept: must be one of drawn, first, got 'last'"):
        load_study(write(tmp_path, MINIMAL + '[data]\nrare_kept = "last"\n'))


def test_the_0_6_0_campaign_file_settles_to_its_stored_campaign_keeping_the_first_rare_examples(tmp_path):
    """tests/fixtures/v0.6.0-campaign.db: its file, which names no rare_kept, is the stored campaign (its fingerprint)
    with every study keeping the first rare examples; in a new database the same file draws them."""
    import shutil

    from pipeline.spec.campaign_config import load_campaign
    from pipeline.store import Store

    db = tmp_path / "old.db"
    shutil.copy(DATA / "v0.6.0-campaign.db", db)
    stored = Store(str(db), create=False).require_campaign("old-trio")
    campaign = load_campaign(DATA / "old-trio.toml")
    settled = (campaign.settle_resplit(stored.evaluation.resplit).settle_rare_kept(stored.config)
               .settle_widen(stored.config).settle_defaults(stored.config))
    assert {s.data.rare_kept for s in settled.all_studies()} == {"first"}
    # its small CNN from scratch kept the feature extractor's earlier default rate; a new campaign takes the head's
    assert {s.fixed["lr_backbone"] for s in settled.all_studies()} == {1e-3}
    assert {s.fixed["lr_backbone"] for s in campaign.settle_defaults(None).all_studies()} == {1e-2}
    assert {s.widen for s in settled.all_studies()} == {False}  # stored before widening: its ranges stay
    assert [(settled.fingerprint(),)] == rows(db, "select fingerprint from rt_campaigns")
    assert {s.data.rare_kept for s in campaign.settle_rare_kept(None).all_studies()} == {"drawn"}


def test_table5_is_the_paper_set_ups_of_its_methods_over_four_data_sets_and_three_networks():
    from pipeline.spec.campaign_config import load_campaign

    campaign = load_campaign(STUDIES / "paper" / "table5.toml")
    assert campaign.methods == ("erm", "gils", "cutmix", "cutout", "mixup") and len(campaign.tasks) == 12
    assert {(s.data.manifest, s.backbone) for s in campaign.all_studies()} == {
        (f"data/splits/{d}", f"resnet{n}") for d in ("mt-defect", "mt", "wood", "carpet") for n in (18, 34, 50)}
    for study in campaign.all_studies():
        assert (study.data.image_size, study.weights, study.budget.trials) == (224, "imagenet", 20)
        assert study.search["epochs"] == Range(21, 60) and study.fixed["lr_step"] == 20
        per_file = load_study(STUDIES / "paper" / f"{study.method}-mt-resnet18.toml")
        assert study.search == per_file.search and study.fixed == per_file.fixed  # the per-study files' spaces
