"""Private compiled kernels (Numba and Cython) and what they share. They assume validated,
contiguous input; the public, validating entry points live in :mod:`fastprep.functional`.

* ``_color`` (Cython over the C in ``_color_kernels.h``): RGB -> YUV, ``/ 255``, fused paths.
* ``_mask``, ``_interleave`` (Numba): mask bits, dilation, mask fill; planar -> interleaved.
* ``coeffs``: the RGB -> YUV coefficients, their one source.
* ``isa``: the one ISA switch of the compiled kernels (``FASTPREP_ISA``, ``set_isa``).
"""
