"""The native side of torchvision v2 transforms: how fastprep's threads engine runs them.

Each supported torchvision class has one :class:`NativeTransform` subclass, registered with
:func:`native_transform` by the class it serves (exact types: a subclass may draw or compute
differently). It carries the transform's whole native side:

* :meth:`NativeTransform.params`: the transform's static parameters, read from the torchvision
  object (which the user builds as usual; nothing changes on their side), checked so that an
  unsupported parameter raises :class:`Unsupported` with the reason;
* :meth:`NativeTransform.draw`: its random draws, written with an explicit generator: exactly the
  torch RNG calls the v2 transform makes, in the same order, emitting the pixel steps the native
  kernels run (csrc/ops/pixel_kernel.h). The same draw is written once in C++
  (csrc/ops/native_draw.h, registered under :attr:`NativeTransform.draw_name`), which the
  batch planner runs without the GIL; tests compare the two and both with torchvision.

:func:`build_program` lays a list of native transforms out as the node tables the C++ planner
reads (csrc/ops/native_draw.h: NodeSpec), :func:`draw_steps` runs the Python draws.

The same native sides serve pipelines on PIL images, whose reference numerics are Pillow's:
there a program starts with a kernel map that makes every step run the kernel's *PIL twin*
(:mod:`fastprep.transforms._pil_ops`), and :func:`to_native` also accepts the classes
registered with ``pil_only=True`` (v1 classes, whose tensor arithmetic is not v2's).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
import torchvision.transforms as v1
from torchvision.transforms import v2

from .. import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from .._layout import as_bytes, struct_dtype

__all__ = [
    "NativeTransform",
    "Program",
    "Steps",
    "TorchDraws",
    "Unsupported",
    "V1ItemProbability",
    "build_program",
    "compiling_for_pil",
    "draw_steps",
    "f32_above",
    "f32_ceil",
    "kernel_id",
    "native_transform",
    "on_pil_images",
    "to_native",
]


class Unsupported(ValueError):
    """A transform, or one of its parameters, has no exact native implementation (the message
    names the transform and says why); the processes engine runs it instead."""


def f32(x: float) -> float:
    """``x`` rounded to float32, as torch rounds a Python float compared with a float32 tensor."""
    return float(np.float32(x))


def f32_ceil(x: float) -> float:
    """The least float32 ``>= x``: for a float32 ``r``, ``r < x`` (v1's ``torch.rand(1).item() < p``,
    compared in double) is ``r < f32_ceil(x)`` (the draws' float32 comparison)."""
    y = np.float32(x)
    return float(y if float(y) >= x else np.nextafter(y, np.float32(np.inf)))


def f32_above(x: float) -> float:
    """The least float32 ``> f32(x)``: for a float32 ``r``, ``r <= f32(x)`` (v1's ``p < torch.rand(1)``
    skips) is ``r < f32_above(x)``."""
    return float(np.nextafter(np.float32(x), np.float32(np.inf)))


class TorchDraws:
    """The torch draws of one sample on an explicit generator: each method makes the call of the
    torch function it names (what v2 makes on the default generator) and returns its value. The
    C++ twin is ``Draws`` in csrc/ops/native_draw.h."""

    def __init__(self, generator: torch.Generator | None):
        self.generator = generator  # None: the default generator (or what a torch function mode hands out)

    def uniform(self, low: float, high: float) -> float:
        """``float(torch.empty(1).uniform_(low, high))``."""
        return float(torch.empty(1).uniform_(low, high, generator=self.generator))

    def rand(self) -> float:
        """``torch.rand(1)`` (or ``torch.rand(())``), as a float."""
        return float(torch.rand(1, generator=self.generator))

    def randint(self, low: int, high: int) -> int:
        """``int(torch.randint(low, high, (1,)))`` (the same draw as ``torch.randint(high, ())``)."""
        return int(torch.randint(low, high, (1,), generator=self.generator))

    def randperm(self, n: int) -> list[int]:
        """``torch.randperm(n).tolist()``."""
        return torch.randperm(n, generator=self.generator).tolist()

    def multinomial(self, weights: Sequence[float]) -> int:
        """``int(torch.multinomial(torch.tensor(weights), 1))``."""
        return int(torch.multinomial(torch.tensor(list(weights)), 1, generator=self.generator))

    def normal(self, shape: Sequence[int]) -> torch.Tensor:
        """``torch.empty(shape, dtype=torch.float32).normal_()``."""
        return torch.empty(tuple(shape), dtype=torch.float32).normal_(generator=self.generator)


@functools.cache
def _kernel_ids() -> dict[str, int]:
    names = torch.ops.fastprep.pixel_kernel_names().split()
    return {name: k for k, name in enumerate(names)}


def kernel_id(name: str) -> int:
    """The id of pixel kernel ``name`` (csrc/ops/pixel_kernel.h)."""
    return _kernel_ids()[name]


@functools.cache
def _draw_ids() -> dict[str, int]:
    names = torch.ops.fastprep.node_draw_names().split()
    return {name: k for k, name in enumerate(names)}


class Steps:
    """The pixel steps a sample's draws emit, and the image they will see.

    Attributes:
        channels, height, width: the image the next step sees.
        items: ``(kernel name, ints, floats)`` per step, in order.
        extras: tensors steps refer to by index (RandomErasing's noise).
    """

    def __init__(self, channels: int, height: int, width: int):
        self.channels, self.height, self.width = channels, height, width
        self.items: list[tuple[str, tuple, tuple, int]] = []
        self.extras: list[torch.Tensor] = []
        #: how many of the items run on the uint8 image (the rest on the float image); ``None``: all
        self.num_uint8: int | None = None
        #: kernel name -> the name of the kernel that runs instead (a pipeline on PIL images:
        #: the PIL twins, set by its ``KernelMap`` node); ``None``: kernels as drawn
        self.kernel_map: dict[str, str] | None = None

    def emit(self, kernel: str, ints: Sequence[int] = (), floats: Sequence[float] = (), extra: int = -1) -> None:
        """Append a step of kernel ``kernel`` (or of its twin under :attr:`kernel_map`); ``extra``:
        the index of a tensor it needs (:meth:`keep`)."""
        if self.kernel_map is not None:
            if kernel not in self.kernel_map:
                raise RuntimeError(f"pixel kernel {kernel!r} has no twin in this program's kernel map")
            kernel = self.kernel_map[kernel]
        self.items.append((kernel, tuple(int(v) for v in ints), tuple(float(v) for v in floats), int(extra)))

    def keep(self, tensor: torch.Tensor) -> int:
        """Keep a tensor a step needs (RandomErasing's noise); returns its index for ``extra``."""
        self.extras.append(tensor)
        return len(self.extras) - 1

    def records(self) -> np.ndarray:
        """The steps as PixelStep records (csrc/ops/pixel_kernel.h)."""
        return np.frombuffer(pack_steps(self.items), dtype=struct_dtype("PixelStep"))


@functools.cache
def _step_packer() -> tuple[Any, int, int]:
    """A ``struct`` packing of PixelStep (kernel, extra, i[], f[]) and its counts of ints and
    floats, checked against the offsets the C++ side reports."""
    import struct

    dtype = struct_dtype("PixelStep")
    fields: Any = dtype.fields or {}
    ni, nf = dtype["i"].shape[0], dtype["f"].shape[0]
    packer = struct.Struct(f"<qq{ni}q{nf}d")
    offsets = [fields[name][1] for name in ("kernel", "extra", "i", "f")]
    if packer.size != dtype.itemsize or offsets != [0, 8, 16, 16 + 8 * ni]:
        raise RuntimeError(f"PixelStep's layout {dtype} is not {packer.format}")
    return packer, ni, nf


def pack_steps(items: Sequence[tuple]) -> bytearray:
    """``(kernel name, ints, floats, extra)`` per step as PixelStep records, the bytes the native
    ops take (unused ints and floats 0)."""
    packer, ni, nf = _step_packer()
    out = bytearray(packer.size * len(items))
    for k, (name, ints, floats, extra) in enumerate(items):
        packer.pack_into(out, k * packer.size, kernel_id(name), extra, *ints, *(0,) * (ni - len(ints)), *floats,
                         *(0.0,) * (nf - len(floats)))
    return out


class NativeTransform:
    """The native side of one torchvision transform class (see the module's docstring).

    Subclasses set :attr:`draw_name` (the C++ draw) and :attr:`stage`, and implement
    :meth:`params` and :meth:`draw`; containers also :meth:`children`.
    """

    #: The torchvision class served (set by :func:`native_transform`).
    source_type: ClassVar[type]
    #: The name of the C++ draw (csrc/ops/*.cpp: FP_REGISTER_NODE_DRAW).
    draw_name: ClassVar[str]
    #: ``"uint8"``: runs on the uint8 image (before ToDtype); ``"float"``: on the float32 image
    #: after ToDtype + Normalize; ``"any"``: on either (RandomErasing).
    stage: ClassVar[str] = "uint8"
    #: The pixel kernels its draw may emit (its children's aside), by name; ``None``:
    #: undeclared, which keeps the transform off PIL images (:meth:`kernels`).
    emits: ClassVar[tuple[str, ...] | None] = None
    #: Served on PIL images only (a v1 class: its tensor arithmetic is not v2's).
    pil_only: ClassVar[bool] = False

    def __init__(self, transform: Any):
        self.transform = transform

    def params(self) -> tuple[list[int], list[float]]:
        """The static ``(ints, floats)`` of the C++ node."""
        return [], []

    def children(self) -> list[NativeTransform]:
        """The native sides of the transforms this one contains (containers)."""
        return []

    def kernels(self) -> set[str]:
        """Every pixel kernel its draw, and its children's, may emit (what a pipeline on PIL
        images needs a PIL twin of).

        Raises:
            Unsupported: it does not declare them (:attr:`emits`).
        """
        if self.emits is None:
            raise self.unsupported("its native side does not declare the kernels it emits (NativeTransform.emits)")
        out = set(self.emits)
        for child in self.children():
            out |= child.kernels()
        return out

    def check_size(self, height: int, width: int) -> None:
        """Raise :class:`Unsupported` where torchvision raises for every image of this size
        (the pipeline's geometry fixes it before the augmentations); containers ask their children."""
        for child in self.children():
            child.check_size(height, width)

    def check_channels(self, channels: int) -> None:
        """Raise :class:`Unsupported` where torchvision raises for every applied call on images
        of ``channels`` channels (what the steps before it leave); containers ask their children."""
        for child in self.children():
            child.check_channels(channels)

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        """Make the transform's torch draws on ``draws`` and emit its steps into ``steps``."""
        raise NotImplementedError

    def unsupported(self, why: str) -> Unsupported:
        """An :class:`Unsupported` naming this transform."""
        return Unsupported(f"{type(self.transform).__name__}: {why}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transform!r})"


_REGISTRY: dict[type, type[NativeTransform]] = {}


_ON_PIL: contextvars.ContextVar[bool] = contextvars.ContextVar("fastprep_native_on_pil", default=False)


def native_transform(source_type: type, *, pil_only: bool = False):
    """Class decorator: register a :class:`NativeTransform` subclass as the native side of
    ``source_type`` (exactly that class, not its subclasses); ``pil_only``: only for pipelines
    on PIL images (:func:`on_pil_images`)."""

    def register(cls: type[NativeTransform]) -> type[NativeTransform]:
        if source_type in _REGISTRY:
            raise ValueError(f"{source_type.__name__} already has a native side: {_REGISTRY[source_type].__name__}")
        cls.source_type = source_type
        cls.pil_only = pil_only
        _REGISTRY[source_type] = cls
        return cls

    return register


def compiling_for_pil() -> bool:
    """Whether :func:`to_native` runs inside :func:`on_pil_images` (a native side whose
    parameters are refused on PIL images only checks it)."""
    return _ON_PIL.get()


@contextlib.contextmanager
def on_pil_images() -> Iterator[None]:
    """Within it, :func:`to_native` compiles for a pipeline on PIL images: it also accepts the
    classes registered with ``pil_only=True``."""
    token = _ON_PIL.set(True)
    try:
        yield
    finally:
        _ON_PIL.reset(token)


def to_native(transform: Any) -> NativeTransform:
    """The native side of ``transform``.

    Raises:
        Unsupported: the transform's class has no native side (or a subclass of one: it may
            draw or compute differently), or one of its parameters cannot be made exact.
    """
    cls = _REGISTRY.get(type(transform))
    if cls is None:
        served = [t for t in _REGISTRY if isinstance(transform, t)]
        if served:
            raise Unsupported(f"{type(transform).__name__} subclasses {served[0].__name__}, whose native side "
                              "may not match it; only the torchvision class itself runs natively")
        raise Unsupported(f"{type(transform).__name__} has no native implementation")
    if cls.pil_only and not _ON_PIL.get():
        raise Unsupported(f"{type(transform).__name__} runs natively on PIL images only (on tensors its arithmetic "
                          "is not v2's); use the torchvision v2 class")
    return cls(transform)


class Program(NamedTuple):
    """Native transforms laid out for the C++ planner: ``nodes`` (NodeSpec records, as bytes),
    the ``ints`` and ``floats`` pools, and how many leading nodes run in order (the rest are
    children, each parent's children contiguous and after it)."""

    nodes: torch.Tensor
    ints: torch.Tensor
    floats: torch.Tensor
    num_roots: int


def build_program(roots: Sequence[NativeTransform]) -> Program:
    """The node tables of ``roots`` (run in order) and all their descendants."""
    order: list[NativeTransform] = list(roots)
    first_child: list[int] = []
    k = 0
    while k < len(order):  # breadth first: each node's children placed together at the end
        kids = order[k].children()
        first_child.append(len(order))
        order.extend(kids)
        k += 1
    nodes = np.zeros(len(order), dtype=struct_dtype("NodeSpec"))
    ints: list[int] = []
    floats: list[float] = []
    draw_ids = _draw_ids()
    for k, t in enumerate(order):
        i, f = t.params()
        nodes[k]["draw"] = draw_ids[t.draw_name]
        nodes[k]["first_child"] = first_child[k]
        nodes[k]["num_children"] = len(t.children())
        nodes[k]["ints_at"], nodes[k]["num_ints"] = len(ints), len(i)
        nodes[k]["floats_at"], nodes[k]["num_floats"] = len(floats), len(f)
        ints.extend(int(v) for v in i)
        floats.extend(float(v) for v in f)
    return Program(as_bytes(nodes), torch.tensor(ints, dtype=torch.int64), torch.tensor(floats, dtype=torch.float64),
                   len(roots))


def draw_steps(roots: Sequence[NativeTransform], draws: TorchDraws, channels: int, height: int, width: int) -> Steps:
    """Run the Python draws of ``roots`` in order on an image of that shape."""
    steps = Steps(channels, height, width)
    for t in roots:
        t.draw(draws, steps)
    return steps


class RandomStep(NativeTransform):
    """A ``_RandomApplyTransform`` that is one kernel: ``torch.rand(1) >= p`` skips, else
    :attr:`kernel` runs with :meth:`kernel_params` (the transform's static parameters)."""

    kernel: str

    def kernels(self) -> set[str]:
        return {self.kernel}

    def probability(self) -> float:
        """The ``p`` the draws compare ``torch.rand(1)`` with, in float32 (v2: the transform's ``p``)."""
        return float(self.transform.p)

    def kernel_params(self) -> tuple[list[int], list[float]]:
        """The kernel's ``(ints, floats)``."""
        return [], []

    def params(self) -> tuple[list[int], list[float]]:
        ints, floats = self.kernel_params()
        return ints, [self.probability(), *floats]

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        if draws.rand() >= f32(self.probability()):
            return
        steps.emit(self.kernel, *self.kernel_params())


class V1ItemProbability:
    """Mixin for a v1 class that applies when ``torch.rand(1).item() < p`` (a double comparison):
    the draws' ``p`` is :func:`f32_ceil` of it, the same decision in float32."""

    transform: Any

    def probability(self) -> float:
        return f32_ceil(float(self.transform.p))


# ---------------------------------------------------------------------------------------
# Containers (v2.Compose is flattened by the compiler).


class _Container(NativeTransform):
    """A container of transforms; each child is compiled with :func:`to_native`."""

    emits = ()

    def __init__(self, transform: Any):
        super().__init__(transform)
        self._children = [to_native(t) for t in transform.transforms]

    def children(self) -> list[NativeTransform]:
        return self._children


@native_transform(v2.RandomApply)
class NativeRandomApply(_Container):
    """``v2.RandomApply(transforms, p)``: ``torch.rand(1) >= p`` skips, else every transform."""

    draw_name = "RandomApply"

    def probability(self) -> float:
        """The ``p`` the draw compares ``torch.rand(1)`` with, in float32."""
        return float(self.transform.p)

    def params(self) -> tuple[list[int], list[float]]:
        return [], [self.probability()]

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        if draws.rand() >= f32(self.probability()):
            return
        for t in self._children:
            t.draw(draws, steps)


@native_transform(v1.RandomApply, pil_only=True)
class NativeRandomApplyV1(NativeRandomApply):
    """v1 ``RandomApply(transforms, p)``: ``p < torch.rand(1)`` (float32) skips, so it applies when
    ``torch.rand(1) < f32_above(p)``. (v1's ``RandomChoice`` and ``RandomOrder`` draw from Python's
    ``random`` and are not native.)"""

    def probability(self) -> float:
        return f32_above(float(self.transform.p))


@native_transform(v2.RandomChoice)
class NativeRandomChoice(_Container):
    """``v2.RandomChoice(transforms, p)``: ``torch.multinomial(torch.tensor(p), 1)`` picks one."""

    draw_name = "RandomChoice"

    def params(self) -> tuple[list[int], list[float]]:
        return [], [float(p) for p in self.transform.p]

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        self._children[draws.multinomial(self.transform.p)].draw(draws, steps)


@native_transform(v2.RandomOrder)
class NativeRandomOrder(_Container):
    """``v2.RandomOrder(transforms)``: every transform, in the order of ``torch.randperm(n)``."""

    draw_name = "RandomOrder"

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        for k in draws.randperm(len(self._children)):
            self._children[k].draw(draws, steps)
