"""The padded crops of a torchvision pipeline as one window decode (part of
:mod:`fastprep.transforms._compile`).

A pipeline may start with ``Pad`` steps (v1 or v2), then ``RandomCrop`` (v1 or v2) or
``CenterCrop``: every padding mode (constant, edge, reflect, symmetric), per-channel fills
and v2's fill dicts, read as torchvision reads them for a uint8 tensor image:

* v2 looks a fill dict up by the type of the image it pads (``tv_tensors.Image`` after
  ``ToImage``, else ``torch.Tensor``), then ``"others"``; a missing entry pads with 0. A
  number pads every channel; a sequence one value per channel (one value: every channel).
* v1 pads tensors with a number only (a sequence raises ``TypeError`` there).
* A uint8 image's fill is the number truncated toward zero; torchvision raises (or wraps)
  outside ``[0, 256)``: such fills are refused here, as are negative paddings, and
  sequence fills with non-constant modes (v2 raises for them).

Plain v2 ``RandomCrop`` with constant padding and no ``Pad`` before it becomes
:class:`~fastprep.transforms.DecodeRandomCrop` (whose draws the native planner makes);
anything else :class:`~fastprep.transforms._decode.PaddedCrop`.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
import torchvision.transforms as v1
from torchvision.transforms import v2

from ._decode import DecodeCenterCrop, DecodeRandomCrop, PaddedCrop
from ._native import Unsupported
from ._plan import PAD_MODES, PadStage

__all__ = ["padded_geometry"]

_PADS = (v2.Pad, v1.Pad)
_CROPS = (v2.RandomCrop, v1.RandomCrop, v2.CenterCrop, v1.CenterCrop)
#: stages a PaddedCrop's plan can hold (csrc/batch/plan.h: kMaxPadStages)
_MAX_STAGES = 4


def _ltrb(padding: Any, what: str) -> tuple[int, int, int, int]:
    """torchvision's ``padding`` argument (an int, or 1, 2 or 4 ints) as ``(left, top,
    right, bottom)``; Unsupported for other forms and negative values."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        values = [padding]
    elif isinstance(padding, (list, tuple)) and len(padding) in (1, 2, 4) and \
            all(isinstance(p, int) and not isinstance(p, bool) for p in padding):
        values = list(padding)
    else:
        raise Unsupported(f"{what}(padding={padding!r}): torchvision takes an int or 1, 2 or 4 ints")
    if len(values) == 1:
        values = values * 4
    elif len(values) == 2:
        values = values * 2
    if min(values) < 0:
        raise Unsupported(f"{what}(padding={padding!r}): negative padding (a crop) is not native")
    return (values[0], values[1], values[2], values[3])


def _fill(step: Any, mode: str, image_type: type, channels: int) -> tuple[int, ...]:
    """The per-channel uint8 fill ``step`` pads a ``channels``-channel image of
    ``image_type`` with (zeros for non-constant modes, which read no fill)."""
    what = type(step).__name__
    is_v2 = isinstance(step, v2.Transform)
    fill = step.fill
    if is_v2:
        table = step._fill  # v2's parsed fill: {type or "others": value}
        fill = table[image_type] if image_type in table else table.get("others")
    if fill is None:
        fill = 0
    if isinstance(fill, (list, tuple)):
        if not is_v2:
            raise Unsupported(f"{what}(fill={step.fill!r}): torchvision pads tensors with a number only (TypeError)")
        if len(fill) == 1:
            fill = fill[0]
        elif mode != "constant":
            raise Unsupported(f"{what}(fill={step.fill!r}, padding_mode={mode!r}): torchvision raises for a "
                              "sequence fill with a non-constant mode")
    if mode != "constant":
        return (0,) * channels
    values = list(fill) if isinstance(fill, (list, tuple)) else [fill] * channels
    if len(values) != channels:
        raise Unsupported(f"{what}(fill={step.fill!r}): {len(values)} values for {channels}-channel images")
    out = []
    for v in values:
        if not isinstance(v, numbers.Real) or not 0 <= float(v) < 256:
            raise Unsupported(f"{what}(fill={step.fill!r}): natively a uint8 image's fill is in [0, 256)")
        out.append(int(float(v)))
    return tuple(out)


def _mode(step: Any) -> str:
    mode = step.padding_mode
    if mode not in PAD_MODES:
        raise Unsupported(f"{type(step).__name__}(padding_mode={mode!r}): torchvision takes {PAD_MODES}")
    return mode


def _pad_stage(step: Any, image_type: type, channels: int) -> PadStage:
    mode = _mode(step)
    return PadStage(mode, _ltrb(step.padding, type(step).__name__), _fill(step, mode, image_type, channels))


def _crop_padding(step: Any) -> tuple[int, int, int, int] | None:
    """A RandomCrop's own padding as ``(left, top, right, bottom)``; ``None`` for none."""
    if step.padding is None:
        return None
    if isinstance(step, v2.Transform):  # v2 keeps it parsed as [left, right, top, bottom]
        left, right, top, bottom = step.padding
        return _ltrb([left, top, right, bottom], type(step).__name__)
    return _ltrb(step.padding, type(step).__name__)


def padded_geometry(steps: list[Any], decode_kwargs: dict, image_type: type) -> tuple[Any, int] | None:
    """The decode transform of leading ``Pad`` steps and the crop after them, and how many
    steps it took; ``None`` when ``steps`` start with neither (another geometry)."""
    channels = 1 if str(decode_kwargs.get("mode", "RGB")).upper().endswith("GRAY") else 3
    taken = 0
    pads = []
    while taken < len(steps) and type(steps[taken]) in _PADS:
        pads.append(_pad_stage(steps[taken], image_type, channels))
        taken += 1
    crop: Any = steps[taken] if taken < len(steps) else None
    if type(crop) not in _CROPS:
        if not pads:
            return None
        after = f"followed by {type(crop).__name__}" if crop is not None else "alone"
        raise Unsupported(f"Pad {after}: natively a Pad must be followed by RandomCrop or CenterCrop (the batch "
                          "needs one output size)")
    size = tuple(int(s) for s in crop.size)
    reference = v2.Compose(steps[:taken + 1])
    center = type(crop) in (v2.CenterCrop, v1.CenterCrop)
    if center and not pads:
        return DecodeCenterCrop(size, **decode_kwargs), 1
    if center:
        decode = PaddedCrop(pads, "center", size, None, False, "constant", (0,) * channels, reference, channels,
                            **decode_kwargs)
        return decode, taken + 1
    mode = _mode(crop) if crop.padding is not None or crop.pad_if_needed else "constant"
    padding = _crop_padding(crop)
    may_pad = crop.padding is not None or crop.pad_if_needed
    fill = _fill(crop, mode, image_type, channels) if may_pad else (0,) * channels
    is_v2 = type(crop) is v2.RandomCrop
    if is_v2 and mode == "constant" and not pads:
        return DecodeRandomCrop(size, padding=padding, pad_if_needed=crop.pad_if_needed, fill=fill,
                                **decode_kwargs), 1
    if len(pads) + (1 if is_v2 else 2) > _MAX_STAGES:
        raise Unsupported(f"{len(pads)} Pad steps before {type(crop).__name__}: natively at most "
                          f"{_MAX_STAGES - (1 if is_v2 else 2)}")
    decode = PaddedCrop(pads, "v2" if is_v2 else "v1", size, padding, crop.pad_if_needed, mode, fill, reference,
                        channels, **decode_kwargs)
    return decode, taken + 1


def image_type_after(step: Any, kind: type) -> type:
    """The type of the image after ``step`` when it received a ``kind`` (a decoded image is a
    plain tensor): ``ToImage`` makes it a ``tv_tensors.Image``, ``ToPureTensor`` a plain tensor
    again; every other step keeps the type it was given."""
    from torchvision import tv_tensors

    if type(step) is v2.ToImage:
        return tv_tensors.Image
    if type(step) is v2.ToPureTensor:
        return torch.Tensor
    return kind


def image_type(steps: list[Any]) -> type:
    """The type of image the first step that is not in ``steps`` receives, from the steps
    before it that change nothing but the type (``ToImage``, ``ToPureTensor``)."""
    kind: type = torch.Tensor
    for step in steps:
        kind = image_type_after(step, kind)
    return kind
