"""`compare --plan` and `run --plan`: what a campaign or a study would train and about how long that takes here,
from a short timing probe (or what is stored), with nothing trained for real and nothing stored."""
import re

from helpers import digest, in_process, study_file

from pipeline.compare.decision import Design
from pipeline.compare.plan import pairs_may_need

CAMPAIGN = """
name = "plan"
objective = "val_balanced_accuracy"
methods = ["cb"]

[data]
name = "digits"
imbalance_class = "3"
imbalance_keep = 0.1

[params]
epochs = 2
lr_head = { low = 0.01, high = 0.2, log = true }

[budget]
trials = 3
initial = 2

[evaluate]
seeds = 4
max_seeds = 12
"""


def test_compare_plan_says_what_the_campaign_trains_and_how_long_and_stores_nothing(cli, tmp_path):
    """A new campaign's default design (a pilot of 3 searches per method, rounds of 2 up to 10, each search's pick
    re-trained on `seeds` pairs, then up to `max_seeds` as the pilot plans), counted as the campaign trains it;
    `--replicates 1`, one search each, planned in pairs as before."""
    path = tmp_path / "plan.toml"
    path.write_text(CAMPAIGN)
    db, log = tmp_path / "runs" / "c.db", tmp_path / "runs" / "ax.log"
    done = in_process(cli, "compare", str(path), "--plan", "--db", str(db), "--device", "cpu", "--log-file", str(log))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    flat = " ".join(out.split())
    assert "plan of campaign plan (a timing probe trained, nothing stored)" in out
    assert ("methods: erm, cb: 3 trials each x 3 searches, each search re-trained on 4 pairs (up to 12, as the first "
            "searches plan); more searches in rounds planned for power, up to 10") in flat
    assert "each method, ERM too: the pilot 3 x (3 trials + 4 runs), at most 10 x (3 trials + 12 runs)" in flat
    assert "train    " in out and "* the rare class: 3" in out  # the data as its trials load it
    assert "decides on (what 80% power may need after the pilot where runs score near 90% or 50%):" in flat
    assert re.search(r"balanced ±1 point \(359 test images\): about \d+ or \d+ searches of 12 pairs", flat), flat
    assert re.search(r"rare class ±5 points \(37 test images\): about \d+ or \d+ searches of 12 pairs", flat), flat
    # the pilot: 2 methods x 3 searches x (3 trials + 4 runs); later: the pilot's searches topped up to 12 pairs
    # (2 x 3 x 8 runs) and 7 more searches each of 3 trials and 12 runs (2 x 7 x 3 trials, 2 x 7 x 12 runs)
    assert "left to train: 18 trials, 24 re-training runs; later rounds up to 42 more trials and 216 more runs" in flat
    assert "expected time: about" in flat and "from a timing probe of each method" in flat
    assert "if every later round runs up to max_replicates searches and up to its max_seeds pairs" in flat
    assert "workers: 1 (--workers)" in flat  # the suite's ROBUST_TUNE_WORKERS=1
    assert all(len(line) <= 80 for line in out.splitlines()), out
    one = in_process(cli, "compare", str(path), "--plan", "--replicates", "1", "--db", str(db), "--device", "cpu",
                     "--log-file", str(log))
    flat = " ".join(one.stdout.split())
    assert "methods: erm, cb: 3 trials each, then 4 pairs each, more in rounds planned for power up to 12" in flat
    assert "decides on (the pairs 80% power may need where runs score near 90% or 50%):" in flat
    assert "balanced ±1 point (359 test images): about" in flat and "past max_seeds = 12: it may end undecided" in flat
    assert "left to train: 6 trials, 8 re-training runs; later rounds up to 16 more runs" in flat
    assert "each method, ERM too" not in flat and "searches" not in flat
    assert not (tmp_path / "runs").exists()  # no database, no log: nothing was stored


def test_run_plan_times_a_trial_by_a_probe_then_by_the_stored_ones_and_changes_nothing(cli, tmp_path):
    path = study_file(tmp_path, trials=2)
    db = tmp_path / "s.db"
    first = in_process(cli, "run", str(path), "--plan", "--db", str(db), "--device", "cpu")
    assert first.returncode == 0 and not db.exists(), first.stderr
    flat = " ".join(first.stdout.split())
    assert "plan of study tiny" in flat and "to train: 2 trials (2 in all, none stored yet)" in flat
    assert "at the middle of its ranges, timed here: 1 epochs of" in flat and "expected time: about 0:" in flat
    assert in_process(cli, "run", str(path), "--db", str(db), "--device", "cpu", "--trials", "1",
                      "--log-file", str(tmp_path / "ax.log")).returncode == 0
    before = digest(db)
    again = in_process(cli, "run", str(path), "--plan", "--db", str(db), "--device", "cpu", "--trials", "3")
    flat = " ".join(again.stdout.split())
    assert "to train: 2 trials (3 in all, 1 stored)" in flat and "(from its 1 stored trial)" in flat, flat
    assert digest(db) == before


def test_the_pairs_a_smallest_effect_may_need_grow_as_the_test_images_it_rests_on_shrink_and_accuracy_nears_half():
    design = Design(("test_balanced_accuracy", "smallest_class_accuracy"),
                    {"test_balanced_accuracy": 0.01, "smallest_class_accuracy": 0.05}, 5, 5, 30)
    many, few = (pairs_may_need(design, [n] * 10, n, compared=3) for n in (360, 36))
    assert [need.images for need in many] == [3600, 360] and [need.images for need in few] == [360, 36]
    for need in many + few:
        high, half = need.pairs  # near 90% accuracy, near 50%: binomial noise is largest at half
        assert high is not None and (half is None or high < half), need
    assert all(f.pairs[0] > m.pairs[0] for f, m in zip(few, many)), (few, many)
    assert 5 <= many[1].pairs[1] <= 30 < few[1].pairs[1]  # the rare class on 36 images: past max_seeds


def test_on_the_searches_axis_the_plan_gives_the_pilots_pairs_per_search_and_the_searches_after_it():
    """With no search luck beyond the pairs' noise the pilot plans the most pairs per search (decision.planned_pairs)
    and the searches of that many pairs after it (decision.searches_needed): at least the first look after the
    pilot, more as the test images shrink and accuracy nears half."""
    design = Design(("test_balanced_accuracy", "smallest_class_accuracy"),
                    {"test_balanced_accuracy": 0.01, "smallest_class_accuracy": 0.05}, 5, 5, 8, searches=3,
                    searches_per_round=2, max_searches=10, trim=0.3)
    many, few = (pairs_may_need(design, [n] * 10, n, compared=3) for n in (360, 36))
    for need in many + few:
        assert need.pairs == (8, 8) and need.searches is not None, need
        high, half = need.searches
        assert high is not None and 5 <= high and (half is None or high <= half), need
    assert all(f.searches[1] is None or f.searches[1] > m.searches[1] for f, m in zip(few, many)), (few, many)
