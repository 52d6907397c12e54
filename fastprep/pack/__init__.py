"""Lossless transcoding of image folders for fast crops: ``python -m fastprep.pack SRC DST``.

Every JPEG under ``SRC`` is re-encoded with :func:`fastprep.io.transcode_jpeg` (DCT
coefficients untouched, so any decoder gives exactly the original pixels; one sequential
scan; optimized Huffman tables; restart markers that tile the MCU rows) and written to the
same relative path under ``DST``. :func:`fastprep.io.decode_jpeg_roi` -- and so the
random-crop decode transforms and loaders built on it -- then entropy-decodes only the
restart intervals a window needs. Other files are copied unchanged, so an ImageFolder
layout keeps working, and so are the valid JPEGs that cannot be transcoded losslessly
(progressive files whose scans leave coefficients incomplete: decoders estimate those, a
sequential copy would change pixels); the summary lists them. See docs/pack.md.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator

from .._progress import progress_bar
from ._common import PackSummary, _check_options, _init_worker, _transcode, _walk, account, write_atomic
from .shards import pack_shards

__all__ = ["PackSummary", "format_summary", "pack_folder", "pack_shards"]


def _pack_one(job):
    """Worker: (src, dst, rel, options) -> (rel, kind, bytes in, bytes out, reason)."""
    src, dst, rel, opts = job
    in_path, out_path = os.path.join(src, rel), os.path.join(dst, rel)
    try:
        st = os.stat(in_path)
        with open(in_path, "rb") as f:
            data = f.read()
    except OSError as e:
        return rel, "error", 0, 0, f"cannot read: {e}"
    kind, out, reason = _transcode(data, opts)
    if kind == "failed-skipped":
        return rel, kind, len(data), 0, reason
    try:
        os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
        write_atomic(out_path, out, st.st_mtime_ns)
    except OSError as e:
        return rel, "error", len(data), 0, f"cannot write {out_path}: {e}"
    return rel, kind, len(data), len(out), reason


def _up_to_date(in_path: str, out_path: str) -> bool:
    try:
        return os.stat(out_path).st_mtime_ns == os.stat(in_path).st_mtime_ns
    except OSError:
        return False


def pack_folder(src: str | os.PathLike, dst: str | os.PathLike, *, workers: int | None = None,
                restart_interval: int | str = "auto", optimize: bool = True, keep_metadata: bool = True,
                on_error: str = "copy", max_pixels: int | None = None, force: bool = False,
                progress: bool = True) -> PackSummary:
    """Mirror ``src`` into ``dst``, transcoding every JPEG for fast ROI decoding.

    JPEGs are recognised by their first bytes (``FF D8 FF``), whatever their extension.
    Outputs are written atomically and carry their source's modification time; a file
    whose output exists with the same modification time is skipped (resumable: run again
    after an interruption or after adding files). ``dst`` inside ``src`` is left out of
    the walk.

    Args:
        src: source folder.
        dst: destination folder (created if missing).
        workers: processes (default: ``os.cpu_count()``).
        restart_interval, optimize, keep_metadata: as in :func:`fastprep.io.transcode_jpeg`.
        on_error: ``"copy"`` (default) writes corrupt JPEGs (which cannot be transcoded)
            unchanged; ``"skip"`` leaves them out of ``dst``. Either way they are listed in
            the summary. Valid JPEGs that cannot be transcoded losslessly are always copied
            (and listed).
        max_pixels: refuse larger images (default: ``fastprep.io.DEFAULT_MAX_PIXELS``).
        force: transcode even the files whose output is up to date.
        progress: show a tqdm progress bar on stderr (when stderr is a terminal: a log
            file gets no bar, see :func:`fastprep._progress.progress_bar`).

    Returns:
        A :class:`PackSummary`.

    Raises:
        ValueError: bad arguments, ``src`` not a folder, or ``dst`` equal to ``src``.
        OSError: ``dst`` cannot be created.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    opts = _check_options(src, dst, workers, restart_interval, optimize, keep_metadata, on_error, max_pixels)
    if workers is None:
        workers = os.cpu_count() or 1
    os.makedirs(dst, exist_ok=True)
    summary = PackSummary()
    rels = _walk(src, dst)
    summary.files = len(rels)
    todo = []
    for rel in rels:
        if not force and _up_to_date(os.path.join(src, rel), os.path.join(dst, rel)):
            summary.up_to_date += 1
        else:
            todo.append((src, dst, rel, opts))
    bar = progress_bar(len(todo), unit="file", desc="fastprep.pack") if progress and todo else None
    try:
        if workers == 1 or len(todo) <= 1:
            results: Iterator = map(_pack_one, todo)
            pool = None
        else:
            ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
            pool = ctx.Pool(min(workers, len(todo)), initializer=_init_worker)
            results = pool.imap_unordered(_pack_one, todo, chunksize=8)
        try:
            for rel, kind, n_in, n_out, reason in results:
                if kind.startswith("failed"):
                    reason += " (copied as-is)" if kind == "failed-copied" else " (left out)"
                account(summary, rel, kind, n_in, n_out, reason)
                if bar is not None:
                    bar.update(1)
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
    finally:
        if bar is not None:
            bar.close()
    summary.kept.sort()
    summary.failed.sort()
    summary.errors.sort()
    summary.not_jpeg.sort()
    return summary


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def format_summary(s: PackSummary, max_listed: int = 20) -> str:
    """A human-readable report of :func:`pack_folder`'s summary."""
    lines = [f"files: {s.files}  packed: {s.packed}  copied (not JPEG): {s.copied}  "
             f"kept as-is: {len(s.kept)}  up to date: {s.up_to_date}  failed: {len(s.failed)}  "
             f"I/O errors: {len(s.errors)}"]
    if s.packed:
        change = 100.0 * (s.jpeg_bytes_after - s.jpeg_bytes_before) / max(s.jpeg_bytes_before, 1)
        lines.append(f"packed JPEGs: {_format_bytes(s.jpeg_bytes_before)} -> {_format_bytes(s.jpeg_bytes_after)} "
                     f"({change:+.2f} %)")
    if s.shards or s.shards_reused:
        lines.append(f"shards written: {s.shards}  reused from an earlier run: {s.shards_reused}")
    if s.bytes_before:
        lines.append(f"all files written: {_format_bytes(s.bytes_before)} -> {_format_bytes(s.bytes_after)}")
    not_samples = [(rel, "not an image sample") for rel in s.not_samples]
    not_jpeg = [(rel, "not a JPEG") for rel in sorted(s.not_jpeg)]
    for title, items in (("copied unchanged (shards: stored as they are)", not_jpeg),
                         ("kept as-is, valid JPEG but a transcode would change its pixels", s.kept),
                         ("could not transcode (corrupt, truncated or too large)", s.failed),
                         ("I/O errors", s.errors), ("not in the shards", not_samples)):
        if items:
            lines.append(f"{title} ({len(items)}):")
            lines += [f"  {rel}: {why}" for rel, why in items[:max_listed]]
            if len(items) > max_listed:
                lines.append(f"  ... and {len(items) - max_listed} more")
    return "\n".join(lines)
