"""Native sides of v2's RandomAffine and RandomRotation (draws: csrc/ops/affine.cpp; kernels:
the ``affine`` and ``rotate90`` steps TrivialAugment's geometric ops use).

Each draws what ``make_params`` draws, in its order, and emits the step of ``affine_image`` /
``rotate_image``: the inverse matrix from torchvision's own ``_get_inverse_affine_matrix`` of
the arguments ``F.affine`` / ``F.rotate`` receive; ``rotate_image``'s shortcuts (no step for
0 degrees, ``torch.rot90`` for 180, and for 90 / 270 on square images) without a centre.
"""

from __future__ import annotations

from typing import Any

import torchvision.transforms as v1
from torchvision.transforms import v2

from ._native import NativeTransform, Steps, TorchDraws, native_transform
from ._native_auto import AffineArgs, affine_step, check_fill_channels, fill_params, grid_fill, rotate_steps


def _center(center: Any, steps: Steps) -> list[float]:
    """``center_f`` of affine_image / rotate_image: the centre relative to the image's middle."""
    return [(c - s * 0.5) for c, s in zip(center, [steps.width, steps.height])]


def _center_params(native: NativeTransform) -> tuple[int, list[float]]:
    center = native.transform.center
    if center is None:
        return 0, [0.0, 0.0]
    if len(center) != 2:
        raise native.unsupported(f"center={center!r}: two numbers (x, y) are native")
    return 1, [float(center[0]), float(center[1])]


@native_transform(v2.RandomAffine)
class NativeRandomAffine(NativeTransform):
    """``v2.RandomAffine``: angle, translation, scale and shear draws, then one ``affine`` step."""

    draw_name = "RandomAffine"
    emits = ("affine",)
    #: v1's class: F.affine's matrix as torchvision.transforms.functional computes it
    v1 = False

    def __init__(self, transform: Any):
        super().__init__(transform)
        self._fill = self._grid_fill()
        self._has_center, self._center = _center_params(self)

    def params(self) -> tuple[list[int], list[float]]:
        t = self.transform
        ints, floats = fill_params(self._fill)
        shear = list(t.shear) if t.shear is not None else []
        ints += [int(t.translate is not None), int(t.scale is not None), len(shear), self._has_center, int(self.v1)]
        floats += [float(t.degrees[0]), float(t.degrees[1])]
        floats += [float(v) for v in t.translate] if t.translate is not None else [0.0, 0.0]
        floats += [float(v) for v in t.scale] if t.scale is not None else [1.0, 1.0]
        floats += [float(v) for v in shear] + [0.0] * (4 - len(shear))
        return ints, floats + self._center

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

        t = self.transform
        angle = draws.uniform(t.degrees[0], t.degrees[1])
        translate = [0.0, 0.0]
        if t.translate is not None:
            max_dx, max_dy = float(t.translate[0] * steps.width), float(t.translate[1] * steps.height)
            translate = [float(int(round(draws.uniform(-max_dx, max_dx)))),
                         float(int(round(draws.uniform(-max_dy, max_dy))))]
        scale = draws.uniform(t.scale[0], t.scale[1]) if t.scale is not None else 1.0
        shear = [0.0, 0.0]
        if t.shear is not None:
            shear[0] = draws.uniform(t.shear[0], t.shear[1])
            if len(t.shear) == 4:
                shear[1] = draws.uniform(t.shear[2], t.shear[3])
        center = _center(t.center, steps) if t.center is not None else [0.0, 0.0]
        args = AffineArgs(angle=angle, translate=(translate[0], translate[1]), scale=scale, shear=(shear[0], shear[1]),
                          center=self._center if t.center is not None else None, v1=self.v1)
        affine_step(steps, _get_inverse_affine_matrix(center, angle, translate, scale, shear), self._fill, args)

    def _grid_fill(self) -> Any:
        return grid_fill(self)

    def check_channels(self, channels: int) -> None:
        check_fill_channels(self, self._fill, channels)


@native_transform(v2.RandomRotation)
class NativeRandomRotation(NativeTransform):
    """``v2.RandomRotation(expand=False)``: the angle draw, then ``rotate_image``'s steps."""

    draw_name = "RandomRotation"
    emits = ("affine", "rotate90")

    def __init__(self, transform: Any):
        super().__init__(transform)
        if transform.expand:
            raise self.unsupported("expand=True gives each image its own size, and a batch needs one")
        self._fill = self._grid_fill()
        self._has_center, self._center = _center_params(self)

    def params(self) -> tuple[list[int], list[float]]:
        ints, floats = fill_params(self._fill)
        degrees = self.transform.degrees
        return ints + [self._has_center], floats + [float(degrees[0]), float(degrees[1])] + self._center

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

        t = self.transform
        angle = draws.uniform(t.degrees[0], t.degrees[1])
        if t.center is None:
            rotate_steps(steps, angle, self._fill)
            return
        matrix = _get_inverse_affine_matrix(_center(t.center, steps), -(angle % 360), [0.0, 0.0], 1.0, [0.0, 0.0])
        affine_step(steps, matrix, self._fill, AffineArgs(rotate=True, angle=angle, center=self._center))

    def _grid_fill(self) -> Any:
        return grid_fill(self)

    def check_channels(self, channels: int) -> None:
        check_fill_channels(self, self._fill, channels)


@native_transform(v1.RandomAffine, pil_only=True)
class NativeRandomAffineV1(NativeRandomAffine):
    """v1 ``RandomAffine`` on PIL images: ``get_params`` makes v2's draws in v2's order; its
    ``fill`` (default 0) goes to ``F.affine`` as given, whose matrix is v1's."""

    v1 = True

    def _grid_fill(self) -> Any:
        return grid_fill(self, self.transform.fill, v1_fill=True)


@native_transform(v1.RandomRotation, pil_only=True)
class NativeRandomRotationV1(NativeRandomRotation):
    """v1 ``RandomRotation`` on PIL images: ``get_params`` makes v2's angle draw; its ``fill``
    (default 0) goes to ``F.rotate`` as given."""

    def _grid_fill(self) -> Any:
        return grid_fill(self, self.transform.fill, v1_fill=True)
