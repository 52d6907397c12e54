"""Type stubs of ``fastprep._kernels._color``, the Cython colour kernels (_color.pyx).

Arrays are numpy arrays (or other buffers) of uint8 or float32 input and float32 output, in
the shapes each function names; the last axis must be contiguous.
"""

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

_Pixels: TypeAlias = npt.NDArray[np.uint8] | npt.NDArray[np.float32]
_Float32: TypeAlias = npt.NDArray[np.float32]

COEFFS: tuple[tuple[float, float, float, float], ...]
"""The RGB -> YUV rows the kernels use: :data:`fastprep._kernels.coeffs.YUV_COEFFS`."""

def yuv(src: _Pixels, dst: _Float32, gain: float) -> None:
    """``dst[N, 3, P] = gain * YUV(src[N, 3, P])``."""

def mask_yuv(src: _Pixels, mask: npt.NDArray[np.uint8], dst: _Float32, fill: float, gain: float) -> None:
    """``dst[N, 3, H, W] = gain * YUV(fill where mask[H, >=W] else src[N, 3, H, W])``."""

def scale(src: _Pixels, dst: _Float32) -> None:
    """``dst = src / 255`` on flat arrays."""

def affine(src: _Pixels, dst: _Float32, gain: list[float] | tuple[float, ...],
           bias: list[float] | tuple[float, ...]) -> None:
    """``dst[N, C, P] = src[N, C, P] * gain[c] + bias[c]`` (C <= 4)."""

def cpu_level() -> int:
    """The highest variant this CPU supports: 0 baseline, 1 AVX2, 2 AVX-512."""

def select_level(requested: int) -> int:
    """Use variant ``min(requested, cpu_level())``; return the level in use."""
