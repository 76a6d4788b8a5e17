"""Racing the top few configurations of a search before picking one: SMAC's intensification and irace's races in
their simplest form, for a budget counted in trainings.

A search of B trainings keeps `RACE_SIZE * RACE_TRAININGS` of them back. When it has run the rest, its
`RACE_SIZE` best configurations (`contenders`: by the study's GP's posterior mean, or by their observed values) are
each trained `RACE_TRAININGS` more times, every contender on the same extra training seeds and splits (pair j of
each contender shares its seed and split, as a campaign's confirmation pairs do), and the contender with the best
mean over all its trainings, its search trial's included, is picked (`race_winner`). The extra trainings are what
a single trial lacks: a second look at the few configurations the pick is made among, on other splits, at the cost
of three trials fewer in the search. `robust-tune bench search` measures it (pick `race`); a campaign can run it
with the tools it has (a study's stored GP predictions, re-training runs on chosen pairs).
"""
from __future__ import annotations

from typing import Mapping, Sequence

RACE_SIZE = 3  # contenders
RACE_TRAININGS = 1  # extra trainings per contender


def race_cost(size: int = RACE_SIZE, trainings: int = RACE_TRAININGS) -> int:
    """The trainings a race takes from the search's budget."""
    return size * trainings


def contenders(scores: Mapping[int, float], size: int = RACE_SIZE) -> list[int]:
    """The `size` trials (by index) with the highest score (a posterior mean, or an observed value), best first, the
    earlier trial on ties."""
    return sorted(scores, key=lambda index: (-scores[index], index))[:size]


def race_winner(trainings: Mapping[int, Sequence[float | None]]) -> int:
    """The contender (by index, `trainings` in contender order, best first) with the highest mean over its
    trainings; one with a failed training (None) is out, since a configuration that failed once may fail again,
    unless every one is (then the first contender). The earlier contender wins a tie."""
    if not trainings:
        raise ValueError("a race needs at least one contender")
    whole = {index: [float(v) for v in values if v is not None] for index, values in trainings.items()
             if values and all(v is not None for v in values)}
    if not whole:
        return next(iter(trainings))
    order = list(trainings)
    return max(whole, key=lambda index: (sum(whole[index]) / len(whole[index]), -order.index(index)))
