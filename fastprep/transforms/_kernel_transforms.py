"""The kernel transforms: torchvision v2 transforms whose body is one call of
:mod:`fastprep.functional` (``RandomMask``, ``ConvertColor``, ``Scale`` and the fused
``YUVScale``/``MaskYUVScale``). See :mod:`fastprep.transforms` for the rules they follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import PIL.Image
import torch
from torchvision import tv_tensors  # type: ignore[import-untyped, unused-ignore]
from torchvision.transforms import v2  # type: ignore[import-untyped, unused-ignore]

from .. import _checks
from .. import functional as F
from .._seeding import draw_seed

__all__ = ["ConvertColor", "MaskYUVScale", "RandomMask", "Scale", "YUVScale"]

#: A mask's fill: one number for every channel, or one per channel.
Fill = float | Sequence[float]


def _is_pure_tensor(x: object) -> bool:
    return type(x) is torch.Tensor


_PIL_PALETTE_MODES = ("P", "PA")


def _pil_to_chw(img: PIL.Image.Image, rgb: bool = False) -> np.ndarray:
    if rgb and img.mode != "RGB":
        raise ValueError(f"expected an RGB PIL image, got mode {img.mode!r}")
    if img.mode in _PIL_PALETTE_MODES:
        raise TypeError(f"PIL images in palette mode {img.mode!r} are not supported; convert them first")
    arr = np.asarray(img)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _chw_to_pil(arr: np.ndarray, like: PIL.Image.Image) -> PIL.Image.Image:
    hwc = arr[0] if arr.shape[0] == 1 else arr.transpose(1, 2, 0)
    return PIL.Image.frombytes(like.mode, like.size, np.ascontiguousarray(hwc).tobytes())


class _KernelTransform(v2.Transform):
    """A v2 transform whose body is one functional call, ``self._kernel(image, params)``."""

    _transformed_types = (tv_tensors.Image, PIL.Image.Image, _is_pure_tensor, np.ndarray)
    _keeps_pil = False  # True when the output has the input's dtype and may stay PIL
    _needs_rgb = False

    def forward(self, *inputs: Any) -> Any:
        """Transform the image(s) in ``inputs`` (a tensor, ``tv_tensors.Image``, PIL image,
        numpy array, or a structure of them with v2's rules); other entries pass through."""
        # Fast path for the common single image; same result as v2's structured path.
        if len(inputs) == 1:
            x = inputs[0]
            if type(x) is torch.Tensor or type(x) is tv_tensors.Image or isinstance(
                x, (PIL.Image.Image, np.ndarray)
            ):
                return self.transform(x, self.make_params([x]))
        return super().forward(*inputs)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if isinstance(inpt, PIL.Image.Image):
            out = self._kernel(_pil_to_chw(inpt, self._needs_rgb), params)
            if self._keeps_pil:
                return _chw_to_pil(out, inpt)
            return tv_tensors.Image(torch.from_numpy(out))
        if isinstance(inpt, tv_tensors.Image):
            return tv_tensors.wrap(self._kernel(inpt.as_subclass(torch.Tensor), params), like=inpt)
        return self._kernel(inpt, params)

    def _kernel(self, img: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError


def _draw_seed() -> int:
    """One draw from torch's default RNG (the same draw the functionals make)."""
    return int(draw_seed(None, None))


class _MaskParams:
    """``ratio``/``fill`` validation and the seed draw shared by the masking transforms."""

    def _init_mask(self, ratio: float, fill: Fill) -> None:
        self.ratio = _checks.ratio(ratio)
        # type and finiteness; the uint8 range and the channel count are checked per image
        if isinstance(fill, (list, tuple)):
            if isinstance(self, MaskYUVScale):
                raise TypeError(f"MaskYUVScale takes a scalar fill, got {fill!r}")
            _checks.fill_values(fill, np.float32, len(fill))
            fill = tuple(fill)
        else:
            _checks.fill_scalar(fill, np.float32)
        self.fill = fill

    @staticmethod
    def get_params() -> int:
        """The seed of the next mask, drawn from torch's default RNG.

        Returns:
            int: a 63-bit seed for :func:`fastprep.functional.apply_random_mask`.
        """
        return _draw_seed()

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        return {"seed": self.get_params()}


class RandomMask(_MaskParams, _KernelTransform):
    """Fill a random, cross-dilated mask: each pixel seeds the mask with probability
    ``ratio``, the mask is dilated with ``[[0,1,0],[1,1,1],[0,1,0]]`` (zero padding) and
    every channel under it is set to ``fill``.

    One mask per call, shared by all channels and all images of a batch. The probability
    resolves to multiples of 2**-16 (:data:`fastprep.functional.MASK_PROBABILITY_RESOLUTION`).

    Args:
        ratio (float): probability in [0, 1] that a pixel seeds the mask. Default 0.25.
        fill (int | float | sequence): value of masked pixels, or one value per channel
            (e.g. ``(0, 128, 128)`` for a YCbCr image); integers in [0, 255] for uint8
            images. Default 0. (:class:`Compose` fuses only scalar fills.)

    Input/output: ``(*, C, H, W)`` (up to one batch dim) uint8 or float32 tensor or
    ``tv_tensors.Image``, or a PIL image; same type, shape and dtype out.
    """

    _keeps_pil = True

    def __init__(self, ratio: float = 0.25, fill: Fill = 0) -> None:
        super().__init__()
        self._init_mask(ratio, fill)

    def _kernel(self, img: Any, params: dict[str, Any]) -> Any:
        return F.apply_random_mask(img, self.ratio, self.fill, seed=params["seed"])


class ConvertColor(_KernelTransform):
    """RGB -> YUV, JPEG/JFIF YCbCr (BT.601 full range, ITU-T T.871 section 7), float32,
    unclamped: ``Y = 0.299 R + 0.587 G + 0.114 B``,
    ``U = -0.16874 R - 0.33126 G + 0.5 B + 128``, ``V = 0.5 R - 0.41869 G - 0.08131 B + 128``.

    Input: ``(3, H, W)`` or ``(N, 3, H, W)`` uint8 or float32 (0..255 scale), or an RGB PIL
    image. Output: float32 of the same shape (a ``tv_tensors.Image`` for PIL input).
    """

    _needs_rgb = True

    def _kernel(self, img: Any, params: dict[str, Any]) -> Any:
        return F.rgb_to_yuv(img)


class Scale(_KernelTransform):
    """``img / 255`` in float32.

    Input: uint8 or float32 tensor/``tv_tensors.Image``, or a PIL image. Output: float32 of
    the same shape (a ``tv_tensors.Image`` in ``(C, H, W)`` for PIL input).
    """

    def _kernel(self, img: Any, params: dict[str, Any]) -> Any:
        return F.scale(img)


class YUVScale(_KernelTransform):
    """``ConvertColor`` then ``Scale`` in one pass (:func:`fastprep.functional.yuv_scale`);
    equal to the two-step result within float32 rounding (1e-6)."""

    _needs_rgb = True

    def _kernel(self, img: Any, params: dict[str, Any]) -> Any:
        return F.yuv_scale(img)


class MaskYUVScale(_MaskParams, _KernelTransform):
    """``RandomMask(ratio, fill)``, ``ConvertColor()``, ``Scale()`` fused into one pass
    (:func:`fastprep.functional.mask_yuv_scale`): the same mask for the same torch RNG state,
    values within float32 rounding (1e-6); every output element is written once.

    Input: ``(3, H, W)`` or ``(N, 3, H, W)`` uint8 or float32 (0..255 scale), or an RGB PIL
    image. Output: float32 of the same shape (a ``tv_tensors.Image`` for PIL input).
    """

    _needs_rgb = True

    def __init__(self, ratio: float = 0.25, fill: Fill = 0) -> None:
        super().__init__()
        self._init_mask(ratio, fill)

    def _kernel(self, img: Any, params: dict[str, Any]) -> Any:
        return F.mask_yuv_scale(img, self.ratio, fill=cast(float, self.fill), seed=params["seed"])
