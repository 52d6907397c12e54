"""Progress bars that show only where someone watches: :func:`progress_bar`."""

from __future__ import annotations

import sys
from typing import Any, TextIO


def progress_bar(total: int, *, desc: str, unit: str = "it", stream: TextIO | None = None, **kwargs: Any):
    """A ``tqdm`` bar on ``stream`` (default ``sys.stderr``), disabled unless that stream
    is a terminal.

    A bar redraws itself with carriage returns; written to a log file (a CI log, ``2> log``,
    a job scheduler's capture) it leaves hundreds of partial lines. Disabled, it costs
    nothing and prints nothing; ``update()`` and ``close()`` still work.

    Args:
        total: the number of steps.
        desc, unit: tqdm's label and unit.
        stream: where the bar goes; ``None``: ``sys.stderr`` at the time of the call.
        **kwargs: more of tqdm's options.
    """
    from tqdm import tqdm

    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    interactive = bool(isatty()) if callable(isatty) else False
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(total=total, desc=desc, unit=unit, file=stream, disable=not interactive, **kwargs)
