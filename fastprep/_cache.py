"""Where fastprep keeps what it caches between runs: :func:`cache_root`."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$FASTPREP_CACHE``, or ``~/.cache/fastprep``."""
    env = os.environ.get("FASTPREP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fastprep"
