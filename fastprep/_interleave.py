"""Compatibility alias: the kernel lives in :mod:`fastprep._kernels._interleave`."""

from ._kernels._interleave import planar3_to_interleaved

__all__ = ["planar3_to_interleaved"]
