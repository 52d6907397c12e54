"""Compiling a transform pipeline for the native batch engine.

A pipeline the threads engine can run has three parts, in this order:

1. **The geometry**, which becomes one window decode: a fastprep decode transform (the
   pipeline takes the encoded file), or -- for a pipeline on decoded images -- torchvision v2's
   ``RandomResizedCrop`` (with a ``RandomHorizontalFlip`` right after it, the flip is fused into
   the resize), ``Resize`` + ``CenterCrop``, ``Resize`` to ``(h, w)``, ``CenterCrop`` or
   ``RandomCrop``: the equivalent decode transform with ``dct_scaling=False``, whose draws and
   pixels are v2's (optionally followed by fastprep's ``RandomMask``).
2. **Augmentations** on the uint8 image: v2 transforms with a native side
   (:func:`fastprep.transforms._native.to_native`).
3. **The output**: ``ToDtype(torch.float32, scale=True)`` (+ ``Normalize``), fused into the
   batch write, then transforms that run on the float image (``RandomErasing``, which may also
   come before ``ToDtype``: its native side's stage is ``"any"``).

``ToImage``, ``ToPureTensor`` and ``PILToTensor`` change nothing on a decoded uint8 tensor
and are skipped, as is ``ToDtype(torch.uint8)`` before the float conversion. Anything else
raises :class:`~fastprep.transforms._native.Unsupported` with the reason, and the loader runs
the pipeline on the processes engine instead (the reason is ``loader.engine_reason``).

:func:`input_kind` decides, in one place, whether a transform takes the encoded file or a
decoded image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torchvision.transforms import v2

# register the native sides
from . import (  # noqa: F401
    _native_auto,
    _native_blur,
    _native_color,
    _native_erasing,
    _native_flip,
    _native_geometry,
    _native_point,
)
from ._compose import Compose
from ._decode import (
    DecodeCenterCrop,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    OnDecoded,
    is_decode_transform,
)
from ._kernel_transforms import RandomMask
from ._native import NativeTransform, Unsupported, to_native
from ._plan import INTERPOLATIONS

__all__ = ["CompiledPipeline", "compile_pipeline", "input_kind", "output_dtype"]

#: Steps that change nothing on a decoded uint8 tensor.
_NO_OPS = (v2.ToImage, v2.ToPureTensor, v2.PILToTensor, torch.nn.Identity, v2.Identity)


class CompiledPipeline(NamedTuple):
    """A pipeline as the native batch engine runs it (see the module's docstring).

    Attributes:
        decode: the fastprep decode transform of the geometry (its draws come first).
        mask: fastprep's ``RandomMask`` right after the decode, or ``None``.
        augment: the native sides of the uint8 augmentations, in order.
        to_float: ``ToDtype(torch.float32, scale=True)`` ends the uint8 part.
        mean, std: ``Normalize``'s (``None`` without one).
        after_float: native sides of the transforms on the float image, in order.
        channels: channels of the output.
        size: ``(height, width)`` of the output.
    """

    decode: Any
    mask: RandomMask | None
    augment: tuple[NativeTransform, ...]
    to_float: bool
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    after_float: tuple[NativeTransform, ...]
    channels: int
    size: tuple[int, int]


def _steps(transform: Any) -> list[Any]:
    """The pipeline's steps, nested Compose flattened."""
    if isinstance(transform, (v2.Compose, Compose)) or type(transform) is torch.nn.Sequential:
        out: list[Any] = []
        container: Any = transform
        steps: Any = container.transforms if hasattr(container, "transforms") else list(container)
        for t in steps:
            out.extend(_steps(t))
        return out
    return [transform]


#: torchvision transforms that take any input (the rest treat theirs as an image).
_ANY_INPUT = ("Lambda", "Identity")
#: containers whose first step sees the input first
_SEQUENCES = ("Compose", "RandomApply", "Sequential")


def _first_steps(transform: Any) -> list | None:
    """The steps of a container transform that may see its input first (a pipeline's first;
    any of ``RandomChoice``'s), or ``None`` for a transform that is no container."""
    steps = list(transform) if isinstance(transform, torch.nn.Sequential) else getattr(transform, "transforms", None)
    if isinstance(steps, torch.nn.ModuleList):
        steps = list(steps)
    if not isinstance(steps, (list, tuple)):
        return None
    return list(steps[:1]) if type(transform).__name__ in _SEQUENCES else list(steps)


def input_kind(transform: Any) -> str:
    """What ``transform`` takes, as far as its type tells -- the one place that decides it:

    * ``"encoded"``: a file's bytes (fastprep's decode transforms, :class:`OnDecoded`,
      ``make_loader``'s default transform, and pipelines starting with one);
    * ``"decoded"``: an image (torchvision's transforms, v1 and v2, and fastprep's kernel
      transforms ``RandomMask``/``ConvertColor``/``Scale``, and pipelines starting with one);
    * ``"unknown"``: a function, a ``Lambda``, an empty pipeline, anything else.
    """
    steps = _first_steps(transform)
    if steps is not None:
        kinds = {input_kind(step) for step in steps}
        if "decoded" in kinds:
            return "decoded"
        return kinds.pop() if len(kinds) == 1 else "unknown"
    if is_decode_transform(transform) or callable(getattr(transform, "decoded_equivalent", None)):
        return "encoded"
    cls = type(transform)
    if cls.__module__.startswith("fastprep.transforms"):
        return "decoded"  # the kernel transforms (the decode transforms are handled above)
    if cls.__module__.startswith("torchvision.transforms") and cls.__name__ not in _ANY_INPUT:
        return "decoded"
    return "unknown"


def output_dtype(transform: Any) -> torch.dtype:
    """The dtype of the images a pipeline returns, read from its steps: float32 after its last
    float conversion (``ToDtype``/``ConvertImageDtype`` to a float type, fastprep's
    ``ConvertColor``/``Scale``), uint8 otherwise (the decoded image's)."""
    views = getattr(transform, "view_transforms", None)
    if callable(views):  # MultiView: every view's, which must agree
        dtypes = {output_dtype(v) for v in views()}
        if len(dtypes) > 1:
            raise ValueError(f"MultiView's views must all return one dtype (the loader converts every view alike), "
                             f"got {sorted(str(d) for d in dtypes)}")
        return dtypes.pop()
    steps = _steps(transform.pipeline if isinstance(transform, OnDecoded) else transform)
    dtype = torch.uint8
    for step in steps:
        target = getattr(step, "dtype", None)
        if type(step).__name__ in ("ToDtype", "ConvertImageDtype") and isinstance(target, torch.dtype):
            dtype = target if target.is_floating_point else torch.uint8
        elif type(step).__name__ in ("ConvertColor", "Scale", "YUVScale", "MaskYUVScale"):
            dtype = torch.float32
    return dtype


def _interpolation(value: Any) -> str:
    """A v2 ``interpolation`` argument's name (``"bilinear"``, ``"nearest"``, ...)."""
    from torchvision.transforms.v2.functional._geometry import _check_interpolation

    return str(_check_interpolation(value).value)


def _geometry(steps: list[Any], decode_kwargs: dict) -> tuple[Any, int]:
    """The decode transform of the pipeline's leading v2 geometry and how many steps it took."""
    first = steps[0]
    second: Any = steps[1] if len(steps) > 1 else None
    kind = type(first)
    interpolation = "bilinear"
    if kind in (v2.RandomResizedCrop, v2.Resize):
        interpolation = _interpolation(first.interpolation)
        if interpolation not in INTERPOLATIONS:
            raise Unsupported(f"{kind.__name__}(interpolation={interpolation!r}): only {', '.join(INTERPOLATIONS)} "
                              "resizing is native")
        decode_kwargs = dict(decode_kwargs, interpolation=interpolation)
    if kind is v2.RandomResizedCrop:
        flip = 0.0
        taken = 1
        # A flip right after the crop is fused into the resize; with p=0 v2 still draws, so not then.
        if type(second) is v2.RandomHorizontalFlip and second.p > 0:
            flip, taken = float(second.p), 2
        return DecodeRandomResizedCrop(first.size, scale=first.scale, ratio=first.ratio, antialias=first.antialias,
                                       dct_scaling=False, flip_p=flip, **decode_kwargs), taken
    if kind is v2.Resize:
        size = list(first.size)
        if type(second) is v2.CenterCrop:
            if first.max_size is not None:
                raise Unsupported("Resize(max_size=...) followed by CenterCrop is not native")
            resize = size[0] if len(size) == 1 else tuple(size)
            return DecodeResizeCenterCrop(resize, second.size, antialias=first.antialias, dct_scaling=False,
                                          **decode_kwargs), 2
        if len(size) != 2:
            raise Unsupported(f"Resize({size[0]}) alone gives every image its own size, and a batch needs one: "
                              "add a CenterCrop, or resize to (height, width)")
        return DecodeResize(tuple(size), antialias=first.antialias, dct_scaling=False, **decode_kwargs), 1
    if kind is v2.CenterCrop:
        return DecodeCenterCrop(first.size, **decode_kwargs), 1
    if kind is v2.RandomCrop:
        if first.padding_mode != "constant" or not isinstance(first.fill, int):
            raise Unsupported(f"RandomCrop(padding_mode={first.padding_mode!r}, fill={first.fill!r}): only "
                              "constant padding with one integer fill is native")
        # v2 keeps its padding parsed as [left, right, top, bottom]; DecodeRandomCrop takes
        # torchvision's argument form, whose four values are (left, top, right, bottom).
        padding = None
        if first.padding is not None:
            left, right, top, bottom = first.padding
            padding = (left, top, right, bottom)
        return DecodeRandomCrop(first.size, padding=padding, pad_if_needed=first.pad_if_needed,
                                fill=first.fill, **decode_kwargs), 1
    raise Unsupported(f"the pipeline starts with {kind.__name__}: the native engine needs a fixed output size "
                      "first (RandomResizedCrop, Resize + CenterCrop, Resize((h, w)), CenterCrop or RandomCrop)")


def _output_size(decode: Any) -> tuple[int, int]:
    size = decode.crop_size if isinstance(decode, DecodeResizeCenterCrop) else decode.size
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise Unsupported(f"{type(decode).__name__}(size={size!r}) gives every image its own size")
    return int(size[0]), int(size[1])


def _to_float(step: Any) -> bool:
    """Whether ``step`` is ``ToDtype(torch.float32, scale=True)``; Unsupported for other float
    conversions."""
    if type(step) is not v2.ToDtype:
        return False
    dtype = step.dtype
    if isinstance(dtype, dict):
        raise Unsupported("ToDtype with a dict of dtypes is not native")
    if dtype == torch.uint8:
        return False
    if dtype != torch.float32 or not step.scale:
        raise Unsupported(f"ToDtype({dtype}, scale={step.scale}): the native output conversion is "
                          "ToDtype(torch.float32, scale=True)")
    return True


def compile_pipeline(transform: Any, decode_kwargs: dict | None = None) -> CompiledPipeline:
    """The native form of ``transform``.

    Args:
        transform: a pipeline on encoded files (a fastprep decode transform first) or, wrapped
            in :class:`OnDecoded`, one on decoded images (v2 geometry first).
        decode_kwargs: ``max_pixels``/``strict``/``max_scans`` for the decode transform built
            from a v2 geometry (a fastprep decode transform keeps its own).

    Raises:
        Unsupported: a step has no exact native implementation; the message names it.
    """
    decode_kwargs = dict(decode_kwargs or {})
    if isinstance(transform, OnDecoded):
        steps = [s for s in _steps(transform.pipeline) if not isinstance(s, _NO_OPS)]
        if not steps:
            raise Unsupported("the pipeline has no geometry: the native engine needs a fixed output size first")
        decode_kwargs.setdefault("mode", transform.mode)
        decode, taken = _geometry(steps, decode_kwargs)
    else:
        steps = [s for s in _steps(transform) if not isinstance(s, _NO_OPS)]
        if not steps or not is_decode_transform(steps[0]):
            first = type(steps[0]).__name__ if steps else "nothing"
            raise Unsupported(f"the pipeline starts with {first}, not a fastprep decode transform (the native engine "
                              "runs pipelines that start with one, and torchvision pipelines on decoded images)")
        decode, taken = steps[0], 1
    rest = steps[taken:]
    mask = None
    if rest and type(rest[0]) is RandomMask:
        mask, rest = rest[0], rest[1:]
    size = _output_size(decode)
    augment: list[NativeTransform] = []
    after: list[NativeTransform] = []
    to_float, mean, std = False, None, None
    for step in rest:
        if type(step) is v2.ToDtype and step.dtype == torch.uint8 and not to_float:
            continue
        if not to_float and _to_float(step):
            to_float = True
            continue
        if to_float and type(step) is v2.Normalize and mean is None and not after:
            mean, std = tuple(float(m) for m in step.mean), tuple(float(s) for s in step.std)
            continue
        if type(step) is v2.Normalize:
            raise Unsupported("Normalize must follow ToDtype(torch.float32, scale=True) to run natively")
        native = to_native(step)
        if to_float:
            if native.stage == "uint8":
                raise Unsupported(f"{type(step).__name__} after ToDtype works on float images; natively it runs "
                                  "on uint8 images only (put it before ToDtype)")
            after.append(native)
        else:
            if native.stage == "float":
                raise Unsupported(f"{type(step).__name__} runs natively after ToDtype(torch.float32) only")
            augment.append(native)
    for native in (*augment, *after):
        native.check_size(*size)
    channels = _channels(decode, augment)
    if mean is not None and std is not None and not (len(mean) in (1, channels) and len(std) in (1, channels)):
        raise Unsupported(f"Normalize has {len(mean)} means for {channels} channels")
    return CompiledPipeline(decode, mask, tuple(augment), to_float, mean, std, tuple(after), channels, size)


def _channels(decode: Any, augment: Sequence[NativeTransform]) -> int:
    mode = str(getattr(decode, "mode", "RGB")).upper()
    channels = 1 if mode.endswith("GRAY") else 3
    for t in augment:
        out = getattr(t.transform, "num_output_channels", None)
        if type(t.transform) is v2.Grayscale and out is not None:
            channels = int(out)
    return channels
