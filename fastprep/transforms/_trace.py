"""Tracing a user's transform on a stand-in image: what runs when the compiler cannot see in.

A transform the compiler does not know by type -- a user's class such as DINO's multi-crop
``DataAugmentationDINO``, whose ``__call__`` applies several ``Compose`` pipelines to the same
PIL image and returns a list, with its own small steps drawing from Python's ``random`` -- is
*traced* per sample: it is called, under the sample's seeds, on a :class:`LazyImage`, a
``PIL.Image.Image`` with the image's mode and size but no pixels, which records the Pillow
calls made on it instead of running them. The user's code runs for real, so its draws (torch,
Python ``random``, NumPy) are its own, in its own order; the result -- each view a
:class:`LazyTensor` -- is the sample's program, which an executor replays on the decoded pixels
(:mod:`fastprep.data.traced`).

What is recorded (everything else that needs pixel values raises :class:`PixelRead`, and the
sample then runs as written on the real image):

* ``Image`` methods: ``crop``, ``resize``, ``transpose``, ``filter`` (any ``ImageFilter``),
  ``point`` (a table, or a function expanded over the 256 levels as Pillow expands it),
  ``convert`` between ``"L"`` and ``"RGB"``, ``copy``; so ``ImageOps.solarize`` / ``posterize`` /
  ``invert`` (tables) and ``img.filter(ImageFilter.GaussianBlur(r))`` are recorded as such;
* torchvision's PIL functions (``torchvision.transforms._functional_pil``): the ``adjust_*``
  colour ops (``ColorJitter``), ``to_grayscale`` (``RandomGrayscale``), ``autocontrast``,
  ``equalize``, ``adjust_sharpness``, ``adjust_gamma``, ``pad`` (``invert``, ``posterize`` and ``solarize``
  reach ``ImageOps``, whose tables are recorded as ``point``): recorded as the call, replayed by
  calling the same function on the pixels (so an op whose result depends on the pixels, such
  as contrast's mean or equalize's histogram, is still exact);
* ``ToTensor`` / ``PILToTensor`` (``F.to_tensor`` / ``F.pil_to_tensor``), then ``Normalize``;
  v1 ``GaussianBlur`` on a PIL image (``F.gaussian_blur``, which computes on a tensor inside).

torchvision's functions are reached through their module attributes, which
:func:`install_hooks` wraps once per process: the wrapper records the call when given a
:class:`LazyImage` / :class:`LazyTensor` and calls the original otherwise (the same arguments,
the same result). Nothing is recorded outside a trace (no lazy image exists there).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

import PIL.Image
import torch

__all__ = ["LazyImage", "LazyTensor", "PixelRead", "enhanced", "install_hooks", "view_leaves"]


class PixelRead(Exception):
    """The traced code needs something a stand-in image cannot give (pixel values, an op that
    is not recorded); the message says what."""


_MODES = ("L", "RGB")
_SWAPS = (PIL.Image.Transpose.ROTATE_90, PIL.Image.Transpose.ROTATE_270, PIL.Image.Transpose.TRANSPOSE,
          PIL.Image.Transpose.TRANSVERSE)


class LazyImage(PIL.Image.Image):
    """A PIL image with a mode and a size and, instead of pixels, the chain of recorded ops
    that makes it from the traced sample's source image (``ops``: tuples ``(kind, ...)``)."""

    def __init__(self, mode: str, size: tuple[int, int], source: object, ops: tuple = ()) -> None:
        super().__init__()
        self._mode = mode
        self._size = (int(size[0]), int(size[1]))
        self.trace_source = source
        self.ops = ops

    # -- pixels: none here
    @property
    def im(self):
        raise PixelRead("the transform reads the image's pixels (its core image)")

    @im.setter
    def im(self, value) -> None:
        raise PixelRead("the transform replaces the image's pixels")

    @property
    def __array_interface__(self):
        raise PixelRead("the transform reads the image's pixels (a NumPy array of it)")

    def load(self):
        raise PixelRead("the transform reads the image's pixels (load())")

    def _then(self, op: tuple | None, mode: str | None = None, size: tuple | None = None) -> LazyImage:
        ops = self.ops if op is None else self.ops + (op,)
        return LazyImage(mode or self.mode, size or self.size, self.trace_source, ops)

    def _check_mode(self, what: str) -> None:
        if self.mode not in _MODES:
            raise PixelRead(f"{what} on a {self.mode!r} image is not recorded (L and RGB are)")

    # -- recorded methods
    def copy(self) -> LazyImage:
        return self._then(None)

    def crop(self, box=None) -> LazyImage:
        if box is None:
            return self.copy()
        x0, y0, x1, y1 = (int(round(v)) for v in box)  # Pillow's _crop rounding
        if x1 < x0 or y1 < y0:
            raise PixelRead(f"crop box {box!r} is inverted (Pillow raises)")
        return self._then(("crop", (x0, y0, x1, y1)), size=(x1 - x0, y1 - y0))

    def resize(self, size, resample=None, box=None, reducing_gap=None) -> LazyImage:
        self._check_mode("resize")
        w, h = (int(v) for v in size)
        if w < 1 or h < 1:
            raise PixelRead(f"resize to {size!r} (Pillow raises)")
        return self._then(("method", "resize", ((w, h),), {"resample": resample, "box": box,
                                                           "reducing_gap": reducing_gap}), size=(w, h))

    def transpose(self, method) -> LazyImage:
        self._check_mode("transpose")
        size = self.size[::-1] if method in _SWAPS else self.size
        return self._then(("method", "transpose", (method,), {}), size=size)

    def filter(self, filter) -> LazyImage:
        self._check_mode("filter")
        if callable(filter) and isinstance(filter, type):
            filter = filter()  # Pillow instantiates a filter class
        if not hasattr(filter, "filter"):
            raise PixelRead(f"filter {filter!r} is not an ImageFilter (Pillow raises)")
        return self._then(("method", "filter", (filter,), {}))

    def point(self, lut, mode=None) -> LazyImage:
        self._check_mode("point")
        if mode is not None:
            raise PixelRead("point(..., mode=...) is not recorded")
        bands = len(self.getbands())
        if callable(lut):  # Pillow: [lut(i) for i in range(256)] * bands, called now (its draws, if any)
            lut = [lut(i) for i in range(256)] * bands
        elif hasattr(lut, "point"):
            raise PixelRead("point() with an ImagePointHandler is not recorded")
        else:
            lut = list(lut)
        if len(lut) != 256 * bands:
            raise PixelRead(f"point() table of {len(lut)} values for {bands} bands (Pillow raises)")
        return self._then(("method", "point", (lut,), {}))

    def rotate(self, angle, resample=PIL.Image.Resampling.NEAREST, expand=False, center=None, translate=None,
               fillcolor=None) -> LazyImage:
        self._check_mode("rotate")
        if expand:
            raise PixelRead("rotate(expand=True) is not recorded")
        return self._then(("method", "rotate", (angle,), {"resample": resample, "expand": expand, "center": center,
                                                          "translate": translate, "fillcolor": fillcolor}))

    def transform(self, size, method, data=None, resample=PIL.Image.Resampling.NEAREST, fill=1,
                  fillcolor=None) -> LazyImage:
        self._check_mode("transform")
        if not isinstance(method, int):
            raise PixelRead(f"transform() with a {type(method).__name__} handler is not recorded")
        w, h = (int(v) for v in size)
        return self._then(("method", "transform", ((w, h), method, data), {"resample": resample, "fill": fill,
                                                                            "fillcolor": fillcolor}), size=(w, h))

    def convert(self, mode=None, matrix=None, dither=None, palette=PIL.Image.Palette.WEB,
                colors=256) -> LazyImage:
        self._check_mode("convert")
        if matrix is not None or dither is not None or mode not in (None, *_MODES):
            raise PixelRead(f"convert({mode!r}, matrix/dither) is not recorded")
        if mode is None or mode == self.mode:
            return self.copy()
        return self._then(("method", "convert", (mode,), {}), mode=mode)


#: tensor functions a :class:`LazyTensor` answers (its shape and dtype); any other raises
_TENSOR_QUERIES = frozenset([torch.Tensor.dim, torch.Tensor.size, torch.Tensor.is_floating_point, torch.Tensor.numel])


class LazyTensor(torch.Tensor):
    """The tensor ``ToTensor``/``PILToTensor`` (then v2 ``ToDtype(float32, scale=True)``, then
    ``Normalize``) makes of a :class:`LazyImage`: a ``torch.Tensor`` with its shape and dtype but
    no storage, holding the image (``image``), whether it is ``ToTensor``'s float ``x / 255``
    (``scaled``; ``multiplied``: v2 ``ToDtype``'s ``x * float32(1 / 255)`` instead) or
    ``PILToTensor``'s uint8, and the tensor steps after it (``steps``: ``("normalize", mean,
    std)``, ``("setitem", index, values)`` for ``tensor[index] = values``). Anything else done with it (any other torch
    function, a v2 transform on it) raises :class:`PixelRead`."""

    image: LazyImage
    scaled: bool
    steps: tuple
    multiplied: bool

    @staticmethod
    def __new__(cls, image: LazyImage, divide: bool, steps: tuple = (), multiplied: bool = False):
        shape = (len(image.getbands()), image.size[1], image.size[0])
        dtype = torch.float32 if divide else torch.uint8
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=torch.device("cpu"))

    def __init__(self, image: LazyImage, divide: bool, steps: tuple = (), multiplied: bool = False) -> None:
        self.image = image
        self.scaled = divide
        self.steps = steps
        self.multiplied = multiplied

    def then(self, step: tuple) -> LazyTensor:
        """This tensor with ``step`` appended to its tensor steps."""
        return LazyTensor(self.image, self.scaled, self.steps + (step,), self.multiplied)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__setitem__ and type(args[0]) is LazyTensor and len(args) == 3 \
                and isinstance(args[2], (torch.Tensor, int, float)) and not isinstance(args[2], LazyTensor):
            # an in-place write of values computed now (timm's RandomErasing: its noise drawn here)
            target, index, value = args
            if isinstance(value, torch.Tensor):
                with torch._C.DisableTorchFunctionSubclass():
                    value = value.detach().clone()
            target.steps = target.steps + (("setitem", index, value),)
            return None
        if func is torch.Tensor.clone and len(args) == 1 and not kwargs:  # v1/v2 erase copy first
            return LazyTensor(args[0].image, args[0].scaled, args[0].steps, args[0].multiplied)
        if func in _TENSOR_QUERIES or getattr(func, "__name__", "") == "__get__":
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        raise PixelRead(f"the transform computes on the tensor ({getattr(func, '__name__', func)}; only ToTensor/"
                        "PILToTensor then Normalize are recorded)")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise PixelRead(f"the transform computes on the tensor ({func})")

    def __repr__(self) -> str:  # type: ignore[override]
        return f"LazyTensor(shape={tuple(self.shape)}, dtype={self.dtype})"


def view_leaves(result: Any) -> tuple[list[LazyTensor], bool] | None:
    """The traced transform's output as ``(views, listed)``: one :class:`LazyTensor` (``listed``
    False) or a list/tuple of them; ``None`` for any other structure."""
    if isinstance(result, LazyTensor):
        return [result], False
    if isinstance(result, (list, tuple)) and result and all(isinstance(v, LazyTensor) for v in result):
        return list(result), True
    return None


# ---------------------------------------------------------------------------------------
# torchvision's PIL functions


def _same_image(img: LazyImage, *args, **kwargs) -> tuple[str, tuple[int, int]]:
    return img.mode, img.size


def _grayscale_shape(img: LazyImage, num_output_channels: int = 1, *args, **kwargs) -> tuple[str, tuple[int, int]]:
    if num_output_channels not in (1, 3):
        raise PixelRead(f"to_grayscale(num_output_channels={num_output_channels!r}) (torchvision raises)")
    return ("L" if num_output_channels == 1 else "RGB"), img.size


def _pad_shape(img: LazyImage, *args, **kwargs) -> tuple[str, tuple[int, int]]:
    """``F_pil.pad``'s output: ``padding`` an int or 1, 2 or 4 values (left, top, right, bottom)."""
    padding = kwargs["padding"] if "padding" in kwargs else args[0] if args else None
    if isinstance(padding, (list, tuple)) and len(padding) == 1:
        padding = padding[0]
    if type(padding) is int:
        left = top = right = bottom = padding
    elif isinstance(padding, (list, tuple)) and len(padding) in (2, 4) and all(type(v) is int for v in padding):
        left, top, right, bottom = (padding[0], padding[1]) * 2 if len(padding) == 2 else padding
    else:
        raise PixelRead(f"pad(padding={padding!r}) is not recorded")
    w, h = img.size[0] + left + right, img.size[1] + top + bottom
    if w < 1 or h < 1:
        raise PixelRead(f"pad(padding={padding!r}) of a {img.size} image")
    return img.mode, (w, h)


#: ``torchvision.transforms._functional_pil`` functions recorded as calls: name -> output mode and size
_PIL_CALLS: dict[str, Callable] = {
    "adjust_brightness": _same_image, "adjust_contrast": _same_image, "adjust_saturation": _same_image,
    "adjust_hue": _same_image, "adjust_gamma": _same_image, "adjust_sharpness": _same_image,
    "autocontrast": _same_image, "equalize": _same_image, "to_grayscale": _grayscale_shape, "pad": _pad_shape,
}


def _recording_pil_call(name: str, original: Callable) -> Callable:
    shape = _PIL_CALLS.get(name, _same_image)

    def call(img, *args, **kwargs):
        if type(img) is not LazyImage:
            return original(img, *args, **kwargs)
        img._check_mode(name)
        mode, size = shape(img, *args, **kwargs)
        return img._then(("call", original, args, kwargs), mode=mode, size=size)

    call.__wrapped__ = original  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = original.__doc__
    return call


def _recording_to_tensor(original: Callable, divide: bool) -> Callable:
    def to_tensor(pic, *args, **kwargs):
        if type(pic) is not LazyImage:
            return original(pic, *args, **kwargs)
        pic._check_mode(original.__name__)
        return LazyTensor(pic, divide)

    to_tensor.__wrapped__ = original  # type: ignore[attr-defined]
    to_tensor.__name__ = to_tensor.__qualname__ = original.__name__
    to_tensor.__doc__ = original.__doc__
    return to_tensor


def _recording_normalize(original: Callable) -> Callable:
    def normalize(tensor, mean, std, inplace=False):
        if type(tensor) is not LazyTensor:
            return original(tensor, mean, std, inplace)
        if not tensor.scaled:
            raise PixelRead("Normalize of a uint8 tensor (torchvision raises)")
        step = _normalize_step(mean, std, tensor.shape[0])
        if inplace:  # the same tensor changes (whoever holds it sees it)
            tensor.steps = tensor.steps + (step,)
            return tensor
        return tensor.then(step)

    normalize.__wrapped__ = original  # type: ignore[attr-defined]
    normalize.__name__ = normalize.__qualname__ = "normalize"
    normalize.__doc__ = original.__doc__
    return normalize


_normalize_steps: dict = {}


def _normalize_step(mean, std, channels: int) -> tuple:
    """``("normalize", mean [C, 1, 1], std [C, 1, 1])`` as torchvision makes them (float32
    ``as_tensor``), cached by value for lists and tuples (fewer torch calls per trace)."""
    key = None
    if isinstance(mean, (list, tuple)) and isinstance(std, (list, tuple)) \
            and all(type(v) in (int, float) for v in (*mean, *std)):
        key = (tuple(mean), tuple(std), channels)
        found = _normalize_steps.get(key)
        if found is not None:
            return found
    mean_t = torch.as_tensor(mean, dtype=torch.float32)
    std_t = torch.as_tensor(std, dtype=torch.float32)
    if mean_t.ndim != 1 or std_t.ndim != 1 or mean_t.numel() not in (1, channels) \
            or std_t.numel() not in (1, channels) or bool((std_t == 0).any()):
        raise PixelRead(f"Normalize(mean={mean!r}, std={std!r}) on {channels} channels is not recorded")
    step = ("normalize", mean_t.view(-1, 1, 1), std_t.view(-1, 1, 1))
    if key is not None and len(_normalize_steps) < 256:
        _normalize_steps[key] = step
    return step


def _lazy_to_dtype(tensor: LazyTensor, dtype: torch.dtype = torch.float, scale: bool = False) -> LazyTensor:
    """v2 ``to_dtype`` of a lazy tensor: ``PILToTensor``'s uint8 to float32 with ``scale``
    (``image.to(float32).mul_(1 / 255)``) is recorded; any other conversion is not."""
    if tensor.dtype == dtype:
        return tensor
    if dtype is torch.float32 and scale and tensor.dtype is torch.uint8 and not tensor.steps:
        return LazyTensor(tensor.image, True, (), multiplied=True)
    raise PixelRead(f"to_dtype({tensor.dtype} -> {dtype}, scale={scale}) is not recorded")


def _lazy_normalize(tensor: LazyTensor, mean, std, inplace: bool = False) -> LazyTensor:
    """v2 ``normalize`` of a lazy tensor: ``sub(mean).div_(std)`` in float32, as v1's."""
    if not tensor.scaled:
        raise PixelRead("normalize of a uint8 tensor (torchvision raises)")
    return tensor.then(_normalize_step(mean, std, tensor.shape[0]))


def _hook_v2(recording_pil_to_tensor: Callable, recording_pil_calls: dict) -> None:
    """v2's ``PILToTensor`` (its functional ``pil_to_tensor``, v1's function) records as v1's; v2's
    PIL kernels that are torchvision's PIL functions (registered at import, so not reached by the
    module's hooks) record as those do (``recording_pil_calls``: original -> recording); v2's
    ``to_dtype`` and ``normalize`` get kernels for lazy tensors (v2 dispatches on the input's type)."""
    import torchvision.transforms.v2.functional as F2  # type: ignore[import-untyped, unused-ignore]

    try:  # torchvision's private dispatch tables: without them v2 classes on PIL are not traced
        from torchvision.transforms.v2.functional import _type_conversion  # type: ignore[import-untyped, unused-ignore]
        from torchvision.transforms.v2.functional._utils import (  # type: ignore[import-untyped, unused-ignore]
            _KERNEL_REGISTRY,
            _register_kernel_internal,
        )
    except ImportError:
        return

    for kernels in _KERNEL_REGISTRY.values():
        found = kernels.get(PIL.Image.Image)
        if found is not None and found in recording_pil_calls:
            kernels[PIL.Image.Image] = recording_pil_calls[found]

    F2.pil_to_tensor = recording_pil_to_tensor
    _type_conversion.pil_to_tensor = recording_pil_to_tensor
    _register_kernel_internal(F2.to_dtype, LazyTensor)(_lazy_to_dtype)
    _register_kernel_internal(F2.normalize, LazyTensor)(_lazy_normalize)


def _recording_image_op(name: str, original: Callable) -> Callable:
    """A ``PIL.ImageOps`` function whose result depends on the pixels (a histogram), recorded as
    the call."""

    def call(image, *args, **kwargs):
        if type(image) is not LazyImage:
            return original(image, *args, **kwargs)
        image._check_mode(name)
        return image._then(("call", original, args, kwargs))

    call.__wrapped__ = original  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = name
    call.__doc__ = original.__doc__
    return call


#: ``PIL.ImageOps`` functions recorded as calls (the others reach ``point``/``transpose``/...)
_IMAGE_OPS = ("autocontrast", "equalize")
#: ``PIL.ImageEnhance`` classes: their degenerate image needs pixels (a mean, a blend)
_ENHANCERS = ("Color", "Contrast", "Brightness", "Sharpness")


def enhanced(image: PIL.Image.Image, enhancer: type, factor: float) -> PIL.Image.Image:
    """``enhancer(image).enhance(factor)``: the replay of a recorded ``ImageEnhance`` call."""
    return enhancer(image).enhance(factor)


def _hook_enhancers() -> None:
    """``ImageEnhance.<Enhancer>(lazy).enhance(f)`` records ``enhanced(img, Enhancer, f)``; with
    a real image the classes run as they are (their ``__init__`` and ``enhance`` wrapped)."""
    import PIL.ImageEnhance as E

    for name in _ENHANCERS:
        cls = getattr(E, name)
        original_init = getattr(cls.__init__, "__wrapped__", cls.__init__)

        def init(self, image, _original=original_init):
            if type(image) is LazyImage:
                image._check_mode(type(self).__name__)
                self.image = image
                return
            _original(self, image)

        init.__wrapped__ = original_init  # type: ignore[attr-defined]
        cls.__init__ = init
    original_enhance = getattr(E._Enhance.enhance, "__wrapped__", E._Enhance.enhance)

    def enhance(self, factor):
        if type(getattr(self, "image", None)) is LazyImage and not hasattr(self, "degenerate"):
            return self.image._then(("call", enhanced, (type(self), factor), {}))
        return original_enhance(self, factor)

    enhance.__wrapped__ = original_enhance  # type: ignore[attr-defined]
    E._Enhance.enhance = enhance  # type: ignore[method-assign]


_installed: list[bool] = []
_install_lock = threading.Lock()
_compose_hook = threading.local()


class composes_answered:
    """Within this block, on this thread, a torchvision ``Compose`` (v1 or v2) called on a
    :class:`LazyImage` alone first asks ``hook(compose, image)``: a tensor it returns is the
    call's result (the Compose is not run), ``None`` runs it as usual (recorded)."""

    def __init__(self, hook: Callable[[Any, LazyImage], Any]) -> None:
        self.hook = hook

    def __enter__(self) -> None:
        self.outer = getattr(_compose_hook, "hook", None)
        _compose_hook.hook = self.hook

    def __exit__(self, *exc) -> None:
        _compose_hook.hook = self.outer


def _answerable(original: Callable) -> Callable:
    def call(self, *args, **kwargs):
        hook = getattr(_compose_hook, "hook", None)
        if hook is not None and len(args) == 1 and not kwargs and type(args[0]) is LazyImage:
            answer = hook(self, args[0])
            if answer is not None:
                return answer
        return original(self, *args, **kwargs)

    call.__wrapped__ = original  # type: ignore[attr-defined]
    call.__name__ = getattr(original, "__name__", "call")
    call.__doc__ = getattr(original, "__doc__", None)
    return call


def _float32(value: float) -> float:
    """``value`` rounded to float32, as torch rounds a Python number compared with a float32
    tensor."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _hook_random_draws() -> None:
    """v1 ``RandomHorizontalFlip``, ``RandomVerticalFlip``, ``RandomApply``, ``RandomGrayscale``
    and ``RandomResizedCrop.get_params`` on a :class:`LazyImage` in a keyed trace: the same
    draws, made on the trace's generator explicitly with torch functions disabled (so the
    keyed trace's torch function mode does not see each tensor operation around them), the
    same comparisons in float32, the same calls after them."""
    import math

    import torchvision.transforms as v1
    import torchvision.transforms.functional as F

    from .._seeding import private_generator_for_draws

    def keyed(img) -> torch.Generator | None:
        return private_generator_for_draws() if type(img) is LazyImage else None

    def unwrap(fn):
        return getattr(fn, "__wrapped__", fn)

    def rand(gen: torch.Generator) -> float:
        with torch._C.DisableTorchFunction():
            return torch.rand(1, generator=gen).item()  # float32's value

    def flip(cls, op_name: str) -> None:
        original = unwrap(cls.forward)

        def forward(self, img):
            gen = keyed(img)
            if gen is None:
                return original(self, img)
            return getattr(F, op_name)(img) if rand(gen) < _float32(self.p) else img

        forward.__wrapped__ = original  # type: ignore[attr-defined]
        cls.forward = forward

    flip(v1.RandomHorizontalFlip, "hflip")
    flip(v1.RandomVerticalFlip, "vflip")

    apply = unwrap(v1.RandomApply.forward)

    def apply_forward(self, img):
        gen = keyed(img)
        if gen is None:
            return apply(self, img)
        if _float32(self.p) < rand(gen):  # torchvision: self.p < torch.rand(1)
            return img
        for t in self.transforms:
            img = t(img)
        return img

    apply_forward.__wrapped__ = apply  # type: ignore[attr-defined]
    v1.RandomApply.forward = apply_forward

    gray = unwrap(v1.RandomGrayscale.forward)

    def gray_forward(self, img):
        gen = keyed(img)
        if gen is None:
            return gray(self, img)
        channels, _, _ = F.get_dimensions(img)
        if rand(gen) < _float32(self.p):
            return F.rgb_to_grayscale(img, num_output_channels=channels)
        return img

    gray_forward.__wrapped__ = gray  # type: ignore[attr-defined]
    v1.RandomGrayscale.forward = gray_forward

    crop_params = unwrap(v1.RandomResizedCrop.get_params)

    def get_params(img, scale, ratio):
        gen = keyed(img)
        if gen is None:
            return crop_params(img, scale, ratio)
        _, height, width = F.get_dimensions(img)
        area = height * width
        with torch._C.DisableTorchFunction():
            log_ratio = torch.log(torch.tensor(ratio))
            low, high = float(log_ratio[0]), float(log_ratio[1])
            for _ in range(10):
                target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=gen).item()
                aspect_ratio = torch.exp(torch.empty(1).uniform_(low, high, generator=gen)).item()
                w = int(round(math.sqrt(target_area * aspect_ratio)))
                h = int(round(math.sqrt(target_area / aspect_ratio)))
                if 0 < w <= width and 0 < h <= height:
                    i = torch.randint(0, height - h + 1, size=(1,), generator=gen).item()
                    j = torch.randint(0, width - w + 1, size=(1,), generator=gen).item()
                    return i, j, h, w
        in_ratio = float(width) / float(height)  # ten misses: the central crop, as torchvision falls back
        if in_ratio < min(ratio):
            w, h = width, int(round(width / min(ratio)))
        elif in_ratio > max(ratio):
            w, h = int(round(height * max(ratio))), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    get_params.__wrapped__ = crop_params  # type: ignore[attr-defined]
    v1.RandomResizedCrop.get_params = staticmethod(get_params)


def _hook_color_jitter() -> None:
    """v1 ``ColorJitter.forward`` on a :class:`LazyImage`: the same draws (its own
    ``get_params``) and the same adjustments in the drawn order, the order read as a list
    instead of compared element by element as tensors (under a keyed trace every tensor
    operation passes through a torch function mode: those comparisons were a fifth of a
    DINO-style trace)."""
    import torchvision.transforms as v1
    import torchvision.transforms.functional as F

    from .._seeding import private_generator_for_draws

    original = getattr(v1.ColorJitter.forward, "__wrapped__", v1.ColorJitter.forward)

    own_params = v1.ColorJitter.get_params

    def draw(gen: torch.Generator, ranges) -> tuple:
        """``ColorJitter.get_params``'s draws on ``gen``: the order, then each factor."""
        with torch._C.DisableTorchFunction():
            order = torch.randperm(4, generator=gen).tolist()
            return (order, *(None if r is None else torch.empty(1).uniform_(r[0], r[1], generator=gen).item()
                             for r in ranges))

    def forward(self, img):
        if type(img) is not LazyImage:
            return original(self, img)
        gen = private_generator_for_draws() if type(self).get_params is own_params else None
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        fn_idx, brightness, contrast, saturation, hue = draw(gen, ranges) if gen is not None else \
            self.get_params(*ranges)
        for fn_id in (fn_idx if gen is not None else fn_idx.tolist()):
            if fn_id == 0 and brightness is not None:
                img = F.adjust_brightness(img, brightness)
            elif fn_id == 1 and contrast is not None:
                img = F.adjust_contrast(img, contrast)
            elif fn_id == 2 and saturation is not None:
                img = F.adjust_saturation(img, saturation)
            elif fn_id == 3 and hue is not None:
                img = F.adjust_hue(img, hue)
        return img

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    forward.__doc__ = original.__doc__
    v1.ColorJitter.forward = forward


def _hook_composes() -> None:
    import torchvision.transforms as v1
    from torchvision.transforms import v2

    v1.Compose.__call__ = _answerable(getattr(v1.Compose.__call__, "__wrapped__", v1.Compose.__call__))
    v2.Compose.forward = _answerable(getattr(v2.Compose.forward, "__wrapped__", v2.Compose.forward))


def install_hooks() -> None:
    """Wrap torchvision's PIL functions and ``to_tensor``/``pil_to_tensor``/``normalize`` so
    that they record calls on lazy images (once per process; see the module's docstring)."""
    with _install_lock:
        if _installed:
            return
        import torchvision.transforms._functional_pil as F_pil  # type: ignore[import-untyped, unused-ignore]
        import torchvision.transforms.functional as F  # type: ignore[import-untyped, unused-ignore]

        recording = {}
        for name in _PIL_CALLS:
            original = getattr(F_pil, name)
            original = getattr(original, "__wrapped__", original)
            recording[original] = _recording_pil_call(name, original)
            setattr(F_pil, name, recording[original])
        F.to_tensor = _recording_to_tensor(getattr(F.to_tensor, "__wrapped__", F.to_tensor), True)
        F.pil_to_tensor = _recording_to_tensor(getattr(F.pil_to_tensor, "__wrapped__", F.pil_to_tensor), False)
        _hook_v2(F.pil_to_tensor, recording)
        F.normalize = _recording_normalize(getattr(F.normalize, "__wrapped__", F.normalize))
        # v1 GaussianBlur on a PIL image goes through a tensor inside torchvision: the call is recorded
        blur = getattr(F.gaussian_blur, "__wrapped__", F.gaussian_blur)
        F.gaussian_blur = _recording_pil_call("gaussian_blur", blur)
        import PIL.ImageOps as ImageOps

        for name in _IMAGE_OPS:
            original = getattr(ImageOps, name)
            setattr(ImageOps, name, _recording_image_op(name, getattr(original, "__wrapped__", original)))
        _hook_enhancers()
        _hook_composes()
        _hook_color_jitter()
        _hook_random_draws()
        _installed.append(True)
