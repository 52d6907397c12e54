"""Argument checks shared by fastprep's layers: one home for each check and its error text.

Every check returns the value in the form the caller uses (an ``int``, a ``float``, a
tuple...) or raises ``TypeError``/``ValueError`` with a message that names what it got.
The texts are part of the behaviour (tests match them): change them here only on purpose.
"""

from __future__ import annotations

import math
import mmap
import numbers
import operator
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import _C

__all__ = [
    "MODE_NAMES",
    "ON_ERROR",
    "as_int",
    "dct_scale_num",
    "encoded_tensor",
    "encoded_view",
    "fill_scalar",
    "fill_values",
    "float_dtype",
    "gray_level",
    "pad_fill",
    "is_int",
    "max_pixels",
    "max_scans",
    "mode_name",
    "nonneg_int",
    "on_error",
    "optional_max_pixels",
    "optional_max_scans",
    "out_dtype",
    "padding_ltrb",
    "per_channel",
    "probability",
    "range_pair",
    "ratio",
    "resize_size",
    "size_pair",
]

_INT64_MAX = (1 << 63) - 1

#: Encoded bytes as the decode functions take them.
Buffer = torch.Tensor | bytes | bytearray | memoryview | mmap.mmap | np.ndarray

_BUFFER_TYPES = "a uint8 tensor, bytes, bytearray, memoryview, mmap or numpy uint8 array"

#: What a dataset does with a file it cannot read or decode.
ON_ERROR = ("raise", "skip")

#: The member names of ``fastprep.io.ImageReadMode``.
MODE_NAMES = ("UNCHANGED", "GRAY", "RGB", "YCbCr")
_MODE_HELP = "mode must be one of UNCHANGED, GRAY, RGB, YCbCr"

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ------------------------------------------------------------------------------ integers


def is_int(value: object) -> bool:
    """An integral number that is not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def as_int(name: str, value: Any) -> int:
    """``value`` as an int64-range ``int`` (anything with ``__index__`` but a ``bool``)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if not -_INT64_MAX <= value <= _INT64_MAX:
        raise ValueError(f"{name} is out of range, got {value}")
    return value


def nonneg_int(value: Any, name: str) -> int:
    """An integral ``value >= 0`` (an image size of the kernels)."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def max_pixels(value: Any) -> int:
    """The ``max_pixels`` of a decode: an int >= 0, 0 for no limit."""
    value = as_int("max_pixels", value)
    if value < 0:
        raise ValueError(f"max_pixels must be >= 0 (0 = no limit), got {value}")
    return value


def optional_max_pixels(value: Any) -> int | None:
    """A dataset's ``max_pixels``: ``None`` (the decode's default) or an int >= 0."""
    if value is not None and (not is_int(value) or value < 0):
        raise ValueError(f"max_pixels must be None or an int >= 0 (0: no limit), got {value!r}")
    return None if value is None else int(value)


def max_scans(value: Any) -> int:
    """The ``max_scans`` of a decode: an int >= 0, 0 for no limit."""
    value = as_int("max_scans", value)
    if value < 0:
        raise ValueError(f"max_scans must be >= 0 (0 = no limit), got {value}")
    return value


def optional_max_scans(value: Any) -> int | None:
    """A decode transform's ``max_scans``: ``None`` (the decode's default) or an int >= 0."""
    if value is None:
        return None
    value = as_int("max_scans", value)
    if value < 0:
        raise ValueError(f"max_scans must be >= 0, got {value}")
    return value


def gray_level(fill: Any) -> int:
    """A decode transform's padding ``fill``: an int in [0, 255]."""
    if not is_int(fill) or not 0 <= fill <= 255:
        raise ValueError(f"fill must be an int in [0, 255], got {fill!r}")
    return int(fill)


def pad_fill(fill: Any) -> int | tuple[int, ...]:
    """A decode transform's padding ``fill``: an int in [0, 255], or 1 to 4 of them (one per
    channel) as a tuple."""
    if isinstance(fill, (list, tuple)):
        if not 1 <= len(fill) <= 4 or not all(is_int(v) and 0 <= v <= 255 for v in fill):
            raise ValueError(f"fill must be an int in [0, 255] or 1 to 4 of them, got {fill!r}")
        return tuple(int(v) for v in fill)
    return gray_level(fill)


def on_error(value: Any) -> str:
    """A dataset's ``on_error``: ``"raise"`` or ``"skip"``."""
    if value not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {value!r}")
    return value


# ------------------------------------------------------------------- numbers and pairs


def ratio(value: Any) -> float:
    """A mask probability: a real number in ``[0, 1]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"ratio must be a real number in [0, 1], got {value!r} ({type(value).__name__})")
    if not 0.0 <= float(value) <= 1.0:  # also rejects NaN
        raise ValueError(f"ratio must be in [0, 1], got {value}")
    return float(value)


def probability(value: Any, name: str) -> float:
    """A transform's probability such as ``flip_p``: a number in ``[0, 1]``."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _int_sequence(value: Any, lengths: tuple[int, ...]) -> bool:
    return (isinstance(value, Sequence) and not isinstance(value, str) and len(value) in lengths
            and all(is_int(v) for v in value))


def size_pair(size: Any, name: str = "size") -> tuple[int, int]:
    """An output size ``(height, width)`` from an int or a sequence of 1 or 2 positive ints."""
    given = size
    if is_int(size):
        size = (size, size)
    elif _int_sequence(size, (1, 2)):
        size = (size[0], size[-1])
    else:
        raise ValueError(f"{name} must be an int or a sequence of 1 or 2 ints, got {given!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"{name} must be positive, got {given!r}")
    return int(size[0]), int(size[1])


def resize_size(size: Any, max_size: Any) -> tuple[int, ...]:
    """v2 ``Resize``'s ``size`` (``(short_side,)`` or ``(height, width)``) and its
    ``max_size`` (an int larger than an int ``size``, or ``None``)."""
    if is_int(size):
        size = (int(size),)
    elif _int_sequence(size, (1, 2)):
        size = tuple(int(v) for v in size)
    else:
        raise ValueError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}")
    if min(size) <= 0:
        raise ValueError(f"size must be positive, got {size!r}")
    if max_size is not None:
        if not is_int(max_size) or len(size) != 1 or max_size <= size[0]:
            raise ValueError(f"max_size must be an int greater than an int size, got max_size={max_size!r} "
                             f"with size={size!r}")
    return size


def padding_ltrb(padding: Any) -> tuple[int, int, int, int]:
    """torchvision's crop ``padding`` (``None``, an int, or 1, 2 or 4 ints) as
    ``(left, top, right, bottom)``."""
    if padding is None:
        return (0, 0, 0, 0)
    if is_int(padding):
        p = int(padding)
        out = (p, p, p, p)
    elif _int_sequence(padding, (1, 2, 4)):
        v = [int(x) for x in padding]
        if len(v) == 1:
            out = (v[0], v[0], v[0], v[0])
        elif len(v) == 2:
            out = (v[0], v[1], v[0], v[1])
        else:
            out = (v[0], v[1], v[2], v[3])
    else:
        raise ValueError(f"padding must be an int or a sequence of 1, 2 or 4 ints, got {padding!r}")
    if min(out) < 0:
        raise ValueError(f"padding must be non-negative, got {padding!r}")
    return out


def range_pair(value: Any, name: str, low_open: float | None = None,
               high: float | None = None) -> tuple[float, float]:
    """``(min, max)`` of finite numbers with ``min <= max``; ``low_open``: values must be
    ``> low_open``; ``high``: values must be ``<= high``."""
    ok = (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
          and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value))
    if not ok:
        raise ValueError(f"{name} must be a pair of finite numbers (min, max), got {value!r}")
    lo, hi = float(value[0]), float(value[1])
    if lo > hi:
        raise ValueError(f"{name} must be (min, max) with min <= max, got {value!r}")
    if low_open is not None and lo <= low_open:
        raise ValueError(f"{name} values must be > {low_open}, got {value!r}")
    if high is not None and hi > high:
        raise ValueError(f"{name} values must be <= {high}, got {value!r}")
    return lo, hi


# ------------------------------------------------------------------ per-channel values


def fill_scalar(fill: Any, dtype: np.dtype | type) -> np.uint8 | np.float32:
    """One fill value of an image of numpy ``dtype`` (uint8: an integer in [0, 255];
    float32: a finite number)."""
    if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a real number, got {fill!r} ({type(fill).__name__})")
    if dtype == np.uint8:
        if not (float(fill).is_integer() and 0 <= float(fill) <= 255):
            raise ValueError(f"fill must be an integer in [0, 255] for uint8 images, got {fill}")
        return np.uint8(int(float(fill)))
    if not math.isfinite(float(fill)):
        raise ValueError(f"fill must be finite, got {fill}")
    return np.float32(fill)


def fill_values(fill: Any, dtype: np.dtype | type, channels: int) -> np.ndarray:
    """Per-channel fill values as a 1-D array of ``dtype``: a scalar for every channel, or
    a sequence with one value per channel."""
    if isinstance(fill, (np.ndarray, torch.Tensor)) and fill.ndim == 0:
        fill = fill.item()
    if isinstance(fill, (list, tuple, np.ndarray, torch.Tensor)):
        values = [v.item() if hasattr(v, "item") else v for v in (fill.tolist() if hasattr(fill, "tolist") else fill)]
        if len(values) != channels:
            raise ValueError(f"fill must be a scalar or have one value per channel ({channels}), "
                             f"got {len(values)} values")
        return np.array([fill_scalar(v, dtype) for v in values], dtype=dtype)
    return np.full(channels, fill_scalar(fill, dtype), dtype=dtype)


def per_channel(values: Any, name: str, channels: int) -> list[float]:
    """``mean``/``std``-like values: one finite number for every channel, or one per channel."""
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = (values,) * channels
    try:
        if isinstance(values, (str, bytes)):
            raise TypeError
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or one number per channel, got {values!r}") from None
    if len(out) != channels:
        raise ValueError(f"{name} must have one value per channel ({channels}), got {len(out)}")
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must be finite, got {out}")
    return out


# ------------------------------------------------------------------------------ dtypes


def float_dtype(dtype: Any) -> torch.dtype:
    """A batch's output dtype: torch.float32, torch.float16 or torch.bfloat16."""
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"dtype must be torch.float32, torch.float16 or torch.bfloat16, got {dtype}")
    return dtype


def out_dtype(dtype: Any, is_tensor: bool) -> None:
    """The ``dtype`` of a float kernel's output: ``None``, or a float type of the input's
    kind (torch.float32/float16/bfloat16 for tensors, numpy.float32/float16 for arrays)."""
    if dtype is None:
        return
    if is_tensor and dtype in _FLOAT_DTYPES:
        return
    if not is_tensor and not isinstance(dtype, torch.dtype):
        try:
            if np.dtype(dtype) in (np.float32, np.float16):
                return
        except TypeError:
            pass
    allowed = "torch.float32, torch.float16 or torch.bfloat16" if is_tensor else "numpy.float32 or numpy.float16"
    raise TypeError(f"dtype must be {allowed}, got {dtype!r}")


# ------------------------------------------------------------------------- decode input


def mode_name(mode: Any) -> str:
    """A decode mode (``fastprep.io.ImageReadMode``, its name in any case, or an enum with
    such a name, e.g. torchvision's) as the name of its ``ImageReadMode`` member."""
    if isinstance(mode, str):
        key = mode.upper()
        for name in MODE_NAMES:
            if name.upper() == key:
                return name
        raise ValueError(f"{_MODE_HELP}, got {mode!r}")
    member = getattr(mode, "name", None)  # fastprep's and torchvision's ImageReadMode
    if isinstance(member, str) and member in MODE_NAMES:
        return member
    raise ValueError(f"{_MODE_HELP}, got {mode!r}")


def dct_scale_num(scale: Any) -> int:
    """A decode's ``scale`` as the numerator over 8: None -> 8, (num, 8) or num -> num,
    (1, 2) -> 4."""
    if scale is None:
        return 8
    if isinstance(scale, tuple):
        if len(scale) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in scale):
            raise ValueError(f"scale must be None, an int num or a (num, 8) tuple of ints, got {scale!r}")
        num, denom = scale
        if denom <= 0 or (8 * num) % denom or not 1 <= 8 * num // denom <= 8:
            raise ValueError(f"scale must be num/8 with 1 <= num <= 8, such as (1, 8), (3, 8) or (1, 2); got {scale!r}")
        return 8 * num // denom
    if isinstance(scale, bool):
        raise TypeError(f"scale must be None, an int num or a (num, 8) tuple, got {scale!r}")
    try:
        num = operator.index(scale)
    except TypeError:
        raise TypeError(f"scale must be None, an int num or a (num, 8) tuple, got {type(scale).__name__} "
                        f"{scale!r}") from None
    if not 1 <= num <= 8:
        raise ValueError(f"scale as an int is num in num/8 and must be in [1, 8], got {num}")
    return num


def encoded_tensor(data: Buffer) -> torch.Tensor:
    """Encoded bytes as a contiguous uint8 1-D CPU tensor that the caller may keep: the
    caller's memory when it is a writable buffer, a copy of a read-only one (``bytes``, a
    read-only memoryview, mmap or array) or of a non-contiguous one. For a call into an op
    that only reads, :func:`encoded_view` copies nothing."""
    if isinstance(data, torch.Tensor):
        return checked_tensor(data)
    flat = _contiguous_buffer(data)
    if len(flat) == 0:
        return torch.empty(0, dtype=torch.uint8)
    if flat.readonly:
        return torch.from_numpy(np.frombuffer(flat, dtype=np.uint8).copy())
    return torch.frombuffer(flat, dtype=torch.uint8)


def encoded_view(data: Buffer) -> torch.Tensor:
    """Encoded bytes as a contiguous uint8 1-D CPU tensor over the caller's memory, for one
    call into a fastprep op that only reads it (decode, header, transcode): ``bytes``,
    ``bytearray``, memoryviews, mmaps and numpy arrays are read in place, read-only ones
    included, without a copy and without torch's warning about non-writable buffers.

    torch has no read-only tensors, so a view of a read-only buffer must not be kept or
    returned: pass it to the op and drop it. Non-contiguous input (a strided memoryview,
    array or tensor) is copied once into contiguous memory.
    """
    if isinstance(data, torch.Tensor):
        return checked_tensor(data)
    return _C.buffer_view(_contiguous_buffer(data))


def checked_tensor(data: torch.Tensor, name: str = "data tensor") -> torch.Tensor:
    """``data``, encoded bytes as a tensor, checked (uint8, 1-D, on the CPU; ``name`` in the
    errors) and made contiguous."""
    if data.dtype != torch.uint8:
        raise TypeError(f"{name} must be uint8, got {data.dtype}")
    if data.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(data.shape)}")
    if data.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU, got {data.device}")
    return data.contiguous()


def _contiguous_buffer(data: Any) -> memoryview:
    """``data`` (any accepted type but a tensor) as a C-contiguous memoryview of its bytes:
    the caller's memory, or a copy where it is not contiguous."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"data array must be uint8, got {data.dtype}")
        if data.ndim != 1:
            raise ValueError(f"data array must be 1-D, got shape {data.shape}")
        flat: np.ndarray = data if data.flags.c_contiguous else np.ascontiguousarray(data)
        return memoryview(flat.data)
    if isinstance(data, (bytes, bytearray, memoryview, mmap.mmap)):
        view = memoryview(data)
        if not view.c_contiguous:
            view = memoryview(view.tobytes())
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    if isinstance(data, (str, os.PathLike)):
        raise TypeError("data must be encoded bytes, got a path; use fastprep.io.read_file(path) first")
    raise TypeError(f"data must be {_BUFFER_TYPES}, got {type(data).__name__}")
