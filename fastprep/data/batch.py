"""Batch colour transforms ``[N, 3, H, W]`` on any device (the CPU path through
:mod:`fastprep.functional`)."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from .. import functional as F
from .._checks import float_dtype
from .._kernels.coeffs import YUV_COEFFS

__all__ = ["BatchCast", "BatchConvert", "BatchConvertColor", "BatchScale", "BatchYuvScale", "batch_rgb_to_yuv"]


def _check_batch(x, any_channels: bool = False) -> None:
    """``x`` is a batch ``[N, 3, H, W]`` (``any_channels``: ``[N, C, H, W]``, C in 1..4)."""
    want = "[N, C, H, W] (C 1 to 4)" if any_channels else "[N, 3, H, W]"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a tensor {want}, got {type(x).__name__}")
    if x.dim() != 4 or not (1 <= x.shape[1] <= 4 if any_channels else x.shape[1] == 3):
        raise ValueError(f"expected a tensor {want}, got shape {tuple(x.shape)}")


def _yuv_torch(x: torch.Tensor, gain: float | None) -> torch.Tensor:
    """YUV with plain elementwise torch ops (no matmul, so no TF32 on CUDA), float32."""
    x = x.float()
    r, g, b = x[:, 0], x[:, 1], x[:, 2]
    planes = [m0 * r + m1 * g + m2 * b + o for m0, m1, m2, o in YUV_COEFFS]
    out = torch.stack(planes, 1)
    if gain is not None:
        out = out / 255
    return out


def batch_rgb_to_yuv(x: torch.Tensor, scale: bool = False, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """RGB -> YUV (BT.601 full range, JFIF 1.02 section 7) of a batch, optionally ``/ 255``.

    Args:
        x: ``[N, 3, H, W]`` RGB, uint8 or float, on any device.
        scale: divide by 255 (for uint8 input: Y in [0, 1], U and V in [0.5/255, 255.5/255]).
        dtype: output dtype (float32, float16 or bfloat16); computed in float32 and cast.

    Returns:
        ``[N, 3, H, W]`` of ``dtype`` on ``x``'s device. On the CPU the Cython kernels of
        :mod:`fastprep.functional` run (threads per :func:`fastprep.functional.kernel_threads`;
        with ``scale`` the coefficients are pre-divided by 255, which agrees with
        ``yuv / 255`` to float32 rounding); elsewhere plain torch ops.
    """
    _check_batch(x)
    if x.device.type == "cpu":
        if x.dtype not in (torch.uint8, torch.float32):
            x = x.float()
        out = F.yuv_scale(x) if scale else F.rgb_to_yuv(x)
    else:
        out = _yuv_torch(x, 255.0 if scale else None)
    return out if dtype == torch.float32 else out.to(dtype)


def _check_num_threads(num_threads):
    return None if num_threads is None else F.kernel_threads(0, num_threads)


class _BufferPool:
    """Reusable float32 output buffers for the CPU path, with explicit ownership.

    A fresh 50 MB batch costs more in page faults (the kernel zero-fills every page of a
    new mmap) than the colour conversion itself: measured 0.36 of 0.44 CPU-ms per
    256x256 sample, hence the recycling.

    Ownership: each hand-out creates a *lease*, a new numpy view of the pooled array, and
    the returned tensor is built on the lease with ``torch.from_numpy``, so the tensor's
    storage -- shared by every view, slice or ``.numpy()`` of the batch -- owns the lease.
    The pool keeps only a weak reference to it: the buffer is handed out again only after
    the lease object has been destroyed, i.e. after the last tensor using that storage is
    gone. No reference count is read; if the interpreter frees the lease late (a reference
    cycle, a deferred free) the pool merely allocates a new buffer, it never hands out one
    that is still in use.
    """

    def __init__(self, size: int):
        self.size = size
        self._buffers: list[list] = []  # [pooled array, weak reference to its current lease or None]
        self._lock = threading.Lock()

    def get(self, shape) -> torch.Tensor:
        shape = tuple(shape)
        with self._lock:
            for entry in self._buffers:
                buf, lease = entry
                if buf.shape == shape and (lease is None or lease() is None):
                    view = buf.view()
                    entry[1] = weakref.ref(view)
                    return torch.from_numpy(view)
            buf = np.empty(shape, dtype=np.float32)
            view = buf.view()
            if self.size:
                if len(self._buffers) >= self.size:
                    # forget the oldest buffer; its lease, if alive, keeps its memory alive
                    self._buffers.pop(0)
                self._buffers.append([buf, weakref.ref(view)])
            return torch.from_numpy(view)

    def __getstate__(self):
        return {"size": self.size}

    def __setstate__(self, state):
        self.__init__(state["size"])


_COLORS = ("yuv", "rgb")


def _channel_values(values, name):
    """``mean``/``std`` as 3 values (a number, or one value, stands for every channel)."""
    if values is None:
        return None
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = (values,) * 3
    try:
        out = tuple(float(v) for v in values)
    except TypeError:
        raise TypeError(f"{name} must be a number or 3 numbers, got {values!r}") from None
    if len(out) == 1:
        out = out * 3
    if len(out) != 3:
        raise ValueError(f"{name} must have 3 values (one per channel) or one for all, got {len(out)}")
    return out


def channel_values(values: tuple[float, ...], channels: int, name: str) -> tuple[float, ...]:
    """BatchConvert's 3 ``mean``/``std`` values for a batch of ``channels`` channels: as they
    are for 3; for another count only when all three are equal (one value for every channel).

    Raises:
        ValueError: 3 different values for a batch of other than 3 channels.
    """
    if channels == 3:
        return values
    if len(set(values)) != 1:
        raise ValueError(f"{name} has 3 different values {values} for a {channels}-channel batch: give one value")
    return (values[0],) * channels


class BatchConvert(torch.nn.Module):
    """uint8 batch ``[N, 3, H, W]`` -> the float batch a model takes, in one step.

    ``out = (colour(x) / 255 - mean) / std`` per channel, cast to ``dtype``, optionally in
    channels-last memory format, where ``colour`` is the identity (``"rgb"``) or the JFIF
    RGB -> YUV transform (``"yuv"``). ``mean``/``std`` are on the [0, 1] scale, as
    torchvision's ``Normalize`` after ``ToDtype(float32, scale=True)``.

    Paths: on the CPU (uint8 or float32 input), ``"yuv"`` without ``mean``/``std`` and
    ``"rgb"`` are one pass of a compiled kernel over the batch
    (:func:`fastprep.functional.yuv_scale`, :func:`~fastprep.functional.scale` or
    :func:`~fastprep.functional.scale_normalize`, with ``/ 255``, ``- mean`` and ``/ std``
    folded into one multiply-add per channel: ``x * (1 / (255 std)) + (-mean / std)``) into
    a recycled float32 buffer. Otherwise plain elementwise torch ops on ``x``'s device
    with the same folding. Either agrees with the three-step formula to float32 rounding.
    Uint8 input gives, for ``"yuv"``, Y in [0, 1] and U, V in [0.5/255, 255.5/255] (not
    clamped); a pixel masked to 0 gives ``(0, 128/255, 128/255)``.

    Args:
        color: ``"yuv"`` (default) or ``"rgb"``.
        mean, std: 3 values (or one for all channels) on the [0, 1] scale, or ``None``.
        dtype: float32 (default), float16 or bfloat16 (computed in float32, cast once).
        scale: ``False``: colour only, no ``/ 255`` (``"yuv"`` without ``mean``/``std``:
            :class:`BatchConvertColor`).
        channels_last: return ``torch.channels_last`` memory format.
        num_threads: threads of the CPU kernel; ``None``: :func:`fastprep.functional.kernel_threads`.
        reuse_buffers: CPU, float32: recycle up to this many output buffers once no tensor
            uses them any more (a batch the caller still holds, or any view of it, is never
            overwritten; see ``docs/data.md``), sparing the page faults of a fresh
            allocation per batch. 0 disables.
        require_uint8: raise ``TypeError`` for a batch that is not uint8 (``make_loader``
            sets it: a float batch there means the per-sample transform already converted
            it, and it would be converted again).

    :class:`BatchYuvScale`, :class:`BatchScale` and :class:`BatchConvertColor` are this
    class with its arguments fixed, under the names of earlier releases.
    """

    _any_shape = False  # BatchScale: "rgb" without mean/std takes any shape

    def __init__(self, color: str = "yuv", mean=None, std=None, dtype: torch.dtype = torch.float32, *,
                 scale: bool = True, channels_last: bool = False, num_threads: int | None = None,
                 reuse_buffers: int = 3, require_uint8: bool = False):
        super().__init__()
        if color not in _COLORS:
            raise ValueError(f"color must be 'yuv' or 'rgb', got {color!r}")
        self.color = color
        self.mean = _channel_values(mean, "mean")
        self.std = _channel_values(std, "std")
        if (self.mean is None) != (self.std is None):
            raise ValueError("mean and std go together: pass both or neither")
        if self.std is not None and any(v == 0 for v in self.std):
            raise ValueError(f"std must be nonzero, got {self.std}")
        self.scale = bool(scale)
        if not self.scale and (self.mean is not None or color != "yuv"):
            raise ValueError("scale=False is the colour conversion alone: color='yuv' without mean/std")
        self.dtype = float_dtype(dtype)
        self.channels_last = bool(channels_last)
        self.require_uint8 = bool(require_uint8)
        self.num_threads = _check_num_threads(num_threads)
        self._pool = _BufferPool(int(reuse_buffers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W]`` uint8 (or float on the 0-255 scale) -> ``[N, 3, H, W]`` ``dtype``
        (``"rgb"``: ``[N, C, H, W]`` -> ``[N, C, H, W]``, C 1 to 4, e.g. after ``Grayscale(1)``)."""
        if self._any_shape:
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"expected a tensor, got {type(x).__name__}")
        else:
            _check_batch(x, any_channels=self.color == "rgb")
        if self.require_uint8 and x.dtype != torch.uint8:
            raise TypeError(f"make_loader's per-sample transform must output uint8 images [3, H, W]; got a batch "
                            f"of {x.dtype} {tuple(x.shape)}. Leave conversion and normalisation to the loader: "
                            "drop ToDtype/Normalize from the transform and pass make_loader(color=, mean=, std=, "
                            "dtype=)")
        if not self.scale:
            out = batch_rgb_to_yuv(x, scale=False)
        elif (x.device.type == "cpu" and x.dtype in (torch.uint8, torch.float32)
              and (self.color == "rgb" or self.mean is None)):
            out = self._cpu(x.contiguous())
        else:
            out = self._torch(x)
        if self.dtype != torch.float32:
            out = out.to(self.dtype)
        if self.channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out

    def _cpu(self, x: torch.Tensor) -> torch.Tensor:
        """The compiled kernels, into a recycled float32 buffer."""
        out = self._pool.get(tuple(x.shape))
        if not out.numel():
            return out
        if self.color == "yuv":
            return F.yuv_scale(x, out=out, num_threads=self.num_threads)
        if self.mean is None:
            return F.scale(x, out=out, num_threads=self.num_threads)
        c = x.shape[1]
        assert self.std is not None  # set together with mean
        return F.scale_normalize(x, channel_values(self.mean, c, "mean"), channel_values(self.std, c, "std"), out=out,
                                 num_threads=self.num_threads)

    def _torch(self, x: torch.Tensor) -> torch.Tensor:
        """Plain elementwise torch ops (any device)."""
        out = _yuv_torch(x, None) if self.color == "yuv" else x.float()
        if self.mean is None:
            return out / 255
        c = out.shape[1]
        assert self.std is not None  # set together with mean
        mean, std = channel_values(self.mean, c, "mean"), channel_values(self.std, c, "std")
        shape = (1, c, 1, 1)
        gain = torch.tensor([1.0 / (255.0 * s) for s in std], device=out.device).view(shape)
        bias = torch.tensor([-m / s for m, s in zip(mean, std)], device=out.device).view(shape)
        return torch.addcmul(bias, out, gain)

    def extra_repr(self) -> str:
        s = f"color={self.color!r}, dtype={self.dtype}"
        if self.mean is not None:
            s += f", mean={self.mean}, std={self.std}"
        if not self.scale:
            s += ", scale=False"
        if self.channels_last:
            s += ", channels_last=True"
        return s


class BatchYuvScale(BatchConvert):
    """RGB -> YUV -> ``/ 255`` of a batch: ``BatchConvert("yuv", dtype=dtype)``."""

    def __init__(self, dtype: torch.dtype = torch.float32, *, num_threads: int | None = None,
                 reuse_buffers: int = 3):
        super().__init__("yuv", dtype=dtype, num_threads=num_threads, reuse_buffers=reuse_buffers)


class BatchScale(BatchConvert):
    """``x / 255`` as float32, of a tensor of any shape: ``BatchConvert("rgb")`` without the
    ``[N, 3, H, W]`` check."""

    _any_shape = True

    def __init__(self, *, num_threads: int | None = None, reuse_buffers: int = 3):
        super().__init__("rgb", num_threads=num_threads, reuse_buffers=reuse_buffers)


class BatchConvertColor(BatchConvert):
    """RGB -> YUV of a batch to float32, no scaling, no clamping:
    ``BatchConvert("yuv", scale=False)`` (the formula of :class:`fastprep.transforms.ConvertColor`)."""

    def __init__(self):
        super().__init__("yuv", scale=False)


class BatchCast(torch.nn.Module):
    """A float batch that the per-sample transform already converted (``ToDtype(torch.float32,
    scale=True)`` [+ ``Normalize``]), cast to ``dtype`` and optionally channels-last: what
    :func:`~fastprep.data.make_loader` applies to such a transform's batches instead of
    :class:`BatchConvert` (which would convert them a second time).

    Args:
        dtype: float32 (default: the batch as it is), float16 or bfloat16.
        channels_last: return ``torch.channels_last`` memory format.
    """

    #: What BatchConvert has; none applies here (the engines read them).
    color = None
    mean = None
    std = None

    def __init__(self, dtype: torch.dtype = torch.float32, *, channels_last: bool = False):
        super().__init__()
        self.dtype = float_dtype(dtype)
        self.channels_last = bool(channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, C, H, W]`` float -> the same values in ``dtype``."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"expected a float batch from a transform that ends in ToDtype(torch.float32), got "
                            f"{type(x).__name__ if not isinstance(x, torch.Tensor) else x.dtype}")
        out = x.to(self.dtype)
        if self.channels_last and x.dim() == 4:
            out = out.contiguous(memory_format=torch.channels_last)
        return out

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, channels_last={self.channels_last}"
