"""What :func:`fastprep.pack.pack_folder` and :func:`fastprep.pack.pack_shards` share."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

_JPEG_MAGIC = b"\xff\xd8\xff"
_TMP_SUFFIX = ".fastprep-pack-tmp"
# How transcode_jpeg's DecodeError for a valid file it refuses begins (csrc/jpeg/jpeg_transcoder.cpp).
_LOSSLESS_REFUSAL = "cannot be transcoded losslessly"


@dataclass
class PackSummary:
    """What :func:`pack_folder` did.

    Attributes:
        files: files found under the source.
        packed: JPEGs transcoded.
        copied: non-JPEG files copied unchanged (shards: stored as they are).
        not_jpeg: their relative paths (``copied`` counts them).
        up_to_date: files skipped because the output was already up to date.
        kept: ``(relative path, reason)`` of valid JPEGs copied unchanged because a
            transcode would change their pixels (progressive files whose scans leave
            coefficients incomplete); copied whatever ``on_error`` says. Their ROI decodes
            take the slower path.
        failed: ``(relative path, reason)`` of JPEGs that could not be transcoded because
            they are corrupt, truncated or too large (copied as-is or left out, per
            ``on_error``).
        errors: ``(relative path, reason)`` of I/O errors (unreadable source, unwritable
            destination): the output is incomplete.
        jpeg_bytes_before, jpeg_bytes_after: total size of the packed JPEGs before and after.
        bytes_before, bytes_after: total size of every file written in this run, before
            and after.
        not_samples: (shards only) relative paths of the files under the source that are not
            samples (not images JpegFolder lists, or files beside the class folders).
        shards, shards_reused: (shards only) shards written in this run, and complete shards
            of an earlier run reused as they were (their samples count as ``up_to_date``).
    """

    files: int = 0
    packed: int = 0
    copied: int = 0
    not_jpeg: list = field(default_factory=list)
    up_to_date: int = 0
    kept: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    jpeg_bytes_before: int = 0
    jpeg_bytes_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    not_samples: list = field(default_factory=list)
    shards: int = 0
    shards_reused: int = 0


def _walk(src: str, dst: str):
    """Relative paths of the regular files under src, sorted, leaving out dst if inside."""
    dst_real = os.path.realpath(dst)
    out = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if os.path.realpath(os.path.join(root, d)) != dst_real)
        for name in sorted(files):
            if name.endswith(_TMP_SUFFIX):
                continue
            path = os.path.join(root, name)
            if os.path.isfile(path):
                out.append(os.path.relpath(path, src))
    return out


def _transcode(data: bytes, opts: dict):
    """``(kind, output bytes, reason)``: kind ``"packed"``, ``"copied"`` (not a JPEG),
    ``"kept"`` (a valid JPEG a transcode would change: the input, whatever ``on_error``),
    ``"failed-copied"`` or ``"failed-skipped"`` (per ``opts["on_error"]``)."""
    from fastprep.io import DecodeError, transcode_jpeg

    if not data.startswith(_JPEG_MAGIC):
        return "copied", data, ""
    try:
        return "packed", transcode_jpeg(data, restart_interval=opts["restart_interval"], optimize=opts["optimize"],
                                        keep_metadata=opts["keep_metadata"], max_pixels=opts["max_pixels"]), ""
    except (DecodeError, ValueError, MemoryError) as e:
        reason = str(e) or type(e).__name__
        if isinstance(e, DecodeError) and reason.startswith(_LOSSLESS_REFUSAL):
            return "kept", data, reason
        if opts["on_error"] == "skip":
            return "failed-skipped", b"", reason
        return "failed-copied", data, reason


def _init_worker():
    import torch

    torch.set_num_threads(1)


def _check_options(src: str, dst: str, workers, restart_interval, optimize, keep_metadata, on_error,
                   max_pixels) -> dict:
    """Validate the arguments pack_folder and pack_shards share; the options for the workers."""
    from fastprep.io import DEFAULT_MAX_PIXELS

    if not os.path.isdir(src):
        raise ValueError(f"src must be a folder, got {src!r}")
    if os.path.realpath(src) == os.path.realpath(dst):
        raise ValueError(f"dst must differ from src, got {dst!r} for both")
    if on_error not in ("copy", "skip"):
        raise ValueError(f"on_error must be 'copy' or 'skip', got {on_error!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if restart_interval != "auto" and (isinstance(restart_interval, bool) or not isinstance(restart_interval, int)
                                       or not 0 <= restart_interval <= 65535):
        raise ValueError(f"restart_interval must be 'auto' or an int in [0, 65535], got {restart_interval!r}")
    return {"restart_interval": restart_interval, "optimize": bool(optimize), "keep_metadata": bool(keep_metadata),
            "on_error": on_error, "max_pixels": DEFAULT_MAX_PIXELS if max_pixels is None else int(max_pixels)}


def account(summary: PackSummary, rel: str, kind: str, n_in: int, n_out: int, reason: str) -> None:
    """Add one file's result (``kind`` as the pack workers return it) to ``summary``; a
    failure's ``reason`` already says what became of the file. Both output formats."""
    if kind == "packed":
        summary.packed += 1
        summary.jpeg_bytes_before += n_in
        summary.jpeg_bytes_after += n_out
    elif kind == "copied":
        summary.copied += 1
        summary.not_jpeg.append(rel)
    elif kind == "kept":
        summary.kept.append((rel, reason))
    elif kind == "error":
        summary.errors.append((rel, reason))
        return
    else:
        summary.failed.append((rel, reason))
    summary.bytes_before += n_in
    summary.bytes_after += n_out


def write_atomic(path: str, data: bytes, mtime_ns: int | None = None) -> None:
    """Write ``data`` via a temporary file and rename, so an interrupted run never leaves a
    partial output that looks complete; ``mtime_ns``: stamp the source's mtime (the
    up-to-date check of a resumed run)."""
    tmp = f"{path}.{os.getpid()}{_TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
