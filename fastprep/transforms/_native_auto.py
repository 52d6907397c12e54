"""Native sides of v2's AutoAugment, RandAugment and TrivialAugmentWide (C++ draws:
csrc/ops/auto_augment.cpp; the geometric ops' kernels: csrc/ops/affine.cpp).

Each draw makes the v2 transform's torch calls in its order (``torch.randint(len(space), ())``
for an op, the magnitude index, ``torch.rand(()) <= 0.5`` for the sign, AutoAugment's
``torch.rand(()) <= probability``) and emits the steps of
``_AutoAugmentBase._apply_image_or_video_transform``: the affine ops with their inverse matrix
computed by torchvision's own ``_get_inverse_affine_matrix`` from the arguments ``F.affine`` /
``F.rotate`` receive, the colour ops as their kernels, Identity as nothing.

The C++ node carries the magnitude tables, computed here by calling the transform's own
magnitude functions; AutoAugment's and RandAugment's translations depend on the image size
(``linspace(0, 150 / 331 * width, bins)``), which the C++ draw evaluates with ATen's linspace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torchvision.transforms as T1
from torchvision import tv_tensors
from torchvision.transforms import v2

from ._native import NativeTransform, Steps, TorchDraws, compiling_for_pil, f32, native_transform

# The transform ids, in the order of csrc/ops/auto_augment.cpp's Op.
_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
        "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert")
_COLOR_KERNELS = {"Brightness": "adjust_brightness", "Color": "adjust_saturation", "Contrast": "adjust_contrast",
                  "Sharpness": "adjust_sharpness"}
_PLAIN_KERNELS = {"AutoContrast": "autocontrast", "Equalize": "equalize", "Invert": "invert"}
#: the kernels each op may emit (the affine ops: ``affine``; Rotate also ``rotate90``)
_OP_KERNELS: dict[str, tuple[str, ...]] = {
    "Identity": (), "ShearX": ("affine",), "ShearY": ("affine",), "TranslateX": ("affine",),
    "TranslateY": ("affine",), "Rotate": ("affine", "rotate90"), "Posterize": ("posterize",),
    "Solarize": ("solarize",), **{op: (k,) for op, k in {**_COLOR_KERNELS, **_PLAIN_KERNELS}.items()}}

# Where an op's magnitudes come from (csrc/ops/auto_augment.cpp: Magnitudes).
_NO_MAGNITUDES, _TABLE, _WIDTH_LINSPACE, _HEIGHT_LINSPACE = 0, 1, 2, 3
# AutoAugment's and RandAugment's translations: torch.linspace(0.0, 150.0 / 331.0 * size, bins).
_TRANSLATE_COEFFICIENT = 150.0 / 331.0
_FILL_SLOTS = 4
# Image sizes the magnitude functions are evaluated at to tell a fixed table from a size-dependent one.
_PROBE_SIZES = ((224, 224), (97, 331), (331, 97), (500, 375))
_MagnitudeFn = Callable[[int, int, int], Any]


class _GridFill:
    """The interpolation (0 nearest, 1 bilinear, 2 bicubic: on PIL images only) and fill of the
    transform's affine steps."""

    def __init__(self, bilinear: int, values: tuple[float, ...] | None):
        self.bilinear, self.values = int(bilinear), values

    def ints(self) -> tuple[int, int, int]:
        return self.bilinear, int(self.values is not None), len(self.values or ())


#: the affine step's interpolation ids (csrc/ops/affine.cpp; bicubic: its PIL twin only)
_INTERPOLATION_IDS = {"nearest": 0, "bilinear": 1, "bicubic": 2}


def grid_fill(native: NativeTransform, fill_value: Any = None, *, v1_fill: bool = False) -> _GridFill:
    """The interpolation and fill of ``native.transform`` (an ``interpolation`` and a ``_fill``
    as v2 stores it; ``v1_fill``: ``fill_value``, the fill as a v1 class keeps it), or
    ``native.unsupported(why)``. On PIL images (:func:`compiling_for_pil`) bicubic is accepted
    and the fill is the one v2 looks up for PIL images."""
    import PIL.Image
    from torchvision.transforms.v2._utils import _get_fill
    from torchvision.transforms.v2.functional._geometry import _check_interpolation

    transform = native.transform
    on_pil = compiling_for_pil()
    interpolation = _check_interpolation(transform.interpolation).value
    allowed = ("nearest", "bilinear", "bicubic") if on_pil else ("nearest", "bilinear")
    if interpolation not in allowed:
        where = "PIL images" if on_pil else "tensors"
        raise native.unsupported(f"interpolation={interpolation!r}: affine ops on {where} take {', '.join(allowed)}")
    if v1_fill:
        fill = fill_value
    elif on_pil:
        fill = _get_fill(transform._fill, PIL.Image.Image)
    else:
        fills = [_get_fill(transform._fill, kind) for kind in (torch.Tensor, tv_tensors.Image)]
        if fills[0] != fills[1]:
            raise native.unsupported(f"fill={transform.fill!r} differs between plain tensors and tv_tensors.Image")
        fill = fills[0]
    values = None
    if fill is not None:
        values = tuple(float(v) for v in (fill if isinstance(fill, (list, tuple)) else [fill]))
    if values is not None and not 1 <= len(values) <= _FILL_SLOTS:
        raise native.unsupported(f"fill={fill!r}: 1 to {_FILL_SLOTS} values are native")
    if on_pil and values is not None and not all(math.isfinite(v) for v in values):
        raise native.unsupported(f"fill={fill!r}: Pillow's fill takes finite numbers")
    return _GridFill(_INTERPOLATION_IDS[interpolation], values)


def check_fill_channels(native: NativeTransform, fill: _GridFill, channels: int) -> None:
    """Unsupported where torchvision raises ValueError on every affine step: ``fill`` has neither
    1 value nor one per channel (the transform then runs as written, raising as torchvision does)."""
    count = len(fill.values or ())
    if count not in (0, 1, channels):
        raise native.unsupported(f"fill of {count} values on {channels}-channel images: torchvision raises "
                                 "ValueError on every affine step")


class AffineArgs(NamedTuple):
    """The arguments ``F.affine`` / ``F.rotate`` received, which the ``affine`` step carries
    besides its matrix (its PIL twin computes Pillow's matrix from them; csrc/ops/affine.h)."""

    rotate: bool = False
    angle: float = 0.0
    translate: tuple[float, float] = (0.0, 0.0)
    scale: float = 1.0
    shear: tuple[float, float] = (0.0, 0.0)
    center: Sequence[float] | None = None
    #: v1's F.affine (torchvision.transforms.functional): its matrix rounds otherwise on PIL images
    v1: bool = False


def fill_params(fill: _GridFill) -> tuple[list[int], list[float]]:
    """The fill's ints (bilinear, count) and its floats (4 slots) at the head of a node's pools."""
    values = list(fill.values or ())
    return [int(fill.bilinear), len(values)], values + [0.0] * (_FILL_SLOTS - len(values))


def affine_step(steps: Steps, matrix: Sequence[float], fill: _GridFill, args: AffineArgs) -> None:
    """The ``affine`` step of the inverse ``matrix`` (``_get_inverse_affine_matrix``'s of ``args``)."""
    _affine_step(steps, matrix, fill, args)


def rotate_steps(steps: Steps, angle: float, fill: _GridFill) -> None:
    """The steps of ``F.rotate(image, angle)`` (expand=False, center=None)."""
    _apply_rotate(steps, angle, fill)


def _affine_step(steps: Steps, matrix: Sequence[float], fill: _GridFill, args: AffineArgs) -> None:
    values = list(fill.values or ())
    center = [float(c) for c in args.center] if args.center is not None else [0.0, 0.0]
    kind = 1 if args.rotate else (2 if args.v1 else 0)  # csrc/ops/affine.h: AffineArgs::kind
    steps.emit("affine", ints=(*fill.ints(), int(args.center is not None), kind),
               floats=(*matrix, *values, *([0.0] * (_FILL_SLOTS - len(values))), args.angle, *args.translate,
                       args.scale, *args.shear, *center))


def _apply_affine(steps: Steps, fill: _GridFill, *, translate: Sequence[int], shear: Sequence[float],
                  center: Sequence[int] | None, v1: bool = False) -> None:
    """The step of ``F.affine(image, angle=0.0, translate, scale=1.0, shear, center)`` (affine_image)."""
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    center_f = [0.0, 0.0]
    if center is not None:
        center_f = [(float(c) - s * 0.5) for c, s in zip(center, [steps.width, steps.height])]
    translate_f = [float(t) for t in translate]
    args = AffineArgs(translate=(translate_f[0], translate_f[1]), shear=(float(shear[0]), float(shear[1])),
                      center=center, v1=v1)
    _affine_step(steps, _get_inverse_affine_matrix(center_f, 0.0, translate_f, 1.0, list(shear)), fill, args)


def _apply_rotate(steps: Steps, angle: float, fill: _GridFill) -> None:
    """The steps of ``F.rotate(image, angle)`` (rotate_image, expand=False, center=None)."""
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    args = AffineArgs(rotate=True, angle=float(angle))
    angle = angle % 360
    if angle == 0:
        return
    if angle == 180:
        steps.emit("rotate90", ints=(2,))
        return
    if steps.height == steps.width and angle in (90, 270):
        steps.emit("rotate90", ints=(1 if angle == 90 else 3,))
        return
    _affine_step(steps, _get_inverse_affine_matrix([0.0, 0.0], -angle, [0.0, 0.0], 1.0, [0.0, 0.0]), fill, args)


def _apply_op(steps: Steps, op: str, magnitude: float, fill: _GridFill, v1: bool = False) -> None:
    """The steps of ``_apply_image_or_video_transform(image, op, magnitude, ...)`` on a uint8 image
    (``v1``: of v1's ``_apply_op``, whose Solarize threshold is the magnitude itself)."""
    if op == "ShearX":
        _apply_affine(steps, fill, translate=[0, 0], shear=[math.degrees(math.atan(magnitude)), 0.0], center=[0, 0],
                      v1=v1)
    elif op == "ShearY":
        _apply_affine(steps, fill, translate=[0, 0], shear=[0.0, math.degrees(math.atan(magnitude))], center=[0, 0],
                      v1=v1)
    elif op == "TranslateX":
        _apply_affine(steps, fill, translate=[int(magnitude), 0], shear=[0.0, 0.0], center=None, v1=v1)
    elif op == "TranslateY":
        _apply_affine(steps, fill, translate=[0, int(magnitude)], shear=[0.0, 0.0], center=None, v1=v1)
    elif op == "Rotate":
        _apply_rotate(steps, magnitude, fill)
    elif op in _COLOR_KERNELS:
        steps.emit(_COLOR_KERNELS[op], floats=(1.0 + magnitude,))
    elif op == "Posterize":
        steps.emit("posterize", ints=(int(magnitude),))
    elif op == "Solarize":
        steps.emit("solarize", floats=(magnitude if v1 else 255 * magnitude,))
    elif op in _PLAIN_KERNELS:
        steps.emit(_PLAIN_KERNELS[op])


def _magnitude_source(fn: _MagnitudeFn, bins: int) -> tuple[int, list[float]]:
    """How the C++ draw gets an op's magnitudes: (kind, floats), or None when it cannot."""
    tables = [fn(bins, h, w) for h, w in _PROBE_SIZES]
    if tables[0] is None:
        return (_NO_MAGNITUDES, []) if all(t is None for t in tables) else (-1, [])
    if all(t is not None and torch.equal(t, tables[0]) for t in tables):
        return _TABLE, [float(v) for v in tables[0]]
    for kind, axis in ((_WIDTH_LINSPACE, 1), (_HEIGHT_LINSPACE, 0)):
        expected = [torch.linspace(0.0, _TRANSLATE_COEFFICIENT * size[axis], bins) for size in _PROBE_SIZES]
        if all(t is not None and torch.equal(t, e) for t, e in zip(tables, expected)):
            return kind, [_TRANSLATE_COEFFICIENT]
    return -1, []


class _NativeAutoAugmentBase(NativeTransform):
    """The parts the three auto-augments share: the fill, the interpolation, the augmentation
    space and its node layout (csrc/ops/auto_augment.cpp)."""

    def __init__(self, transform: Any):
        super().__init__(transform)
        self._fill = self._grid_fill()
        self._space: dict[str, tuple[_MagnitudeFn, bool]] = self._augmentation_space()
        unknown = [op for op in self._space if op not in _OPS]
        if unknown:
            raise self.unsupported(f"ops {unknown} have no native implementation")
        if self._bins() < 2:
            raise self.unsupported(f"num_magnitude_bins={self._bins()}: at least 2 are needed")
        self._sources = {op: _magnitude_source(fn, self._bins()) for op, (fn, _) in self._space.items()}
        odd = [op for op, (kind, _) in self._sources.items() if kind < 0]
        if odd:
            raise self.unsupported(f"the magnitudes of {odd} depend on the image size in a way the native draw "
                                   "does not reproduce")

    def _augmentation_space(self) -> dict[str, tuple[_MagnitudeFn, bool]]:
        return dict(self.transform._AUGMENTATION_SPACE)

    def _bins(self) -> int:
        return int(self.transform.num_magnitude_bins)

    def check_channels(self, channels: int) -> None:
        if self.kernels() & {"affine", "rotate90"}:
            check_fill_channels(self, self._fill, channels)

    def kernels(self) -> set[str]:
        out: set[str] = set()
        for op in self._space:
            out.update(_OP_KERNELS[op])
        return out

    def _grid_fill(self) -> _GridFill:
        return grid_fill(self)

    def _header(self) -> tuple[int, int]:
        return 0, 0

    def _tail(self) -> tuple[list[int], list[float]]:
        """The transform's own ints after the space, and floats after the fill."""
        return [], []

    def params(self) -> tuple[list[int], list[float]]:
        fill = self._fill
        tail_ints, tail_floats = self._tail()
        floats = list(fill.values or ()) + [0.0] * (_FILL_SLOTS - len(fill.values or ())) + tail_floats
        ints = [int(fill.bilinear), len(fill.values or ()), len(self._space), self._bins(), *self._header()]
        for op, (_, signed) in self._space.items():
            kind, values = self._sources[op]
            ints += [_OPS.index(op), int(signed), kind, len(floats) if values else 0]
            floats += values
        return ints + tail_ints, floats

    def _magnitude(self, draws: TorchDraws, steps: Steps, op: str, index: int | None) -> float:
        """``float(magnitudes[index])`` (``index`` None: ``torch.randint(bins, ())``) with the sign
        draw, or 0.0 for an op without magnitudes."""
        fn, signed = self._space[op]
        magnitudes = fn(self._bins(), steps.height, steps.width)
        if magnitudes is None:
            return 0.0
        magnitude = float(magnitudes[draws.randint(0, self._bins()) if index is None else index])
        if signed and draws.rand() <= 0.5:
            magnitude *= -1
        return magnitude

    def _random_op(self, draws: TorchDraws) -> str:
        """``_get_random_item``: ``keys[int(torch.randint(len(keys), ()))]``."""
        keys = tuple(self._space)
        return keys[draws.randint(0, len(keys))]


@native_transform(v2.TrivialAugmentWide)
class NativeTrivialAugmentWide(_NativeAutoAugmentBase):
    """``v2.TrivialAugmentWide``: one op, a random magnitude bin, the sign."""

    draw_name = "TrivialAugmentWide"

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        op = self._random_op(draws)
        magnitude = self._magnitude(draws, steps, op, None)
        _apply_op(steps, op, magnitude, self._fill)


@native_transform(v2.RandAugment)
class NativeRandAugment(_NativeAutoAugmentBase):
    """``v2.RandAugment``: ``num_ops`` random ops, each at the fixed magnitude bin, with the sign."""

    draw_name = "RandAugment"

    def __init__(self, transform: Any):
        super().__init__(transform)
        bins, index = self._bins(), transform.magnitude
        if not isinstance(index, int) or not -bins <= index < bins:
            raise self.unsupported(f"magnitude={index!r} does not index {bins} magnitude bins")
        self._index = index % bins

    def _header(self) -> tuple[int, int]:
        return int(self.transform.num_ops), self._index

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        for _ in range(self.transform.num_ops):
            op = self._random_op(draws)
            magnitude = self._magnitude(draws, steps, op, self._index)
            _apply_op(steps, op, magnitude, self._fill)


@native_transform(v2.AutoAugment)
class NativeAutoAugment(_NativeAutoAugmentBase):
    """``v2.AutoAugment(policy)``: a random sub-policy; each of its two ops applies when
    ``torch.rand(()) <= probability``, at its magnitude bin of 10, with the sign."""

    draw_name = "AutoAugment"
    _NUM_BINS = 10

    def __init__(self, transform: Any):
        super().__init__(transform)
        for policy in self._policy_list():
            for op, _, index in policy:
                if op not in self._space:
                    raise self.unsupported(f"the policy's op {op!r} is not in the augmentation space")
                if self._sources[op][0] != 0 and (not isinstance(index, int) or not 0 <= index < self._NUM_BINS):
                    raise self.unsupported(f"the policy's magnitude index {index!r} of {op} is out of range")
            if len(policy) != 2:
                raise self.unsupported(f"sub-policies of {len(policy)} ops: the native draw takes pairs")

    def _policy_list(self) -> list:
        return list(self.transform._policies)

    def _bins(self) -> int:
        return self._NUM_BINS

    def _header(self) -> tuple[int, int]:
        return len(self._policy_list()), 0

    def _tail(self) -> tuple[list[int], list[float]]:
        keys = list(self._space)
        ints: list[int] = []
        floats: list[float] = []
        for policy in self._policy_list():
            for op, probability, index in policy:
                ints += [keys.index(op), -1 if index is None else int(index)]
                floats.append(float(probability))
        return ints, floats

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        policies = self._policy_list()
        policy = policies[draws.randint(0, len(policies))]
        for op, probability, index in policy:
            if not draws.rand() <= f32(probability):
                continue
            magnitude = self._magnitude(draws, steps, op, index)
            _apply_op(steps, op, magnitude, self._fill)


# ---------------------------------------------------------------------------------------
# v1's classes (torchvision.transforms.autoaugment), native on PIL images: the same ops (v1's
# _apply_op), their own magnitude tables (Solarize from 255.0 down, the threshold itself) and
# their own sign draws (C++: the *V1 draws of csrc/ops/auto_augment.cpp).


class _V1Space:
    """A v1 transform's augmentation space in v2's form: per op, ``(fn(bins, height, width),
    signed)`` where ``fn`` gives the op's magnitude table, or ``None`` for v1's 0-d tensor."""

    def __init__(self, transform: Any, takes_size: bool):
        self.transform, self.takes_size = transform, takes_size

    def table(self, bins: int, height: int, width: int) -> dict[str, tuple[torch.Tensor, bool]]:
        space = self.transform._augmentation_space
        return space(bins, (height, width)) if self.takes_size else space(bins)

    def space(self) -> dict[str, tuple[_MagnitudeFn, bool]]:
        out: dict[str, tuple[_MagnitudeFn, bool]] = {}
        for op, (_, signed) in self.table(10, 224, 224).items():
            def fn(bins: int, height: int, width: int, op: str = op) -> Any:
                magnitudes = self.table(bins, height, width)[op][0]
                return magnitudes if magnitudes.ndim > 0 else None
            out[op] = (fn, bool(signed))
        return out


class _V1Base:
    """What v1's three classes share: the space read from ``_augmentation_space``, the fill as
    v1 keeps it, the sign ``torch.randint(2, (1,))``."""

    transform: Any
    _space: dict[str, tuple[_MagnitudeFn, bool]]
    _takes_size = True

    def _augmentation_space(self) -> dict[str, tuple[_MagnitudeFn, bool]]:
        return _V1Space(self.transform, self._takes_size).space()

    def _grid_fill(self) -> _GridFill:
        return grid_fill(self, self.transform.fill, v1_fill=True)  # type: ignore[arg-type]

    def _v1_magnitude(self, draws: TorchDraws, steps: Steps, op: str, index: int | None) -> tuple[float, bool]:
        """``(float(magnitudes[index]), signed)`` of ``op`` (``index`` None: the bin drawn with
        ``torch.randint``); 0.0 for an op without magnitudes. The caller draws the sign."""
        fn, signed = self._space[op]
        bins = self._bins()  # type: ignore[attr-defined]
        magnitudes = fn(bins, steps.height, steps.width)
        if magnitudes is None:
            return 0.0, signed
        return float(magnitudes[draws.randint(0, bins) if index is None else index]), signed


@native_transform(T1.TrivialAugmentWide, pil_only=True)
class NativeTrivialAugmentWideV1(_V1Base, NativeTrivialAugmentWide):
    """v1 ``TrivialAugmentWide`` on PIL images: op ``torch.randint(len(space), (1,))``, the
    magnitude bin, the sign ``torch.randint(2, (1,))`` (nonzero negates)."""

    draw_name = "TrivialAugmentWideV1"
    _takes_size = False

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        op = self._random_op(draws)
        magnitude, signed = self._v1_magnitude(draws, steps, op, None)
        if signed and draws.randint(0, 2) != 0:
            magnitude *= -1.0
        _apply_op(steps, op, magnitude, self._fill, v1=True)


@native_transform(T1.RandAugment, pil_only=True)
class NativeRandAugmentV1(_V1Base, NativeRandAugment):
    """v1 ``RandAugment`` on PIL images: ``num_ops`` times v1's op draw, the magnitude at the fixed
    bin, the sign ``torch.randint(2, (1,))``."""

    draw_name = "RandAugmentV1"

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        for _ in range(self.transform.num_ops):
            op = self._random_op(draws)
            magnitude, signed = self._v1_magnitude(draws, steps, op, self._index)
            if signed and draws.randint(0, 2) != 0:
                magnitude *= -1.0
            _apply_op(steps, op, magnitude, self._fill, v1=True)


@native_transform(T1.AutoAugment, pil_only=True)
class NativeAutoAugmentV1(_V1Base, NativeAutoAugment):
    """v1 ``AutoAugment`` on PIL images: ``get_params`` first (the sub-policy, ``torch.rand((2,))``,
    ``torch.randint(2, (2,))``); op ``j`` applies when ``probs[j] <= probability`` and is negated
    when ``signs[j] == 0``."""

    draw_name = "AutoAugmentV1"

    def _policy_list(self) -> list:
        return list(self.transform.policies)

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        policies = self._policy_list()
        policy = policies[draws.randint(0, len(policies))]
        probs = [draws.rand(), draws.rand()]
        signs = [draws.randint(0, 2), draws.randint(0, 2)]
        for j, (op, probability, index) in enumerate(policy):
            if not probs[j] <= f32(probability):
                continue
            magnitude, signed = self._v1_magnitude(draws, steps, op, index)
            if signed and signs[j] == 0:
                magnitude *= -1.0
            _apply_op(steps, op, magnitude, self._fill, v1=True)
