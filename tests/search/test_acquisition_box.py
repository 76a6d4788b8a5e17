"""The GP options that keep the acquisition off the bounds: `trust` (a box around the best trial) and `margin` (5% of
each range inside the bounds the best trial has not reached)."""
from __future__ import annotations

import pytest

from pipeline.library_logs import quiet_libraries

quiet_libraries("/dev/null")

from pipeline.search.ax import MARGIN, TRUST_SIDE, MarginAcquisition, TrustRegionAcquisition  # noqa: E402


def test_the_trust_region_is_a_box_of_fixed_side_around_the_best_trial_clipped_to_the_space():
    box = TrustRegionAcquisition.box(object.__new__(TrustRegionAcquisition), [0.5, 0.1, 1.0])
    half = TRUST_SIDE / 2
    assert box == [pytest.approx((0.5 - half, 0.5 + half)), (0.0, pytest.approx(0.1 + half)),
                   (pytest.approx(1.0 - half), 1.0)]


def test_the_margin_opens_only_the_ends_the_best_trial_has_come_to():
    box = MarginAcquisition.box(object.__new__(MarginAcquisition), [0.5, MARGIN, 0.99])
    assert box == [(MARGIN, 1 - MARGIN), (0.0, 1 - MARGIN), (MARGIN, 1.0)]


def proposal(strategy: str, observations: list[tuple[float, float]]) -> float:
    """The GP step's next x in [0, 1] after one Sobol trial (y = x) and `observations` (x, y), y maximised."""
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from pipeline.search.ax import generation_strategy

    client = Client(random_seed=0)
    client.configure_experiment(parameters=[RangeParameterConfig(name="x", bounds=(0.0, 1.0), parameter_type="float")])
    client.configure_optimization(objective="y")
    client.set_generation_strategy(generation_strategy(1, 0, strategy))
    ((index, first),) = client.get_next_trials(max_trials=1).items()  # the one Sobol trial, on the same line
    client.complete_trial(trial_index=index, raw_data={"y": float(first["x"])})
    for x, y in observations:
        index = client.attach_trial(parameters={"x": x})
        client.complete_trial(trial_index=index, raw_data={"y": y})
    (parameters,) = client.get_next_trials(max_trials=1).values()
    return float(parameters["x"])


def test_the_margin_keeps_the_gp_s_proposal_off_a_bound_the_best_trial_has_not_reached():
    """A value rising toward x = 1, its best trial at 0.9: the plain GP proposes on the bound, the margin 5% inside."""
    rising = [(x, x) for x in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert proposal("gp", rising) > 1 - MARGIN
    assert proposal("gp-margin", rising) == pytest.approx(1 - MARGIN, abs=1e-6)


def test_the_trust_region_keeps_the_gp_s_proposal_around_the_best_trial(monkeypatch):
    """A value rising toward x = 1, its best trial at 0.6: the plain GP proposes near 0.8; a trust region of side 0.2
    keeps the proposal within 0.1 of 0.6."""
    from pipeline.search import ax

    rising = [(x, x) for x in (0.1, 0.3, 0.5, 0.6)]
    assert proposal("gp", rising) > 0.75
    monkeypatch.setattr(ax, "TRUST_SIDE", 0.2)
    assert 0.5 - 1e-6 <= proposal("gp-trust", rising) <= 0.7 + 1e-6


def test_a_strategy_with_a_boxed_acquisition_is_stored_and_read_back_by_ax():
    """Ax's storage writes the strategy's acquisition class by name and reads it back (a study stores its strategy)."""
    from ax.storage.json_store.decoder import object_from_json
    from ax.storage.json_store.encoder import object_to_json

    from pipeline.search.ax import generation_strategy

    for strategy, kind in (("gp-trust", TrustRegionAcquisition), ("gp-margin", MarginAcquisition)):
        stored = object_from_json(object_to_json(generation_strategy(5, 0, strategy)))
        assert stored._nodes[-1].generator_specs[0].generator_kwargs["acquisition_class"] is kind
