"""PIL numerics for the native augmentations: one engine, two reference numerics.

A torchvision transform on a PIL image (v1 ops before ``ToTensor``, v2 ops before
``PILToTensor``) makes the same torch draws as on a tensor but computes with Pillow
(``ImageEnhance``, ``ImageOps``, ``convert``), whose arithmetic is not ATen's. fastprep runs
both with the same native sides (:class:`~fastprep.transforms._native.NativeTransform`: the
Python and C++ draws, the same parameters); only the kernels differ:

* every pixel kernel ``<name>`` that a transform may emit on PIL images has a **PIL twin**, a
  kernel registered in C++ like the others (``csrc/ops/pil_color.cpp``: ``pil_<name>``) that
  reads the same step fields and computes what Pillow computes;
* the twin is registered here with :func:`pil_twin`: its reference (the torchvision call on a
  PIL image that it reproduces) and the parameter sets of its probe; :func:`twin_reason` runs
  the probe at first use against the **installed** Pillow (probe images of 1 and 3 channels,
  tiny, thin and very wide, flat and noisy), since Pillow's rounding is not a standard;
* :func:`kernel_map_node` makes the program of a pipeline on PIL images start with a
  ``KernelMap`` node: from there on the Python draws (``Steps.emit``) and the C++ draws
  (``DrawContext::emit``) emit each kernel's twin. It refuses, with
  :class:`~fastprep.transforms._native.Unsupported` naming the transform, any kernel without a
  twin or whose twin's probe failed -- then the pipeline runs as written, on Pillow.

To add a PIL op (CONTRIBUTING.md, "The PIL-op variant"): the twin in ``csrc/ops/``, its
:func:`pil_twin` entry below, ``emits`` (or ``kernels()``) on the native side, and, for a v1
class whose draws are v2's, a ``pil_only=True`` registration of its native side.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import PIL
import PIL.Image
import torch
import torchvision.transforms.functional as F  # type: ignore[import-untyped, unused-ignore]

from ._native import NativeTransform, Steps, TorchDraws, kernel_id

__all__ = ["KernelMap", "PilTwin", "kernel_map_node", "pil_twin", "pil_twins", "twin_reason"]

#: ``reference(image, ints, floats)``: what torchvision computes on the PIL image for a step
#: of the kernel with these parameters.
Reference = Callable[[PIL.Image.Image, Sequence[int], Sequence[float]], PIL.Image.Image]


class PilTwin(NamedTuple):
    """The PIL twin of pixel kernel :attr:`kernel`.

    Attributes:
        kernel: the kernel the draws emit (its tensor numerics).
        twin: the kernel that runs instead on PIL images (Pillow's numerics).
        reference: the torchvision call it reproduces (:data:`Reference`).
        probes: ``(ints, floats)`` parameter sets of its probe (edge values included).
        channels: the channel counts it takes (1: an "L" image, 3: "RGB").
        min_side: the probe images it takes have sides of at least this (torchvision raises on
            smaller ones, as the compiler does: GaussianBlur's reflection padding).
    """

    kernel: str
    twin: str
    reference: Reference
    probes: tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]
    channels: tuple[int, ...] = (1, 3)
    min_side: int = 1


_TWINS: dict[str, PilTwin] = {}


def pil_twin(kernel: str, twin: str, probes: Sequence[tuple[Sequence[int], Sequence[float]]],
             channels: tuple[int, ...] = (1, 3), min_side: int = 1) -> Callable[[Reference], Reference]:
    """Decorator: register the decorated reference as the Pillow computation of ``twin``, the
    PIL twin of ``kernel``, probed with each ``(ints, floats)`` of ``probes``."""

    def register(reference: Reference) -> Reference:
        if kernel in _TWINS:
            raise ValueError(f"pixel kernel {kernel!r} already has a PIL twin: {_TWINS[kernel].twin!r}")
        entries = tuple((tuple(int(i) for i in ints), tuple(float(f) for f in floats)) for ints, floats in probes)
        _TWINS[kernel] = PilTwin(kernel, twin, reference, entries, channels, min_side)
        return reference

    return register


def pil_twins() -> dict[str, PilTwin]:
    """The registered PIL twins, by the kernel they stand in for."""
    return dict(_TWINS)


# ---------------------------------------------------------------------------------------
# The probe against the installed Pillow


def _probe_pixels(h: int, w: int, c: int, kind: int, seed: int) -> np.ndarray:
    """uint8 ``[h, w, c]`` probe pixels: 0 noise, 1 a gradient with noise, 2 two levels, 3 flat,
    4 grey (equal channels) noise."""
    rng = np.random.default_rng(seed)
    if kind == 0:
        return rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    if kind == 1:
        y, x = np.mgrid[0:h, 0:w]
        base = (x * 255 // max(w - 1, 1) + y * 61 // max(h - 1, 1)) % 256
        noise = rng.integers(0, 256, (h, w, c))
        return np.where(rng.random((h, w, 1)) < 0.7, base[..., None], noise).astype(np.uint8)
    if kind == 2:
        return np.where(rng.random((h, w, c)) < 0.5, 40, 200).astype(np.uint8)
    if kind == 3:
        return np.full((h, w, c), 77, dtype=np.uint8)
    return np.repeat(rng.integers(0, 256, (h, w, 1), dtype=np.uint8), c, axis=2)


#: ``(h, w, kind)``: odd, tiny (1x1, 1xN, Nx1, 2x2), very wide and tall, of each content kind.
_PROBE_SHAPES = ((37, 41, 0), (19, 23, 1), (9, 13, 2), (5, 7, 3), (21, 17, 4), (1, 1, 0), (1, 9, 1), (9, 1, 0),
                 (2, 2, 0), (3, 2000, 1), (300, 3, 0), (64, 67, 1))


def _mismatch(entry: PilTwin) -> str | None:
    for k, (h, w, kind) in enumerate(_PROBE_SHAPES):
        if min(h, w) < entry.min_side:
            continue
        for c in entry.channels:
            arr = _probe_pixels(h, w, c, kind, 1000 + k)
            image = PIL.Image.fromarray(arr[..., 0] if c == 1 else arr, "L" if c == 1 else "RGB")
            tensor = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
            for ints, floats in entry.probes:
                want = np.asarray(entry.reference(image, ints, floats))
                want = want.reshape(h, w, -1)
                got = torch.ops.fastprep.apply_pixel_kernel(tensor, entry.twin, list(ints), list(floats))
                if not np.array_equal(got.permute(1, 2, 0).numpy(), want):
                    return f"{entry.twin} of a {h}x{w}x{c} image with ints={list(ints)}, floats={list(floats)}"
    return None


@functools.cache
def twin_reason(kernel: str) -> str | None:
    """``None`` when pixel kernel ``kernel`` has a PIL twin that gives the installed Pillow's
    bits on every probe image and parameter set; otherwise why not. Computed once per process."""
    entry = _TWINS.get(kernel)
    if entry is None:
        return f"its kernel {kernel!r} has no PIL twin (Pillow's arithmetic is not reproduced for it)"
    try:
        bad = _mismatch(entry)
    except Exception as e:  # noqa: BLE001 -- a probe that cannot run proves nothing
        bad = f"the probe of {entry.twin} failed ({type(e).__name__}: {e})"
    if bad is None:
        return None
    return f"installed Pillow {PIL.__version__} computes otherwise than fastprep's PIL twin ({bad})"


# ---------------------------------------------------------------------------------------
# The kernel map a pipeline on PIL images starts with


class KernelMap(NativeTransform):
    """The first node of a program on PIL images: no draw; from there on every step runs its
    kernel's PIL twin (Python: ``Steps.kernel_map``; C++: ``DrawContext::set_kernel_map``).
    Its static ints are the ``(kernel id, twin id)`` pairs; an empty map (``KernelMap({})``)
    puts the kernels as drawn back (steps after the conversion to a tensor)."""

    draw_name = "KernelMap"
    emits = ()

    def __init__(self, mapping: dict[str, str]):
        super().__init__(None)
        self.mapping = dict(mapping)

    def params(self) -> tuple[list[int], list[float]]:
        ints: list[int] = []
        for kernel, twin in sorted(self.mapping.items()):
            ints.extend((kernel_id(kernel), kernel_id(twin)))
        return ints, []

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        steps.kernel_map = dict(self.mapping) or None

    def __repr__(self) -> str:
        return f"KernelMap({self.mapping!r})"


def kernel_map_node(natives: Sequence[NativeTransform]) -> KernelMap:
    """The :class:`KernelMap` that makes ``natives`` (a pipeline's augmentations on PIL images)
    run with Pillow's numerics.

    Raises:
        Unsupported: a transform may emit a kernel without a proven PIL twin (the message names
            the transform and the reason).
    """
    mapping: dict[str, str] = {}
    for native in natives:
        for kernel in sorted(native.kernels()):
            reason = twin_reason(kernel)
            if reason is not None:
                raise native.unsupported(f"on PIL images, {reason}")
            mapping[kernel] = _TWINS[kernel].twin
    return KernelMap(mapping)


# ---------------------------------------------------------------------------------------
# The twins: torchvision's functional on PIL images, as v1 and v2 call it


_FACTORS = ((), (0.0,)), ((), (1.0,)), ((), (0.37,)), ((), (0.8912,)), ((), (1.5,)), ((), (2.7,)), ((), (-0.3,))


@pil_twin("adjust_brightness", "pil_adjust_brightness", _FACTORS)
def _brightness(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.adjust_brightness(image, floats[0])


@pil_twin("adjust_contrast", "pil_adjust_contrast", _FACTORS)
def _contrast(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.adjust_contrast(image, floats[0])


@pil_twin("adjust_saturation", "pil_adjust_saturation", _FACTORS)
def _saturation(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.adjust_saturation(image, floats[0])


@pil_twin("adjust_sharpness", "pil_adjust_sharpness", _FACTORS[:-1])
def _sharpness(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.adjust_sharpness(image, floats[0])


@pil_twin("adjust_hue", "pil_adjust_hue",
          [((), (h,)) for h in (0.0, 0.5, -0.5, 0.1, -0.1, 0.0031, -0.0031, 0.25, -0.377, 0.4999)])
def _hue(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.adjust_hue(image, floats[0])


@pil_twin("rgb_to_grayscale", "pil_rgb_to_grayscale", [((1,), ()), ((3,), ())], channels=(3,))
def _grayscale(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.rgb_to_grayscale(image, ints[0])


@pil_twin("posterize", "pil_posterize", [((bits,), ()) for bits in range(1, 9)])  # bits=0: not on PIL
def _posterize(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.posterize(image, ints[0])


@pil_twin("solarize", "pil_solarize",
          [((1,), (float(t),)) for t in (0, 1, 128, 255, -5)] + [((0,), (t,)) for t in (0.5, 127.5, 200.0, 254.99)])
def _solarize(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    threshold: Any = int(floats[0]) if ints[0] else floats[0]
    return F.solarize(image, threshold)


@pil_twin("invert", "pil_invert", [((), ())])
def _invert(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.invert(image)


@pil_twin("autocontrast", "pil_autocontrast", [((), ())])
def _autocontrast(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.autocontrast(image)


@pil_twin("equalize", "pil_equalize", [((), ())])
def _equalize(image: PIL.Image.Image, ints: Sequence[int], floats: Sequence[float]) -> PIL.Image.Image:
    return F.equalize(image)
