"""The C++ structs that cross into Python, as numpy structured dtypes.

Each struct that a native op reads from (or writes to) a byte tensor is described once, by
the C++ side (``torch.ops.fastprep.struct_layout(name)``: its size and each field's name,
type, offset and count), and Python addresses its fields by name through the dtype built
here: there are no positional columns to keep in step on both sides.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from . import _ops  # noqa: F401  (registers torch.ops.fastprep.*)

_TYPES = {"i8": np.int64, "f8": np.float64}


@functools.cache
def struct_dtype(name: str) -> np.dtype:
    """The numpy dtype of C++ struct ``name`` (its fields, offsets and size as compiled)."""
    size, *fields = torch.ops.fastprep.struct_layout(name).split(";")
    names, formats, offsets = [], [], []
    for field in fields:
        fname, ftype, offset, count = field.split(":")
        names.append(fname)
        formats.append((_TYPES[ftype], (int(count),)) if int(count) > 1 else _TYPES[ftype])
        offsets.append(int(offset))
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": int(size)})


def as_bytes(records: np.ndarray) -> torch.Tensor:
    """A structured array's memory as a uint8 tensor (a copy, owned by the tensor)."""
    return torch.from_numpy(np.ascontiguousarray(records).view(np.uint8).reshape(-1).copy())


def from_bytes(data: torch.Tensor, name: str) -> np.ndarray:
    """The records of struct ``name`` in a uint8 tensor (a view of its memory)."""
    return data.numpy().view(struct_dtype(name))
