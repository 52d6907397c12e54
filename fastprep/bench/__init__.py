"""``python -m fastprep.bench``: input-pipeline benchmark and bottleneck finder."""
