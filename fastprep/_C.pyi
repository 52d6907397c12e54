"""Type stubs of ``fastprep._C``, the C++ extension (csrc/ops.cpp). Its ops are reached
through ``torch.ops.fastprep.*`` (schemas in csrc/ops.cpp); the module itself holds only
these helpers."""

import torch

libjpeg_turbo_version: str
"""The libjpeg-turbo version the extension was compiled against, e.g. ``"2.1.5"``."""

jpeg_info_fields: tuple[str, ...]
"""Names of the fields of ``torch.ops.fastprep.jpeg_info``'s result, in order (csrc/jpeg_info.h)."""

def close_exit_gate() -> int:
    """At interpreter exit (registered with ``atexit``): ops that start or end in another
    thread from now on park it (csrc/exit_gate.h); the ops still in flight after 200 ms."""

def take_warning() -> str | None:
    """The calling thread's pending libjpeg warning, cleared; ``None`` when there is none."""

def restart_stats() -> tuple[int, int]:
    """This thread's (restart-interval ROI decodes taken, eligible files that fell back)."""

def interval_index_stats() -> tuple[int, int]:
    """This thread's (ROI decodes that used the interval index, files whose index was rejected)."""

def native_isa(level: int, /) -> int:
    """The C++ kernels' variant (csrc/isa.h: resize, the batch op's conversions, the pixel
    kernels): -1 reads it, 0 (baseline) or 1 (AVX2 + FMA) selects one, capped by the CPU;
    returns the variant in use. Use :func:`fastprep._kernels.isa.set_isa`."""

def buffer_view(buffer: memoryview, /) -> torch.Tensor:
    """A uint8 1-D tensor over the bytes of a C-contiguous buffer, read in place (no copy,
    read-only buffers too): hand it only to ops that read it (``fastprep._checks.encoded_view``)."""
