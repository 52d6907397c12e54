"""The one ISA switch of the compiled kernels.

The C span kernels of :mod:`fastprep._kernels._color` (baseline, AVX2, AVX-512 variants) and
the C++ kernels (csrc/isa.h: ``resize_aa``, the batch op's conversions, the pixel kernels;
baseline and AVX2 + FMA) dispatch at run time. This module chooses their variants: the best the CPU supports, capped by
``FASTPREP_ISA`` (``auto``, ``baseline``, ``avx2``, ``avx512``; read once, when this module
is first imported, which importing :mod:`fastprep` does) or by :func:`set_isa`. Every
variant gives the same bits, so the switch exists for tests and benchmarks (docs/kernels.md).

Numba's target is not switched here: Numba compiles for the CPU it runs on, and
``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` override that (docs/kernels.md).
"""

from __future__ import annotations

import os
import warnings

from .. import _C
from . import _color

ISA_LEVELS = ("baseline", "avx2", "avx512")
"""Names of the compiled variants, lowest first (``FASTPREP_ISA`` takes one, or ``auto``)."""

# The C++ kernels' highest variant (csrc/isa.h): 0 baseline, 1 AVX2 + FMA.
_NATIVE_MAX_LEVEL = 1

_active = [ISA_LEVELS[0]]


def supported_isas() -> tuple[str, ...]:
    """The variants this CPU can run, lowest first."""
    return ISA_LEVELS[: _color.cpu_level() + 1]


def set_isa(name: str) -> str:
    """Use variant ``name`` (``auto``: the best this CPU supports) for every compiled kernel
    that has variants; return the variant in use, which is lower than ``name`` when the CPU
    lacks it. Not thread-safe: call it before kernels run.

    Raises:
        ValueError: ``name`` is not ``auto`` or one of :data:`ISA_LEVELS`.
    """
    if name == "auto":
        level = len(ISA_LEVELS) - 1
    elif name in ISA_LEVELS:
        level = ISA_LEVELS.index(name)
    else:
        raise ValueError(f"FASTPREP_ISA must be one of auto, {', '.join(ISA_LEVELS)}; got {name!r}")
    _active[0] = ISA_LEVELS[_color.select_level(level)]
    _C.native_isa(min(level, _NATIVE_MAX_LEVEL))
    return _active[0]


def active_isa() -> str:
    """The variant the colour kernels use now: ``baseline``, ``avx2`` or ``avx512``."""
    return _active[0]


def _apply_environment() -> None:
    requested = os.environ.get("FASTPREP_ISA", "auto").strip().lower() or "auto"
    try:
        set_isa(requested)
    except ValueError as exc:
        # an import must not fail on a typo in an environment variable
        warnings.warn(f"{exc}; using auto", RuntimeWarning, stacklevel=2)
        set_isa("auto")


_apply_environment()
