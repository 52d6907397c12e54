"""Drop-in transforms over the compiled kernels, compatible with torchvision v2.

``RandomMask``, ``ConvertColor`` and ``Scale`` give the outputs of the reference transforms
of the same names (a cross-dilated random mask; BT.601 full-range YCbCr; ``x / 255``);
:class:`Compose` runs any transforms and replaces a
run ``RandomMask -> ConvertColor -> Scale`` by one fused pass (:class:`MaskYUVScale`) and
``ConvertColor -> Scale`` by :class:`YUVScale`, with the same results.

Each transform is a :class:`torchvision.transforms.v2.Transform`: it accepts a tensor, a
``tv_tensors.Image``, a PIL image, or a structure of them (``(image, label)``, dicts, ...)
with v2's rules for which entries are images; a single numpy array is accepted too.
Types are preserved where torchvision v2 preserves them: tensors stay tensors,
``tv_tensors.Image`` stays ``Image``, PIL stays PIL for ``RandomMask``; the float outputs
of ``ConvertColor``/``Scale`` cannot be PIL and become ``tv_tensors.Image`` (as
``v2.ToImage`` would make them). Randomness is drawn once per call in ``make_params``
from torch's default RNG, so ``torch.manual_seed`` reproduces a pipeline and DataLoader
workers differ.
"""

from collections.abc import Sequence

import numpy as np
import PIL.Image
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from . import functional as F
from .decode_transforms import (  # noqa: F401  (re-exported)
    DecodeCenterCrop,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
)

__all__ = [
    "Compose",
    "ConvertColor",
    "DecodeCenterCrop",
    "DecodeRandomCrop",
    "DecodeRandomResizedCrop",
    "DecodeResize",
    "DecodeResizeCenterCrop",
    "MaskYUVScale",
    "RandomMask",
    "Scale",
    "YUVScale",
]


def _is_pure_tensor(x):
    return type(x) is torch.Tensor


_PIL_PALETTE_MODES = ("P", "PA")


def _pil_to_chw(img, rgb=False):
    if rgb and img.mode != "RGB":
        raise ValueError(f"expected an RGB PIL image, got mode {img.mode!r}")
    if img.mode in _PIL_PALETTE_MODES:
        raise TypeError(f"PIL images in palette mode {img.mode!r} are not supported; convert them first")
    arr = np.asarray(img)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def _chw_to_pil(arr, like):
    hwc = arr[0] if arr.shape[0] == 1 else arr.transpose(1, 2, 0)
    return PIL.Image.frombytes(like.mode, like.size, np.ascontiguousarray(hwc).tobytes())


class _KernelTransform(v2.Transform):
    """A v2 transform whose body is one functional call, ``self._kernel(image, params)``."""

    _transformed_types = (tv_tensors.Image, PIL.Image.Image, _is_pure_tensor, np.ndarray)
    _keeps_pil = False  # True when the output has the input's dtype and may stay PIL
    _needs_rgb = False

    def forward(self, *inputs):
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

    def transform(self, inpt, params):
        if isinstance(inpt, PIL.Image.Image):
            out = self._kernel(_pil_to_chw(inpt, self._needs_rgb), params)
            if self._keeps_pil:
                return _chw_to_pil(out, inpt)
            return tv_tensors.Image(torch.from_numpy(out))
        if isinstance(inpt, tv_tensors.Image):
            return tv_tensors.wrap(self._kernel(inpt.as_subclass(torch.Tensor), params), like=inpt)
        return self._kernel(inpt, params)

    def _kernel(self, img, params):
        raise NotImplementedError


def _draw_seed():
    """One draw from torch's default RNG (the same draw the functionals make)."""
    return int(F._draw_seed(None, None))


class _MaskParams:
    """``ratio``/``fill`` validation and the seed draw shared by the masking transforms."""

    def _init_mask(self, ratio, fill):
        self.ratio = F._check_ratio(ratio)
        # type and finiteness; the uint8 range and the channel count are checked per image
        if isinstance(fill, (list, tuple)):
            if isinstance(self, MaskYUVScale):
                raise TypeError(f"MaskYUVScale takes a scalar fill, got {fill!r}")
            F._fill_values(fill, np.float32, len(fill))
            fill = tuple(fill)
        else:
            F._fill_scalar(fill, np.float32)
        self.fill = fill

    @staticmethod
    def get_params():
        """The seed of the next mask, drawn from torch's default RNG.

        Returns:
            int: a 63-bit seed for :func:`fastprep.functional.apply_random_mask`.
        """
        return _draw_seed()

    def make_params(self, flat_inputs):
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

    def __init__(self, ratio=0.25, fill=0):
        super().__init__()
        self._init_mask(ratio, fill)

    def _kernel(self, img, params):
        return F.apply_random_mask(img, self.ratio, self.fill, seed=params["seed"])


class ConvertColor(_KernelTransform):
    """RGB -> YUV, JPEG/JFIF YCbCr (BT.601 full range, ITU-T T.871 section 7), float32,
    unclamped: ``Y = 0.299 R + 0.587 G + 0.114 B``,
    ``U = -0.16874 R - 0.33126 G + 0.5 B + 128``, ``V = 0.5 R - 0.41869 G - 0.08131 B + 128``.

    Input: ``(3, H, W)`` or ``(N, 3, H, W)`` uint8 or float32 (0..255 scale), or an RGB PIL
    image. Output: float32 of the same shape (a ``tv_tensors.Image`` for PIL input).
    """

    _needs_rgb = True

    def _kernel(self, img, params):
        return F.rgb_to_yuv(img)


class Scale(_KernelTransform):
    """``img / 255`` in float32.

    Input: uint8 or float32 tensor/``tv_tensors.Image``, or a PIL image. Output: float32 of
    the same shape (a ``tv_tensors.Image`` in ``(C, H, W)`` for PIL input).
    """

    def _kernel(self, img, params):
        return F.scale(img)


class YUVScale(_KernelTransform):
    """``ConvertColor`` then ``Scale`` in one pass (:func:`fastprep.functional.yuv_scale`);
    equal to the two-step result within float32 rounding (1e-6)."""

    _needs_rgb = True

    def _kernel(self, img, params):
        return F.yuv_scale(img)


class MaskYUVScale(_MaskParams, _KernelTransform):
    """``RandomMask(ratio, fill)``, ``ConvertColor()``, ``Scale()`` fused into one pass
    (:func:`fastprep.functional.mask_yuv_scale`): the same mask for the same torch RNG state,
    values within float32 rounding (1e-6); every output element is written once.

    Input: ``(3, H, W)`` or ``(N, 3, H, W)`` uint8 or float32 (0..255 scale), or an RGB PIL
    image. Output: float32 of the same shape (a ``tv_tensors.Image`` for PIL input).
    """

    _needs_rgb = True

    def __init__(self, ratio=0.25, fill=0):
        super().__init__()
        self._init_mask(ratio, fill)

    def _kernel(self, img, params):
        return F.mask_yuv_scale(img, self.ratio, fill=self.fill, seed=params["seed"])


def _fuse(transforms):
    """The transforms to run: runs of exactly RandomMask, ConvertColor, Scale (in this
    order, exact classes) become MaskYUVScale; ConvertColor, Scale become YUVScale."""
    plan, i, n = [], 0, len(transforms)
    kinds = [type(t) for t in transforms]
    while i < n:
        if kinds[i : i + 3] == [RandomMask, ConvertColor, Scale] and not isinstance(transforms[i].fill, tuple):
            plan.append(MaskYUVScale(transforms[i].ratio, transforms[i].fill))
            i += 3
        elif kinds[i : i + 2] == [ConvertColor, Scale]:
            plan.append(YUVScale())
            i += 2
        else:
            plan.append(transforms[i])
            i += 1
    return plan


class Compose(torch.nn.Module):
    """Chain transforms like ``torchvision.transforms.v2.Compose``, fusing kernel runs.

    ``RandomMask -> ConvertColor -> Scale`` runs as one :class:`MaskYUVScale` pass and
    ``ConvertColor -> Scale`` as :class:`YUVScale`; other transforms (any callables) run as
    given. The fused pipeline draws the same random numbers as the unfused one, so under
    the same ``torch.manual_seed`` both give the same mask and values within 1e-6.

    Args:
        transforms (sequence of callables): applied in order. ``transforms`` keeps the list
            as given; ``fused_transforms`` is what runs.
    """

    def __init__(self, transforms):
        super().__init__()
        if not isinstance(transforms, Sequence):
            raise TypeError(f"transforms must be a sequence of callables, got {type(transforms).__name__}")
        for t in transforms:
            if not callable(t):
                raise TypeError(f"transforms must be callables, got {t!r} ({type(t).__name__})")
        self.transforms = list(transforms)
        self.fused_transforms = _fuse(self.transforms)

    def forward(self, *inputs):
        """Run the (fused) transforms in order on ``inputs``; returns what the last returns."""
        if len(inputs) == 1:
            x = inputs[0]
            for t in self.fused_transforms:
                x = t(x)
            return x
        outputs = inputs
        for t in self.fused_transforms:
            outputs = t(*outputs)
        return outputs

    def __repr__(self):
        lines = [f"{type(self).__name__}("] + [f"    {t}" for t in self.transforms]
        if len(self.fused_transforms) != len(self.transforms):
            lines.append("  runs as:")
            lines += [f"    {t}" for t in self.fused_transforms]
        return "\n".join(lines + [")"])
