"""Private compiled kernels (Numba and Cython). They assume validated, contiguous input;
the public, validating entry points live in :mod:`fastprep.functional`."""
