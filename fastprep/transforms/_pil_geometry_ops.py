"""PIL twins of the geometric steps (csrc/ops/pil_geometry.cpp), proved like the colour twins
(:mod:`fastprep.transforms._pil_ops`) against the installed Pillow at first use.

* ``affine`` -> ``pil_affine``: the step of ``F.affine`` / ``F.rotate`` that RandomAffine,
  RandomRotation and the auto-augments' ShearX/Y, TranslateX/Y and Rotate emit carries, besides
  the tensor matrix, the arguments the functional received (csrc/ops/affine.h: AffineArgs);
  the twin computes what torchvision computes on a PIL image from them: the inverse matrix about
  the centre in pixels and ``Image.transform(size, AFFINE, ...)``, or ``Image.rotate``, with
  Pillow's nearest / bilinear / bicubic sampling and ``_parse_fill``'s fill;
* ``gaussian_blur`` is its own twin: torchvision blurs a PIL image as a tensor;
* ``rotate90`` is its own twin: ``Image.rotate``'s shortcuts for 180 degrees, and for 90 / 270 on
  square images, are the same data movement as ``torch.rot90``.

The standalone kernels ``pil_transform_affine`` (``Image.transform(size, AFFINE, data,
resample, fillcolor)`` at the image's size), ``pil_rotate`` (``Image.rotate``) and
``pil_gaussian_blur`` (``Image.filter(ImageFilter.GaussianBlur(radius))``: floats ``(radius_x,
radius_y)``, ints ``(passes,)`` = ``(3,)``) take Pillow's own arguments; their parameter
layouts are in ``torch.ops.fastprep.pixel_kernel_info(name)``, their proof is
:func:`pil_geometry_reason`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import PIL
import PIL.Image
import torch
from PIL import ImageFilter
from torchvision.transforms import InterpolationMode  # type: ignore[import-untyped, unused-ignore]
from torchvision.transforms.v2 import functional as F2  # type: ignore[import-untyped, unused-ignore]

from ._pil_ops import pil_twin

__all__ = ["pil_geometry_reason"]

_MODES = (InterpolationMode.NEAREST, InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)


def _affine_probes() -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Step parameters of each kind, interpolation and fill form (matrix fields unused by the twin)."""
    matrix = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    kinds = (  # (has center, rotate, angle, tx, ty, scale, shear x, shear y, cx, cy)
        (0, 0, 23.7, 3.0, -2.0, 1.1, 12.5, -7.0, 0.0, 0.0),  # RandomAffine
        (1, 0, 0.0, 0.0, 0.0, 1.0, -16.7, 0.0, 0.0, 0.0),  # ShearX, center=[0, 0]
        (1, 0, 0.0, 0.0, 0.0, 1.0, 0.0, 28.1, 0.0, 0.0),  # ShearY
        (0, 0, 0.0, -5.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0),  # TranslateX
        (0, 1, -30.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0),  # Rotate
        (0, 1, 90.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0),  # Rotate 90 (the affine on non-square images)
        (1, 1, 200.5, 0.0, 0.0, 1.0, 0.0, 0.0, 3.0, 1.5),  # RandomRotation(center=...)
        (1, 0, -151.0, 1.0, 4.0, 0.7, 3.0, 44.0, 2.0, 7.0),  # RandomAffine(center=...)
    )
    fills: tuple[tuple[int, tuple[float, ...]], ...] = ((0, ()), (1, (0.0,)), (1, (128.0,)), (1, (300.0,)),
                                                        (1, (-2.7,)))
    out: list[tuple[tuple[int, ...], tuple[float, ...]]] = []
    for k, (has_center, rotate, *args) in enumerate(kinds):
        for interpolation in range(3):
            has_fill, values = fills[(k + interpolation) % len(fills)]
            ints = (interpolation, has_fill, len(values), has_center, rotate)
            slots = (*values, *([0.0] * (4 - len(values))))
            out.append((ints, (*matrix, *slots, *args)))
    return out


@pil_twin("affine", "pil_affine", _affine_probes())
def _affine(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    interpolation = _MODES[ints[0]]
    fill: Any = list(floats[6:6 + ints[2]]) if ints[1] else None
    center = [floats[16], floats[17]] if ints[3] else None
    if ints[4]:
        return F2.rotate(image, floats[10], interpolation=interpolation, center=center, fill=fill)
    return F2.affine(image, angle=floats[10], translate=[floats[11], floats[12]], scale=floats[13],
                     shear=[floats[14], floats[15]], interpolation=interpolation, fill=fill, center=center)


@pil_twin("gaussian_blur", "gaussian_blur",
          [((5, 5), (0.7, 0.7)), ((3, 7), (1.3, 1.3)), ((1, 3), (0.1, 0.1)), ((7, 1), (2.0, 2.0))], min_side=4)
def _gaussian_blur(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    """torchvision's GaussianBlur on a PIL image is its tensor blur (``pil_to_tensor``, the blur,
    ``to_pil_image``): the kernel is its own twin."""
    return F2.gaussian_blur(image, [ints[0], ints[1]], [floats[0], floats[1]])


@pil_twin("rotate90", "rotate90", [((2,), ())])  # quarter turns change a non-square probe's size
def _rotate90(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F2.rotate(image, 90.0 * ints[0])


# ---------------------------------------------------------------------------------------
# The standalone kernels' proof


def _probe(h: int, w: int, c: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 53 // max(h - 1, 1)) % 256
    arr = np.where(rng.random((h, w, 1)) < 0.6, base[..., None], rng.integers(0, 256, (h, w, c)))
    return arr.astype(np.uint8).reshape(h, w, c)


_SHAPES = ((1, 1), (1, 9), (9, 1), (3, 700), (37, 41), (24, 24))


def _run(arr: np.ndarray, name: str, ints: Sequence[int], floats: Sequence[float]) -> np.ndarray:
    t = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
    out = torch.ops.fastprep.apply_pixel_kernel(t, name, list(ints), [float(v) for v in floats])
    return out.permute(1, 2, 0).numpy()


def _mismatch() -> str | None:
    for k, (h, w) in enumerate(_SHAPES):
        for c in (1, 3):
            arr = _probe(h, w, c, k)
            im = PIL.Image.fromarray(arr[..., 0] if c == 1 else arr, "L" if c == 1 else "RGB")
            for resample in (PIL.Image.Resampling.NEAREST, PIL.Image.Resampling.BILINEAR,
                             PIL.Image.Resampling.BICUBIC):
                data = (0.93, 0.31, -2.5, -0.27, 1.05, 1.75)
                want = np.asarray(im.transform(im.size, PIL.Image.Transform.AFFINE, data, resample)).reshape(h, w, c)
                if not np.array_equal(_run(arr, "pil_transform_affine", (int(resample), 1), (*data, 0)), want):
                    return f"pil_transform_affine of a {h}x{w}x{c} image, resample {resample.name}"
                for angle in (0.0, 90.0, 180.0, 33.3):
                    want = np.asarray(im.rotate(angle, resample)).reshape(h, w, c)
                    if not np.array_equal(_run(arr, "pil_rotate", (int(resample), 1, 0), (angle, 0, 0, 0)), want):
                        return f"pil_rotate({angle}) of a {h}x{w}x{c} image, resample {resample.name}"
            for radius in (0.1, 1.3, 2.0, 9.0):
                want = np.asarray(im.filter(ImageFilter.GaussianBlur(radius))).reshape(h, w, c)
                if not np.array_equal(_run(arr, "pil_gaussian_blur", (3,), (radius, radius)), want):
                    return f"pil_gaussian_blur({radius}) of a {h}x{w}x{c} image"
    return None


@functools.cache
def pil_geometry_reason() -> str | None:
    """``None`` when the standalone kernels ``pil_transform_affine``, ``pil_rotate`` and
    ``pil_gaussian_blur`` give the installed Pillow's bits on the probe images; otherwise why
    not (a caller then runs Pillow itself). Computed once per process."""
    try:
        bad = _mismatch()
    except Exception as e:  # noqa: BLE001 -- a probe that cannot run proves nothing
        bad = f"the probe failed ({type(e).__name__}: {e})"
    if bad is None:
        return None
    return f"installed Pillow {PIL.__version__} computes otherwise than fastprep's PIL-exact kernel ({bad})"
