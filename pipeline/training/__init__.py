"""Training: the backbones and head, the metrics, the one trainer every trial and run shares, saved models."""
