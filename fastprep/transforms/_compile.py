"""Compiling a transform pipeline for the native batch engine.

A pipeline the threads engine can run has three parts, in this order:

1. **The geometry**, which becomes one window decode: a fastprep decode transform (the
   pipeline takes the encoded file), or -- for a pipeline on decoded images -- torchvision v2's
   ``RandomResizedCrop`` (with a ``RandomHorizontalFlip`` right after it, the flip is fused into
   the resize), ``Resize`` + ``CenterCrop``, ``Resize`` to ``(h, w)``, ``CenterCrop`` or
   ``RandomCrop`` (v1 or v2, any padding mode, after ``Pad`` steps: :mod:`._compile_pad`): the
   equivalent decode transform with ``dct_scaling=False``, whose draws and pixels are
   torchvision's (optionally followed by fastprep's ``RandomMask``).
2. **Augmentations** on the uint8 image: v2 transforms with a native side
   (:func:`fastprep.transforms._native.to_native`).
3. **The output**: ``ToDtype(torch.float32, scale=True)`` or ``ConvertImageDtype(torch.float32)``
   (v2's, the same arithmetic; or v1's, ``x / 255`` where v2 multiplies by ``1 / 255``: another
   float32 rounding) (+ ``Normalize``, v1's or v2's: both ``sub(mean).div_(std)``), fused into the
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
import torchvision.transforms as v1
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
    _pil_geometry_ops,
)
from ._compile_pad import image_type, image_type_after, padded_geometry
from ._compose import Compose
from ._decode import (
    DecodeCenterCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    OnDecoded,
    is_decode_transform,
)
from ._kernel_transforms import RandomMask
from ._native import NativeTransform, Unsupported, on_pil_images, to_native
from ._pil import OnPIL, needs_pil, pil_exact_reason, pil_filter_id
from ._pil_ops import KernelMap, kernel_map_node
from ._plan import INTERPOLATIONS

__all__ = ["CompiledPipeline", "compile_pil", "compile_pipeline", "input_kind", "output_dtype",
           "takes_pil_as_tensor"]

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
        pil_filter: a pipeline on PIL images (:class:`~fastprep.transforms._pil.OnPIL`): the
            resize is Pillow's, with this ``torch.ops.fastprep.pil_resize`` filter id (0: torch's).
        divide: the float conversion is v1's ``ToTensor`` (``x / 255``) rather than v2's
            ``ToDtype`` (``x * (1 / 255)``).
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
    pil_filter: int = 0
    divide: bool = False


def _steps(transform: Any) -> list[Any]:
    """The pipeline's steps, nested Compose flattened."""
    if isinstance(transform, (v2.Compose, v1.Compose, Compose)) or type(transform) is torch.nn.Sequential:
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
    * ``"pil"``: a PIL image, as ``ImageFolder`` gives it (:func:`~fastprep.transforms._pil.needs_pil`:
      a pipeline with v1's ``ToTensor``, or v2's ``PILToTensor`` after other steps);
    * ``"decoded"``: an image (torchvision's transforms, v1 and v2, and fastprep's kernel
      transforms ``RandomMask``/``ConvertColor``/``Scale``, and pipelines starting with one);
    * ``"unknown"``: a function, a ``Lambda``, an empty pipeline, anything else.
    """
    if needs_pil(transform):
        return "pil"
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
    float conversion (``ToDtype``/``ConvertImageDtype`` to a float type, ``ToTensor``, fastprep's
    ``ConvertColor``/``Scale``), uint8 otherwise (the decoded image's)."""
    views = getattr(transform, "view_transforms", None)
    if callable(views):  # MultiView: every view's, which must agree
        dtypes = {output_dtype(v) for v in views()}
        if len(dtypes) > 1:
            raise ValueError(f"MultiView's views must all return one dtype (the loader converts every view alike), "
                             f"got {sorted(str(d) for d in dtypes)}")
        return dtypes.pop()
    steps = _steps(transform.pipeline if isinstance(transform, (OnDecoded, OnPIL)) else transform)
    dtype = torch.uint8
    kind: type = torch.Tensor
    for step in steps:
        if type(step) in _DIVIDE:
            dtype = torch.float32
            continue
        target = getattr(step, "dtype", None)
        if type(step) is v2.ToDtype and isinstance(target, dict):
            try:
                target = _dtype_for(step, kind)
            except Unsupported:  # torchvision raises on the first sample
                target = None
        if type(step).__name__ in ("ToDtype", "ConvertImageDtype") and isinstance(target, torch.dtype):
            dtype = target if target.is_floating_point else torch.uint8
        elif type(step).__name__ in ("ConvertColor", "Scale", "YUVScale", "MaskYUVScale"):
            dtype = torch.float32
        kind = image_type_after(step, kind)
    return dtype


def _interpolation(value: Any) -> str:
    """A v2 ``interpolation`` argument's name (``"bilinear"``, ``"nearest"``, ...)."""
    from torchvision.transforms.v2.functional._geometry import _check_interpolation

    return str(_check_interpolation(value).value)


def _geometry(steps: list[Any], decode_kwargs: dict, image: type = torch.Tensor) -> tuple[Any, int]:
    """The decode transform of the pipeline's leading v2 geometry and how many steps it took
    (``image``: the type of image it receives, which picks a v2 fill dict's entry)."""
    padded = padded_geometry(steps, decode_kwargs, image)
    if padded is not None:  # Pad, RandomCrop, CenterCrop (v1 or v2)
        return padded
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
        if first.size is None or first.max_size is not None:
            raise Unsupported(f"Resize(size={first.size!r}, max_size={first.max_size!r}): the output size depends on "
                              "each image's aspect ratio (max_size caps the longer side); the native Resize takes a "
                              "shorter-side size + CenterCrop, or (height, width)")
        size = list(first.size)
        if type(second) is v2.CenterCrop:
            resize = size[0] if len(size) == 1 else tuple(size)
            return DecodeResizeCenterCrop(resize, second.size, antialias=first.antialias, dct_scaling=False,
                                          **decode_kwargs), 2
        if len(size) != 2:
            raise Unsupported(f"Resize({size[0]}) alone gives every image its own size, and a batch needs one: "
                              "add a CenterCrop, or resize to (height, width)")
        return DecodeResize(tuple(size), antialias=first.antialias, dct_scaling=False, **decode_kwargs), 1
    raise Unsupported(f"the pipeline starts with {kind.__name__}: the native engine needs a fixed output size "
                      "first (RandomResizedCrop, Resize + CenterCrop, Resize((h, w)), CenterCrop or RandomCrop)")


def _output_size(decode: Any) -> tuple[int, int]:
    size = decode.crop_size if isinstance(decode, DecodeResizeCenterCrop) else decode.size
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise Unsupported(f"{type(decode).__name__}(size={size!r}) gives every image its own size")
    return int(size[0]), int(size[1])


def _dtype_for(step: Any, kind: type) -> torch.dtype | None:
    """The dtype ``ToDtype`` converts an image of type ``kind`` to (``None``: unchanged), as
    torchvision looks it up: a ``torch.dtype`` applies to images; a dict by the input's exact
    type, else its ``"others"`` entry.

    Raises:
        Unsupported: the dict has no entry for the image (torchvision raises ``ValueError``).
    """
    dtype = step.dtype
    if not isinstance(dtype, dict):
        return dtype
    if kind in dtype:
        return dtype[kind]
    if "others" in dtype:
        return dtype["others"]
    raise Unsupported(f"ToDtype({dtype!r}) has no entry for {kind.__name__} images nor 'others' "
                      "(torchvision raises ValueError)")


def _resolve_dtypes(steps: list[Any]) -> list[Any]:
    """``steps`` with each ``ToDtype`` given a dict replaced by the ``ToDtype`` it is for the
    image at that point (dropped where it leaves the image unchanged); the image's type is
    followed through ``ToImage``/``ToPureTensor``."""
    kind: type = torch.Tensor
    out = []
    for step in steps:
        if type(step) is v2.ToDtype and isinstance(step.dtype, dict):
            dtype = _dtype_for(step, kind)
            if dtype is not None:
                out.append(v2.ToDtype(dtype, scale=step.scale))
            continue
        kind = image_type_after(step, kind)
        out.append(step)
    return out


#: the image conversions that end a native pipeline's uint8 part: -> divide (v1's x / 255)
_FLOAT_CONVERSIONS = {v2.ToDtype: False, v2.ConvertImageDtype: False, v1.ConvertImageDtype: True}
#: Normalize on a float image: v1's ``tensor.sub_(mean).div_(std)`` is v2's arithmetic
_NORMALIZE = (v2.Normalize, v1.Normalize)


def takes_pil_as_tensor(transform: Any) -> bool:
    """Whether ``transform``, given a PIL image, first converts it to a uint8 tensor of the same
    pixels (v2 ``ToImage`` or ``PILToTensor`` as its first step): on a JPEG decoded by
    fastprep (Pillow's ``convert("RGB")`` pixels) the rest of it then sees what it sees on the
    PIL image, so it can run as a pipeline on decoded images."""
    steps = _steps(transform)
    return bool(steps) and type(steps[0]) in (v2.ToImage, v2.PILToTensor)


def _to_float(step: Any) -> bool:
    """Whether ``step`` is ``ToDtype(torch.float32, scale=True)`` or ``ConvertImageDtype(torch.float32)``
    (v1 or v2); Unsupported for other float conversions."""
    if type(step) in (v2.ConvertImageDtype, v1.ConvertImageDtype):
        if step.dtype != torch.float32:
            raise Unsupported(f"{type(step).__name__}({step.dtype}): the native output conversions are to "
                              "torch.float32")
        return True
    if type(step) is not v2.ToDtype:
        return False
    dtype = step.dtype
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
    if isinstance(transform, OnPIL):
        return compile_pil(transform, decode_kwargs)
    if isinstance(transform, OnDecoded):
        every = _resolve_dtypes(_steps(transform.pipeline))
        steps = [s for s in every if not isinstance(s, _NO_OPS)]
        if not steps:
            raise Unsupported("the pipeline has no geometry: the native engine needs a fixed output size first")
        decode_kwargs.setdefault("mode", transform.mode)
        try:
            decode, taken = _geometry(steps, decode_kwargs, image_type(every[:every.index(steps[0])]))
        except Unsupported:
            raise
        except (ValueError, TypeError) as e:  # a value v2 takes that the decode transform refuses
            raise Unsupported(f"{type(steps[0]).__name__}: {e} (the native decode transform refuses it)") from e
    else:
        steps = [s for s in _resolve_dtypes(_steps(transform)) if not isinstance(s, _NO_OPS)]
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
    to_float, divide, mean, std = False, False, None, None
    for step in rest:
        if type(step) is v2.ToDtype and step.dtype == torch.uint8 and not to_float:
            continue
        if not to_float and _to_float(step):
            to_float, divide = True, _FLOAT_CONVERSIONS[type(step)]
            continue
        if to_float and type(step) in _NORMALIZE and mean is None and not after:
            mean, std = tuple(float(m) for m in step.mean), tuple(float(s) for s in step.std)
            continue
        if type(step) in _NORMALIZE:
            raise Unsupported("Normalize must follow ToDtype(torch.float32, scale=True) (or ConvertImageDtype) to run "
                              "natively")
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
    for native in after:
        native.check_channels(channels)
    if mean is not None and std is not None and not (len(mean) in (1, channels) and len(std) in (1, channels)):
        raise Unsupported(f"Normalize has {len(mean)} means for {channels} channels")
    return CompiledPipeline(decode, mask, tuple(augment), to_float, mean, std, tuple(after), channels, size,
                            divide=divide)


#: v2's Grayscale, and v1's (native on PIL images only)
_GRAYSCALE = (v2.Grayscale, v1.Grayscale)


def _channels(decode: Any, augment: Sequence[NativeTransform], is_pil: bool = False) -> int:
    """The channels of the uint8 augmentations' output; each is checked against what it receives
    (:meth:`NativeTransform.check_channels`); ``is_pil``: they run on PIL images."""
    mode = str(getattr(decode, "mode", "RGB")).upper()
    channels = 1 if mode.endswith("GRAY") else 3
    for t in augment:
        t.check_channels(channels)
        out = getattr(t.transform, "num_output_channels", None)
        if type(t.transform) in _GRAYSCALE and out is not None:
            if channels == 1 and out == 3 and is_pil:
                raise Unsupported("Grayscale(3) of a 1-channel PIL image is not native")
            channels = int(out)
        for inner in _descendants(t):
            if type(inner.transform) in _GRAYSCALE and inner.transform.num_output_channels != channels:
                raise Unsupported(f"{type(t.transform).__name__} holds Grayscale({inner.transform.num_output_channels})"
                                  f" on {channels}-channel images: the channel count would depend on the draw (a "
                                  "batch needs one)")
    return channels


def _descendants(native: NativeTransform) -> list[NativeTransform]:
    out = []
    for child in native.children():
        out.append(child)
        out.extend(_descendants(child))
    return out


# ---------------------------------------------------------------------------------------
# Pipelines on PIL images

#: v1 and v2 classes of one role on PIL images (their draws are the same torch calls)
_RESIZED_CROP = (v1.RandomResizedCrop, v2.RandomResizedCrop)
_RESIZE = (v1.Resize, v2.Resize)
_CENTER_CROP = (v1.CenterCrop, v2.CenterCrop)
_HFLIP = (v1.RandomHorizontalFlip, v2.RandomHorizontalFlip)
#: make the PIL image a uint8 tensor (no change to the pixels)
_PIL_NO_OPS = (v1.PILToTensor, v2.PILToTensor, v2.ToImage, v2.ToPureTensor, torch.nn.Identity, v2.Identity)
#: x / 255 in float32: v1 ToTensor (``img.to(float32).div(255)``), v2's deprecated ToTensor
_DIVIDE = (v1.ToTensor, v2.ToTensor)


def _pil_geometry(steps: list[Any], decode_kwargs: dict) -> tuple[Any, int, int]:
    """``(decode transform, steps taken, pil_filter)`` of the leading geometry of a pipeline on
    PIL images: Pillow resizes the crop itself (``F_pil.resized_crop``: crop, then resize),
    and ``Resize`` the whole image."""
    first: Any = steps[0]
    second: Any = steps[1] if len(steps) > 1 else None
    name = type(first).__name__
    fid = 0
    if isinstance(first, _RESIZED_CROP + _RESIZE):
        found = pil_filter_id(first.interpolation)
        if found is None:
            raise Unsupported(f"{name}(interpolation={first.interpolation!r}) on PIL images is not native (Pillow's "
                              "box, bilinear, hamming, bicubic and lanczos are)")
        fid = found
    if type(first) in _RESIZED_CROP:
        flip, taken = 0.0, 1
        if type(second) in _HFLIP and second.p > 0:  # fused; with p=0 the flip still draws, so not then
            flip, taken = float(second.p), 2
        size = tuple(first.size) if isinstance(first.size, (tuple, list)) else (first.size, first.size)
        return DecodeRandomResizedCrop(size, scale=tuple(first.scale), ratio=tuple(first.ratio), antialias=True,
                                       dct_scaling=False, flip_p=flip, **decode_kwargs), taken, fid
    if type(first) in _RESIZE:
        # the window decode reads bilinear's support around the output window: enough for
        # filters of support <= 1 (box, bilinear, hamming)
        if fid not in (1, 2, 3):
            raise Unsupported(f"{name}(interpolation={first.interpolation!r}) on PIL images: only box, bilinear "
                              "and hamming resizes of the whole image are native")
        if getattr(first, "max_size", None) is not None:
            raise Unsupported(f"{name}(max_size=...) on PIL images is not native")
        sizes = [first.size] if isinstance(first.size, int) else list(first.size)
        if type(second) in _CENTER_CROP:
            crop = tuple(second.size) if isinstance(second.size, (tuple, list)) else (second.size, second.size)
            resize = sizes[0] if len(sizes) == 1 else tuple(sizes)
            return DecodeResizeCenterCrop(resize, crop, antialias=True, dct_scaling=False, **decode_kwargs), 2, fid
        if len(sizes) != 2:
            raise Unsupported(f"{name}({sizes[0]}) alone gives every image its own size, and a batch needs one: "
                              "add a CenterCrop, or resize to (height, width)")
        return DecodeResize(tuple(sizes), antialias=True, dct_scaling=False, **decode_kwargs), 1, fid
    if type(first) in _CENTER_CROP:
        crop = tuple(first.size) if isinstance(first.size, (tuple, list)) else (first.size, first.size)
        return DecodeCenterCrop(crop, **decode_kwargs), 1, 0
    raise Unsupported(f"the PIL pipeline starts with {name}: natively it needs RandomResizedCrop, Resize + "
                      "CenterCrop, Resize((h, w)) or CenterCrop first")


#: what ends the steps on the PIL image: its conversion to a tensor (or a step on one)
_PIL_END = (*_PIL_NO_OPS, *_DIVIDE, v1.ConvertImageDtype, v2.ConvertImageDtype, v2.ToDtype, v1.Normalize,
            v2.Normalize)


def _pil_augment(rest: list[Any]) -> tuple[list[NativeTransform], list[Any]]:
    """The native sides of the steps on the PIL image after the geometry (v1 or v2 classes,
    run with Pillow's numerics), and the steps after them.

    Raises:
        Unsupported: a step has no native side (the message names it).
    """
    natives: list[NativeTransform] = []
    with on_pil_images():
        for k, step in enumerate(rest):
            if isinstance(step, _PIL_END):
                return natives, rest[k:]
            if type(step) in (v1.RandomChoice, v1.RandomOrder):
                raise Unsupported(f"v1 {type(step).__name__} draws from Python's random module, which the native draws "
                                  "do not reproduce (v2's draws from torch and is native)")
            native = to_native(step)
            if native.stage == "float":
                raise Unsupported(f"{type(step).__name__} runs natively on float tensors only, not on PIL images")
            natives.append(native)
    return natives, []


#: steps after the float conversion that change nothing on a float tensor
_FLOAT_NO_OPS = (v2.ToPureTensor, v2.Identity, torch.nn.Identity)


def _pil_output(rest: list[Any]) -> tuple[bool, bool, tuple | None, tuple | None, list[NativeTransform]]:
    """``(to_float, divide, mean, std, after)`` of the steps after the augmentations on the PIL
    image: the conversion to a tensor, to float and ``Normalize``, then the native sides of the
    transforms on the float tensor (``RandomErasing``: tensor numerics, as torchvision runs it
    there); Unsupported for anything else."""
    to_float, divide, mean, std = False, False, None, None
    after: list[NativeTransform] = []
    for step in rest:
        kind = type(step)
        if kind in _PIL_NO_OPS and not to_float:
            continue
        if kind in _DIVIDE or (kind is v1.ConvertImageDtype and step.dtype == torch.float32):
            if to_float:
                raise Unsupported(f"{kind.__name__} after the float conversion is not native")
            to_float = divide = True
            continue
        if kind is v2.ToDtype and not to_float and _to_float(step):
            to_float = True
            continue
        if kind in (v1.Normalize, v2.Normalize) and to_float and mean is None and not after:
            mean, std = tuple(float(m) for m in step.mean), tuple(float(s) for s in step.std)
            continue
        if to_float and kind in _FLOAT_NO_OPS:
            continue
        if to_float and not isinstance(step, v1.Normalize):
            with on_pil_images():  # v1's RandomErasing: native after a pipeline on PIL images
                native = to_native(step)
            if native.stage == "uint8":
                raise Unsupported(f"{kind.__name__} after ToDtype works on float images; natively it runs on uint8 "
                                  "images only")
            after.append(native)
            continue
        raise Unsupported(f"{kind.__name__} after the conversion to a tensor of a PIL pipeline is not native: the "
                          "PIL-exact steps are the geometry (RandomResizedCrop + RandomHorizontalFlip, Resize + "
                          "CenterCrop, CenterCrop), the augmentations on the PIL image (docs/augment.md), ToTensor "
                          "or PILToTensor + ToDtype/ConvertImageDtype, Normalize, and RandomErasing on the float "
                          "tensor")
    return to_float, divide, mean, std, after


def compile_pil(transform: OnPIL, decode_kwargs: dict | None = None) -> CompiledPipeline:
    """The native form of a pipeline on PIL images (:class:`OnPIL`): Pillow's resampling over
    fastprep's decode (Pillow's bits), the augmentations on the PIL image with Pillow's numerics
    (their native sides' draws, a :func:`~fastprep.transforms._pil_ops.kernel_map_node` first),
    fused with ``ToTensor`` and ``Normalize``.

    Raises:
        Unsupported: a step has no PIL-exact native side, or the installed Pillow does not
            give the kernels' bits (:func:`~fastprep.transforms._pil.pil_exact_reason`).
    """
    reason = pil_exact_reason()
    if reason is not None:
        raise Unsupported(reason)
    kwargs = {k: v for k, v in (decode_kwargs or {}).items() if k in ("max_pixels", "strict", "max_scans")}
    kwargs.setdefault("max_pixels", transform.max_pixels)
    # the geometry must see the PIL image: a conversion to a tensor before it would make it torch's
    steps = _steps(transform.pipeline)
    if not steps:
        raise Unsupported("the pipeline has no geometry: the native engine needs a fixed output size first")
    decode, taken, fid = _pil_geometry(steps, kwargs)
    natives, rest = _pil_augment(steps[taken:])
    to_float, divide, mean, std, after = _pil_output(rest)
    if not to_float:
        raise Unsupported("the PIL pipeline ends on a PIL image or a uint8 tensor: natively it must end with "
                          "ToTensor (or PILToTensor + ToDtype(torch.float32, scale=True))")
    size = _output_size(decode)
    augment: tuple[NativeTransform, ...] = ()
    channels = 3
    if natives:
        for native in natives:
            native.check_size(*size)
        channels = _channels(decode, natives, is_pil=True)
        augment = (kernel_map_node(natives), *natives)
    for native in after:
        native.check_size(*size)
        native.check_channels(channels)
    if mean is not None and std is not None and not (len(mean) in (1, channels) and len(std) in (1, channels)):
        raise Unsupported(f"Normalize has {len(mean)} means for {channels} channels")
    if after and augment:  # the float tensor's steps run their own kernels (tensor numerics)
        after = [KernelMap({}), *after]
    return CompiledPipeline(decode, None, augment, True, mean, std, tuple(after), channels, size, pil_filter=fid,
                            divide=divide)

