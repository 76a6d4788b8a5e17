"""Comparing: re-training over seeds, campaigns, the verdict, and every statistic (one place for paired tests)."""
