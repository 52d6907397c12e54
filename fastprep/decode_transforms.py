"""Compatibility module: the decode transforms live in :mod:`fastprep.transforms`.

The names this module has always offered still import from here; new code imports them
from :mod:`fastprep.transforms` (``scaled_size`` is :func:`fastprep.io.scaled_size`).
"""

from .io import scaled_size  # noqa: F401  (public before the move, though not in __all__)
from .transforms import (  # noqa: F401  (DCT_SCALES, plan_scaled_window: as scaled_size)
    DCT_SCALES,
    DecodeCenterCrop,
    DecodePlan,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    ResizeStep,
    plan_scaled_window,
)

__all__ = [
    "DecodePlan",
    "ResizeStep",
    "DecodeCenterCrop",
    "DecodeRandomCrop",
    "DecodeRandomResizedCrop",
    "DecodeResize",
    "DecodeResizeCenterCrop",
]
