"""The RGB -> YUV coefficients: their one source.

JPEG File Interchange Format 1.02 (ITU-T T.871), section 7: the BT.601 full-range YCbCr
transform that JPEG files use. Rows are Y, U (Cb), V (Cr); each row is
``(coefficient of R, of G, of B, offset)`` on the 0..255 scale::

    Y =  0.299   R + 0.587   G + 0.114   B
    U = -0.16874 R - 0.33126 G + 0.5     B + 128
    V =  0.5     R - 0.41869 G - 0.08131 B + 128

A leaf module (imports nothing from fastprep) so every layer can use it. The Cython kernels
(``_color.pyx``) import this tuple; the C++ batch op (``csrc/batch/decode_batch.cpp``) receives it
from :mod:`fastprep.data.native` in its ``params`` tensor; nothing else spells the numbers.
"""

YUV_COEFFS = (
    (0.299, 0.587, 0.114, 0.0),
    (-0.16874, -0.33126, 0.5, 128.0),
    (0.5, -0.41869, -0.08131, 128.0),
)
