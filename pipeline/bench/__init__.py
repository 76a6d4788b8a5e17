"""Benchmarks of the tool itself: step time, a study's wall time, search strategies, epoch prefixes, parallel trials,
start-up; the replay tables of real trials."""
