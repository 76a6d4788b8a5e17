"""Hyper-parameter declarations: coercion, validation and one-line errors."""
import pytest

from pipeline.errors import UserError
from pipeline.methods import parse_method
from pipeline.params import Choice, Interval, Range, parse_assignment


def test_defaults_are_filled_and_values_coerced():
    params = parse_method("gils").resolve({"alpha": "0.3", "T": "5", "eta": 2, "perturb": "feature"})
    assert params["alpha"] == 0.3 and params["T"] == 5 and isinstance(params["T"], int)
    assert params["gamma"] == 1e-3 and params["epochs"] == 30 and params["lr_head"] == 1e-2
    assert parse_method("hws").resolve({"importance_sampling": "true"})["importance_sampling"] is True
    assert parse_method("gils").resolve({"T": 7.0})["T"] == 7  # Ax may hand back an int as a float


@pytest.mark.parametrize("given, message", [
    ({"alpha": 1.0}, "alpha must be in [0, 1)"),
    ({"alpha": -0.1}, "alpha must be in [0, 1)"),
    ({"T": -1}, "T must be in [0, 100]"),
    ({"T": 2.5}, "T must be an integer"),
    ({"eta": 0}, "eta must be in (0, inf)"),
    ({"eta": "fast"}, "eta must be a number"),
    ({"perturb": "pixels"}, "perturb must be one of input, feature"),
    ({"alpah": 0.1}, "unknown parameter 'alpah' for method gils"),
    ({"epochs": 0}, "epochs must be in [1, 1000]"),
])
def test_bad_values_name_the_parameter(given, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_method("gils").resolve(given)


def test_methods_compose_a_generator_with_a_sampler():
    m = parse_method("gils+hws")
    assert (m.loss, m.generators, m.sampler) == ("ls", ("gils",), "hws")
    assert {"alpha", "T", "beta", "importance_sampling", "epochs"} <= {p.name for p in m.params}
    assert (parse_method("hws").loss, parse_method("hws").sampler) == ("erm", "hws")
    with pytest.raises(UserError, match="unknown method 'sgd': no part 'sgd'"):
        parse_method("sgd")
    with pytest.raises(UserError, match="unknown parameter 'beta'"):
        parse_method("gils").resolve({"beta": 1})


@pytest.mark.parametrize("text", ["alpha", "alpha=", "=0.3", ""])
def test_malformed_assignment(text):
    with pytest.raises(UserError, match="malformed --param"):
        parse_assignment(text)


def test_interval_bounds():
    half_open = Interval.parse("[0, 1)")
    assert 0 in half_open and 0.999 in half_open and 1 not in half_open
    assert 0 not in Interval.parse("(0, inf)") and 1e9 in Interval.parse("(0, inf)")
    assert str(half_open) == "[0, 1)"


def test_defaults_and_search_ranges_are_the_papers():
    """The papers' settings (DESIGN section 2): GI-LS searches alpha in [0, 0.5], T in [1, 15], eta in [1.5, 3]
    and epochs in [21, 60] with gamma fixed at 1e-3, and attacks at 8/255; hardness-weighted sampling searches
    beta in [0.1, 1000] on a log scale and importance sampling on or off, its formula drawing i.i.d.; Group DRO
    at DomainBed's 0.01; class-balanced weights at the inverse frequency; Learning to Reweight with 10 clean
    examples per class (its CIFAR setting)."""
    declared = {p.name: p for method in ("gils+hws", "pgd", "fgsm", "cb", "groupdro", "l2rw")
                for p in parse_method(method).params}
    ranges = {name: declared[name].search for name in ("alpha", "T", "eta", "epochs", "beta")}
    assert ranges == {"alpha": Range(0.0, 0.5), "T": Range(1, 15), "eta": Range(1.5, 3.0), "epochs": Range(21, 60),
                      "beta": Range(0.1, 1000.0, log=True)}
    assert declared["gamma"].default == 1e-3 and declared["gamma"].search is None
    assert declared["importance_sampling"].search == Choice((False, True))
    defaults = {name: declared[name].default for name in ("importance_sampling", "hws_replacement", "pgd_eps",
                                                           "fgsm_eps", "groupdro_eta", "cb_power",
                                                           "l2rw_clean_per_class")}
    assert defaults == {"importance_sampling": False, "hws_replacement": True, "pgd_eps": 8 / 255, "fgsm_eps": 8 / 255,
                        "groupdro_eta": 0.01, "cb_power": 1.0, "l2rw_clean_per_class": 10}
