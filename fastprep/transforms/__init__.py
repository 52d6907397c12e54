"""Drop-in transforms over the compiled kernels and the ROI decoder, compatible with
torchvision v2.

Kernel transforms: ``RandomMask``, ``ConvertColor`` and ``Scale`` give the outputs of the
reference transforms of the same names (a cross-dilated random mask; BT.601 full-range
YCbCr; ``x / 255``); :class:`Compose` runs any transforms and replaces a run
``RandomMask -> ConvertColor -> Scale`` by one fused pass (:class:`MaskYUVScale`) and
``ConvertColor -> Scale`` by :class:`YUVScale`, with the same results.

Each kernel transform is a :class:`torchvision.transforms.v2.Transform`: it accepts a
tensor, a ``tv_tensors.Image``, a PIL image, or a structure of them (``(image, label)``,
dicts, ...) with v2's rules for which entries are images; a single numpy array is accepted
too. Types are preserved where torchvision v2 preserves them: tensors stay tensors,
``tv_tensors.Image`` stays ``Image``, PIL stays PIL for ``RandomMask``; the float outputs
of ``ConvertColor``/``Scale`` cannot be PIL and become ``tv_tensors.Image`` (as
``v2.ToImage`` would make them). Randomness is drawn once per call in ``make_params``
from torch's default RNG, so ``torch.manual_seed`` reproduces a pipeline and DataLoader
workers differ.

Decode transforms (``DecodeRandomCrop``, ``DecodeCenterCrop``, ``DecodeRandomResizedCrop``,
``DecodeResize``, ``DecodeResizeCenterCrop``): the first step of a pipeline over encoded
JPEG bytes; each reads the header, draws its window with the torch RNG calls of the v2
transform it replaces, and decodes only what the output needs (a :class:`DecodePlan`;
:func:`plan_scaled_window` chooses the DCT scale of a window).

:class:`OnDecoded` decodes the whole JPEG and applies a pipeline on decoded images (an
unchanged torchvision v2 recipe), :class:`OnPIL` opens it as ``ImageFolder`` does
(``Image.open(f).convert("RGB")``) for a pipeline on PIL images; the threads engine compiles such pipelines into native
steps that give the same bits (``_compile``, ``_native``, ``_native_*``: the native side of
each supported torchvision transform; ``docs/augment.md``).

Layout: ``_kernel_transforms`` (kernel transforms), ``_compose`` (the fusing Compose),
``_decode`` (decode transforms, OnDecoded), ``_pil`` (OnPIL, the proof of the PIL-exact
kernels against the installed Pillow), ``_plan`` (their integer geometry, no
randomness and no torch), ``_compile`` and ``_native*`` (the native engine's side of a
pipeline). This module only hands their public names on.
"""

from ._compose import Compose
from ._decode import (
    DecodeCenterCrop,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    OnDecoded,
)
from ._kernel_transforms import ConvertColor, MaskYUVScale, RandomMask, Scale, YUVScale
from ._fast import SeparableGaussianBlur, fast_ops
from ._multiview import MultiView
from ._pil import OnPIL
from ._plan import DCT_SCALES, DecodePlan, ResizeStep, plan_scaled_window

__all__ = [
    "DCT_SCALES",
    "Compose",
    "ConvertColor",
    "DecodeCenterCrop",
    "DecodePlan",
    "DecodeRandomCrop",
    "DecodeRandomResizedCrop",
    "DecodeResize",
    "DecodeResizeCenterCrop",
    "MaskYUVScale",
    "MultiView",
    "OnDecoded",
    "OnPIL",
    "RandomMask",
    "ResizeStep",
    "Scale",
    "SeparableGaussianBlur",
    "YUVScale",
    "fast_ops",
    "plan_scaled_window",
]
