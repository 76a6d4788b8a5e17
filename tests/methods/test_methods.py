"""Methods composed of registry parts: names, refusals, every part trained from the CLI, reproducibility."""
import json
import re
import subprocess
import sys

import pytest

from pipeline.methods import parse_method
from pipeline.methods.declarations import FAMILIES, GENERATORS, PARTS
from pipeline.methods.parts import Part, Stage
from pipeline.params import HParam
from pipeline.report.study_tables import best_table
from pipeline.store import Store
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from helpers import EVERY_METHOD, FEWER_STEPS

LOSS = "pipeline.methods.losses:SmoothedLoss"


def test_todays_names_keep_their_meaning():
    assert parse_method("gils").parts == ("ls", "gils", "uniform")
    assert parse_method("hws").parts == ("erm", "hws")
    assert parse_method("hws+gils").name == "gils+hws"
    assert parse_method("ls+hws").parts == ("ls", "hws")
    assert parse_method("pgd+gils").generators == ("gils", "pgd")
    assert [p.name for p in parse_method("gils").params][-5:] == ["alpha", "T", "eta", "gamma", "perturb"]


def test_the_catalogue_refuses_a_part_that_breaks_a_rule_and_takes_a_shared_declaration():
    assert set(FAMILIES) == {"loss", "sampler", "mixer", "generator", "weights"}
    alpha = PARTS["ls"].params[0]
    mix_alpha = PARTS["mixup"].params[0]
    refused = {
        "part cb is declared twice": Part("cb", "weights", (), "again", "pipeline.methods.weights:NoWeights"),
        "parameter alpha is declared twice with different meanings": Part(
            "smooth", "loss", (HParam("alpha", "float", 0.2, "[0, 1)", "another alpha"),), "x", LOSS),
        "parameter epochs is declared twice": Part(
            "long", "weights", (HParam("epochs", "int", 9, "[1, 9]", "not the trainer's"),), "x", LOSS),
        "implies the unknown loss 'focal'": Part("focus", "mixer", (), "x", LOSS, implies_loss="focal"),
        "only a generator, has a stage": Part("chained", "weights", (), "x", LOSS, stage=Stage("attack", 1)),
        "must be lower case, without +": Part("a+b", "weights", (), "x", LOSS),
        "unknown family 'optimiser'": Part("adam", "optimiser", (), "x", LOSS),
    }
    for message, part in refused.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            PARTS.add(part)
        assert part.name not in PARTS or PARTS[part.name] is not part
    shared = PARTS.add(Part("smoothmix", "mixer", (mix_alpha, alpha), "x", "pipeline.methods.mixers:MixUpMixer"))
    try:
        assert PARTS["smoothmix"] is shared and "smoothmix" in FAMILIES["mixer"]
        assert parse_method("smoothmix+hws").parts == ("erm", "smoothmix", "hws")
    finally:
        PARTS.remove("smoothmix")
    assert "smoothmix" not in PARTS and "smoothmix" not in FAMILIES["mixer"]


def test_every_declaration_names_an_importable_constructor_and_attacks_set_their_own_parameters():
    defaults = [registry.default for registry in FAMILIES.values() if registry.default is not None]
    for part in [*PARTS.values(), *defaults]:
        assert callable(part.load()), part.name
    for part in GENERATORS.values():
        if part.stage.name == "attack":
            assert sorted(part.options["arguments"].values()) == sorted(p.name for p in part.params), part.name


def test_reading_the_declarations_and_parsing_every_method_import_no_torch():
    probe = ("import sys\n"
             "from pipeline.methods import parse_method\n"
             "from pipeline.methods.declarations import ALL_PARAMS, PARTS\n"
             "for name in [*PARTS, 'gils+pgd', 'hws+gils', 'mixup+ls+l2rw', 'gils+cb']:\n"
             "    parse_method(name).resolve({})\n"
             "print(sorted(m for m in ('torch', 'torchvision', 'torchattacks') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("method, message", [
    ("sgd", "unknown method 'sgd': no part 'sgd'"),
    ("gils+adam", "no part 'adam'"),
    ("mixup+cutmix", "one mixer at most"),
    ("cutout+pgd", "the papers never combine them"),
    ("pgd+fgsm", "one attack at most"),
    ("erm+ls", "one loss at most"),
    ("gils+gils", "names a part twice"),
    ("cb+groupdro", "one weights at most"),
])
def test_unknown_parts_and_senseless_combinations_are_one_line_and_exit_2(cli, method, message):
    code, out, err = cli("train", "--method", method)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and message in lines[0]


def test_an_attack_after_a_feature_ascent_is_refused(cli):
    code, _, err = cli("train", "--method", "gils+pgd", "--param", "perturb=feature")
    assert code == 2 and "needs perturb = input" in err


@pytest.mark.parametrize("method", EVERY_METHOD)
def test_every_part_trains_from_the_cli_and_the_same_seed_gives_identical_metrics(cli, method):
    fewer = [arg for part in method.split("+") if part in FEWER_STEPS for arg in ("--param", FEWER_STEPS[part])]
    args = ("train", "--dataset", "digits", "--method", method, "--param", "epochs=2", "--param", "batch_size=64",
            *fewer, "--seed", "3", "--format", "json")
    first, second = cli(*args), cli(*args)
    assert first[0] == 0, first[2]
    result = json.loads(first[1])
    assert result["settings"]["method"] == parse_method(method).name
    assert len(result["epoch_train_loss"]) == 2 and 0 <= result["val_accuracy"] <= 1
    assert json.loads(second[1]) == {**result, "train_seconds": json.loads(second[1])["train_seconds"]}


STUDY = """
name = "momentum"
[data]
name = "digits"
[method]
name = "mixup"
[params]
epochs = 1
momentum = { low = 0.5, high = 0.9 }
lr_head = { low = 0.01, high = 0.1, log = true }
[budget]
trials = 1
"""


def test_the_best_table_shows_searched_trainer_parameters(tmp_path):
    path = tmp_path / "momentum.toml"
    path.write_text(STUDY)
    db = str(tmp_path / "s.db")
    run_study(load_study(path), db, "cpu", log_file=tmp_path / "ax.log")
    table = best_table(Store(db, create=False))
    (row,) = table.rows
    (trial,) = Store(db, create=False).trials(Store(db, create=False).study("momentum").id)
    assert row[table.headers.index("momentum")] == f"{trial.parameters['momentum']:.4g}"
    assert 1 <= trial.distinct_per_batch <= 32 and "distinct_per_batch" not in trial.metrics  # beside its metrics
    assert table.records[0]["distinct_per_batch"] == trial.distinct_per_batch  # and in the report's JSON
    assert "lr_head" in table.headers and "epoch" in table.headers and "mix_alpha" in table.headers
    assert "beta" not in table.headers  # no study takes it
