"""A campaign's searches and unit as its file and the stored campaign decide them (CampaignConfig.settle_design): a
new campaign re-searches by default (a pilot, then rounds of searches) on trimmed units; `replicates` alone fixes the
searches; a campaign stored before the design existed keeps its fixed searches and plain means."""
import pytest

from pipeline.errors import UserError
from pipeline.spec.campaign_config import NEW_DESIGN, NEW_PICK, TRIM, parse_campaign

BASE = {"name": "c", "methods": ["cb"], "params": {"epochs": 1, "lr_head": {"low": 0.01, "high": 0.2}}}


def settled(raw: dict, stored: dict | None = None, replicates: int | None = None):
    campaign = parse_campaign({**BASE, **raw}, "c.toml", replicates).settle_design(stored)
    return campaign.settle_max_seeds(None if stored is None else stored["evaluation"].get("max_seeds"))


def test_a_new_campaign_re_searches_by_default_on_trimmed_units():
    campaign = settled({})
    assert (campaign.replicates, campaign.replicates_per_round, campaign.max_replicates) == (
        NEW_DESIGN["replicates"], NEW_DESIGN["replicates_per_round"], NEW_DESIGN["max_replicates"])
    assert campaign.evaluation.trim == TRIM and campaign.evaluation.max_seeds == NEW_DESIGN["max_seeds"]
    assert len(campaign.all_studies()) == 2 * NEW_DESIGN["max_replicates"]  # every search it may run


def test_replicates_alone_fixes_the_searches_and_rounds_add_pairs():
    one = settled({"replicates": 1})
    assert (one.replicates, one.max_replicates, one.evaluation.max_seeds) == (1, 1, 30)
    assert settled({}, replicates=4).max_replicates == 4  # --replicates as the file's
    grown = settled({"replicates": 2, "max_replicates": 6})
    assert (grown.replicates, grown.max_replicates) == (2, 6)
    assert settled({"max_replicates": 2}).replicates == 2  # a cap under the default pilot's 3


def test_a_campaign_stored_before_the_design_keeps_its_fixed_searches_and_plain_means():
    stored = {"replicates": 3, "evaluation": {"seeds": 5, "max_seeds": 30, "resplit": True}}
    campaign = settled({}, stored)
    assert (campaign.replicates, campaign.max_replicates, campaign.evaluation.trim) == (3, 3, 0.0)
    assert campaign.evaluation.max_seeds == 30
    new = {"replicates": 3, "max_replicates": 10, "replicates_per_round": 2,
           "evaluation": {"seeds": 5, "max_seeds": 10, "trim": 0.2}}
    again = settled({}, new)
    assert (again.replicates, again.max_replicates, again.evaluation.trim) == (3, 10, 0.2)


@pytest.mark.parametrize("raw, problem", [
    ({"replicates": 4, "max_replicates": 3}, "max_replicates: must be at least replicates (4)"),
    ({"max_replicates": 1}, "max_replicates: must be between 2 and 50"),
    ({"evaluate": {"trim": 0.5}}, "evaluate.trim: must be a share between 0 and 0.4"),
    ({"evaluate": {"trimm": 0.2}}, "did you mean trim"),
])
def test_bad_design_fields_are_one_line_naming_the_field(raw, problem):
    with pytest.raises(UserError) as error:
        parse_campaign({**BASE, **raw}, "c.toml")
    assert problem in str(error.value)


def test_a_new_campaign_re_trains_the_model_pick_and_a_stored_one_keeps_its_pick():
    assert parse_campaign(BASE, "c.toml").settle_pick(None).evaluation.pick == NEW_PICK == "model"
    stored = {"evaluation": {"pick": "observed"}}
    assert parse_campaign(BASE, "c.toml").settle_pick(stored).evaluation.pick == "observed"
    assert parse_campaign(BASE, "c.toml").settle_pick({"evaluation": {}}).evaluation.pick == "observed"  # unrecorded
    said = parse_campaign({**BASE, "evaluate": {"pick": "observed"}}, "c.toml")
    assert said.settle_pick(None).evaluation.pick == "observed"


def test_a_campaign_re_trains_the_best_observed_where_the_model_made_no_pick():
    import datetime as dt

    from pipeline.store import StudyRecord, TrialRecord, TrialStatus, campaign_pick

    config = parse_campaign(BASE, "c.toml").study("cb", 0)
    study = StudyRecord(1, config.name, "f", config, dt.datetime.now())
    trials = [TrialRecord(i, i, TrialStatus.COMPLETED, {"lr_head": 0.01 * (i + 1)}, 0, {config.objective: v},
                          None, 1.0, 0.1, None) for i, v in enumerate((0.5, 0.7))]  # no prediction stored
    assert campaign_pick(study, trials, "model").trial_index == 1
