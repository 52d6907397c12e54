"""Compatibility alias: the coefficients live in :mod:`fastprep._kernels.coeffs`."""

from ._kernels.coeffs import YUV_COEFFS

__all__ = ["YUV_COEFFS"]
