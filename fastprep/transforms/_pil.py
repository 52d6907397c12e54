"""Pipelines on PIL images: what ``torchvision.datasets.ImageFolder`` gives its transform.

Training scripts written for ``ImageFolder`` (pytorch/examples' ImageNet script, torchvision's
``references/classification/presets.py`` with ``backend="pil"``) run their transforms on the
image of ``Image.open(f).convert("RGB")`` (no EXIF rotation): v1 ops before ``ToTensor``, or
v2 ops before ``PILToTensor``. :class:`OnPIL` gives such a pipeline exactly that input, and is
what ``make_loader(transform=...)`` wraps it in (:func:`needs_pil` decides).

The threads engine runs the pipelines it knows natively with *PIL-exact* kernels: Pillow's
own arithmetic (its fixed-point resampling, ``torch.ops.fastprep.pil_resize``), over fastprep's
JPEG decode, which gives Pillow's ``convert("RGB")`` bits (the same libjpeg-turbo arithmetic).
Pillow's numerics are not a standard (Pillow-SIMD or another version may round otherwise), so
:func:`pil_exact_reason` proves both against the installed Pillow at first use; where they
differ the pipeline runs as written, on Pillow itself.
"""

from __future__ import annotations

import functools
import io as _io
import warnings
from typing import Any

import numpy as np
import PIL
import PIL.Image
import torch
import torchvision.transforms as T1  # type: ignore[import-untyped, unused-ignore]
from torchvision.transforms import v2  # type: ignore[import-untyped, unused-ignore]

from .. import _checks
from .. import io as fio
from ._decode import _encoded, _file_named

__all__ = ["PIL_FILTERS", "OnPIL", "needs_pil", "open_rgb", "pil_exact_reason", "pil_filter_id", "step_kind"]

#: Pillow's filters that ``torch.ops.fastprep.pil_resize`` reproduces, by its filter ids.
PIL_FILTERS = {
    PIL.Image.Resampling.BOX: 1,
    PIL.Image.Resampling.BILINEAR: 2,
    PIL.Image.Resampling.HAMMING: 3,
    PIL.Image.Resampling.BICUBIC: 4,
    PIL.Image.Resampling.LANCZOS: 5,
}

#: Steps that take a PIL image and make it a tensor (v1 ``ToTensor``/``PILToTensor``, v2's
#: deprecated ``ToTensor``): a pipeline holding one is written for PIL images.
_PIL_TO_TENSOR = (T1.ToTensor, T1.PILToTensor, v2.ToTensor)

#: Other libraries' steps that convert a PIL image exactly as a torchvision class does, by
#: ``(module, class name)`` (so that recognising them never imports the library): timm's
#: ``MaybeToTensor`` is ``F.to_tensor`` and ``MaybePILToTensor`` is ``F.pil_to_tensor`` on a
#: PIL image (both pass a tensor through, which a PIL pipeline never hands them).
_SAME_AS = {("timm.data.transforms", "MaybeToTensor"): T1.ToTensor,
            ("timm.data.transforms", "MaybePILToTensor"): T1.PILToTensor}


def step_kind(step: Any) -> type:
    """The class whose arithmetic ``step`` has: its own, or the torchvision class that another
    library's step reproduces exactly (:data:`_SAME_AS`)."""
    kind = type(step)
    return _SAME_AS.get((kind.__module__, kind.__qualname__), kind)


def _flat_steps(transform: Any) -> list[Any]:
    steps = getattr(transform, "transforms", None)
    if isinstance(transform, torch.nn.Sequential):
        steps = list(transform)
    if type(transform).__name__ == "Compose" and isinstance(steps, (list, tuple, torch.nn.ModuleList)):
        out: list[Any] = []
        for t in steps:
            out.extend(_flat_steps(t))
        return out
    return [transform]


def needs_pil(transform: Any) -> bool:
    """Whether ``transform`` is written for PIL images: it holds a v1 ``ToTensor`` or
    ``PILToTensor`` (or v2's ``ToTensor``, or timm's ``MaybeToTensor``/``MaybePILToTensor``),
    or a v2 ``PILToTensor`` after another step (the ``backend="pil"`` form of torchvision's
    reference presets). A pipeline that starts with
    v2's ``PILToTensor``/``ToImage`` takes a tensor as well and is not counted."""
    steps = _flat_steps(transform)
    for k, step in enumerate(steps):
        if step_kind(step) in _PIL_TO_TENSOR:
            return True
        if type(step) is v2.PILToTensor and k > 0:
            return True
    return False


def open_rgb(data: bytes, max_pixels: int) -> PIL.Image.Image:
    """``Image.open(f).convert("RGB")`` of encoded ``data`` (torchvision's ``default_loader``;
    no EXIF rotation), after checking its size against ``max_pixels`` (0: no limit).

    Raises:
        fastprep.io.DecodeError: data Pillow cannot identify, or too many pixels.
        OSError: Pillow's own decode errors (a truncated file).
    """
    with warnings.catch_warnings():
        # fastprep's max_pixels applies, not Pillow's global bomb threshold
        warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
        try:
            with PIL.Image.open(_io.BytesIO(data)) as im:
                if max_pixels and im.width * im.height > max_pixels:
                    raise fio.DecodeError(f"image of {im.height}x{im.width} = {im.width * im.height} pixels "
                                          f"exceeds max_pixels={max_pixels}")
                return im.convert("RGB")
        except PIL.Image.DecompressionBombError as e:
            raise fio.DecodeError(f"{e} (max_pixels={max_pixels})") from e
        except PIL.UnidentifiedImageError:
            raise fio.DecodeError(f"Pillow cannot identify the image data (first bytes {data[:8]!r})") from None


class OnPIL(v2.Transform):
    """Open the file as ``torchvision.datasets.ImageFolder`` does -- ``Image.open(f)
    .convert("RGB")``, no EXIF rotation -- then apply ``pipeline``, a pipeline on PIL images
    (v1 ops then ``ToTensor``/``Normalize``; v2 ops then ``PILToTensor``).

    What ``make_loader(transform=...)`` makes of such a pipeline (:func:`needs_pil`): the
    processes engine calls it per sample, and the threads engine compiles ``pipeline`` into
    PIL-exact native steps where it can (``docs/augment.md``, "Pipelines on PIL images").

    Args:
        pipeline: a callable on a PIL image.
        max_pixels: refuse images with more pixels (0: no limit).

    Output: whatever ``pipeline`` returns.
    """

    mode = "RGB"
    strict = False
    max_scans = None

    def __init__(self, pipeline: Any, *, max_pixels: int = fio.DEFAULT_MAX_PIXELS) -> None:
        super().__init__()
        if not callable(pipeline):
            raise TypeError(f"pipeline must be callable, got {type(pipeline).__name__}")
        self.pipeline = pipeline
        self.max_pixels = _checks.max_pixels(max_pixels)

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) != 1:
            raise TypeError(f"OnPIL takes one encoded image, got {len(inputs)} inputs")
        data, path = _encoded(inputs[0], type(self).__name__)
        with _file_named(path):
            image = open_rgb(data.numpy().tobytes(), self.max_pixels)
        return self.pipeline(image)

    def decoded_equivalent(self) -> Any:
        """The pipeline on a decoded ``[3, H, W]`` RGB tensor (the dataset's full decode of a
        non-JPEG file, which is Pillow's ``convert("RGB")``): given back as a PIL image."""
        return _FromTensor(self.pipeline)

    def extra_repr(self) -> str:
        return f"max_pixels={self.max_pixels}"


class _FromTensor:
    """``pipeline(Image.fromarray(rgb))`` of a uint8 ``[3, H, W]`` tensor (lossless)."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def __call__(self, image: torch.Tensor) -> Any:
        return self.pipeline(PIL.Image.fromarray(image.permute(1, 2, 0).contiguous().numpy(), "RGB"))


def pil_filter_id(interpolation: Any) -> int | None:
    """``torch.ops.fastprep.pil_resize``'s id of a torchvision ``interpolation`` (an
    ``InterpolationMode`` or a Pillow filter) on PIL images, ``None`` where it has none."""
    from torchvision.transforms.functional import InterpolationMode, pil_modes_mapping

    if isinstance(interpolation, str):  # v2 keeps the mode's value
        try:
            interpolation = InterpolationMode(interpolation)
        except ValueError:
            return None
    if isinstance(interpolation, InterpolationMode):
        interpolation = pil_modes_mapping.get(interpolation)
    try:
        return PIL_FILTERS.get(PIL.Image.Resampling(interpolation))
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------
# The proof against the installed Pillow


def _probe_image(h: int, w: int, c: int, seed: int) -> np.ndarray:
    """Random values over a smooth gradient (photo-like edges and flats), uint8 ``[h, w, c]``."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 97 // max(h - 1, 1)) % 256
    noise = rng.integers(0, 256, (h, w, c))
    img = np.where(rng.random((h, w, 1)) < 0.5, base[..., None], noise)
    return img.astype(np.uint8).reshape(h, w, c)


#: (input h, w) -> (output h, w): down, up, mixed, identity in one dimension, tiny, very wide
_PROBE_SIZES = (((37, 53), (20, 31)), ((11, 7), (29, 16)), ((40, 9), (40, 23)), ((3, 200), (5, 17)),
                ((64, 48), (64, 48)), ((1, 5), (2, 3)), ((40, 30), (20, 60)), ((60, 20), (15, 19)))


def _resample_mismatch() -> str | None:
    for k, ((h, w), (oh, ow)) in enumerate(_PROBE_SIZES):
        for c in (1, 3):
            arr = _probe_image(h, w, c, k)
            im = PIL.Image.fromarray(arr[..., 0] if c == 1 else arr, "L" if c == 1 else "RGB")
            t = torch.from_numpy(arr).permute(2, 0, 1)
            for flt, fid in PIL_FILTERS.items():
                want = np.asarray(im.resize((ow, oh), flt)).reshape(oh, ow, c)
                got = torch.ops.fastprep.pil_resize(t, [oh, ow], [0, 0, oh, ow], [h, w], [0, 0], fid, False)
                if not np.array_equal(got.permute(1, 2, 0).numpy(), want):
                    return f"resize({flt.name}) of {h}x{w}x{c} to {oh}x{ow}"
    return None


def _decode_mismatch() -> str | None:
    arr = _probe_image(21, 34, 3, 7)
    cases: tuple[tuple[str, dict[str, Any]], ...] = (
        ("RGB", {"subsampling": 2}), ("RGB", {"progressive": True}), ("L", {}), ("CMYK", {}))
    for mode, kwargs in cases:
        im = PIL.Image.fromarray(arr, "RGB").convert(mode)
        buf = _io.BytesIO()
        im.save(buf, "JPEG", quality=90, **kwargs)
        data = buf.getvalue()
        want = np.asarray(open_rgb(data, 0))
        got = fio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), "RGB")
        if not np.array_equal(got.permute(1, 2, 0).numpy(), want):
            return f"the JPEG decode of a {mode} {kwargs or 'baseline'} file"
    return None


@functools.cache
def pil_exact_reason() -> str | None:
    """``None`` when fastprep's PIL-exact kernels (resampling, JPEG decode to RGB) give the
    installed Pillow's bits on the probe images; otherwise why not (then the pipelines on PIL
    images run as written). Computed once per process."""
    try:
        bad = _resample_mismatch() or _decode_mismatch()
    except Exception as e:  # noqa: BLE001 -- a probe that cannot run proves nothing
        bad = f"the probe failed ({type(e).__name__}: {e})"
    if bad is None:
        return None
    return (f"installed Pillow {PIL.__version__} rounds differently from fastprep's PIL-exact kernels ({bad}): "
            "running your transforms as written")
