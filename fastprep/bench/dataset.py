"""The benchmark's data: a built-in synthetic JPEG set, generated once and cached, or a
folder of the user's own JPEGs (checked file by file; unusable ones are left out and listed).

Built-in images are ``photo_like`` frames (see :mod:`fastprep.bench.synthetic`) encoded
with Pillow. Image ``i`` depends only on ``i`` and the generation parameters, so the cache
directory (named by a hash of the parameters, not of the count) serves any ``num_images``:
a later run that asks for more images only generates the missing ones. Files are written
under a temporary name and renamed, so concurrent runs never see a partial file.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._cache import cache_root
from .._threads import usable_cpus
from .synthetic import encode_jpeg, photo_like

__all__ = ["BenchData", "BenchDataError", "BuiltinSpec", "builtin_dataset", "cache_root", "check_file",
           "mean_megapixels", "folder_dataset", "packed_copy", "show_progress"]

#: Bumped whenever the generator's output changes, so stale caches are not reused.
GENERATOR_VERSION = 1
NUM_CLASSES = 10


def show_progress(wanted: bool) -> bool:
    """Whether to draw a progress bar: asked for, and stderr (where tqdm writes) is a terminal, not a log file."""
    return bool(wanted) and sys.stderr.isatty()


@dataclass(frozen=True)
class BuiltinSpec:
    """Parameters of the built-in data set (the count is not one: see the module doc)."""

    height: int = 533
    width: int = 800
    quality: int = 90
    subsampling: str = "4:2:0"
    seed: int = 0

    def digest(self) -> str:
        blob = json.dumps({**asdict(self), "version": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class BenchData:
    """Files and integer class targets of a benchmark run, plus a description."""

    files: list[str]
    targets: list[int]
    description: str
    root: str
    #: ``(path, reason)`` of every file examined and left out.
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _relpath(i: int) -> str:
    return f"class{i % NUM_CLASSES}/{i:06d}.jpg"


def _make_one(job) -> int:
    root, spec, i = job
    path = Path(root) / _relpath(i)
    if path.exists():
        return i
    rgb = photo_like(spec.height, spec.width, seed=spec.seed * 1_000_003 + i)
    data = encode_jpeg(rgb, quality=spec.quality, subsampling=spec.subsampling)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return i


def builtin_dataset(num_images: int, spec: BuiltinSpec = BuiltinSpec(), *, processes: int | None = None,
                    progress: bool = True) -> BenchData:
    """The first ``num_images`` built-in images, generating missing ones in parallel.

    Args:
        num_images: how many images to use (>= 1).
        spec: generation parameters; the cache directory is ``bench-<hash of spec>``.
        processes: generator processes (default: the usable cores).
        progress: show a tqdm bar while generating.
    """
    if num_images < 1:
        raise ValueError(f"num_images must be >= 1, got {num_images}")
    root = cache_root() / f"bench-{spec.digest()}"
    for c in range(min(NUM_CLASSES, num_images)):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
    meta = root / "spec.json"
    if not meta.exists():
        tmp = meta.with_name(f".spec.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**asdict(spec), "version": GENERATOR_VERSION}, indent=1))
        os.replace(tmp, meta)
    missing = [i for i in range(num_images) if not (root / _relpath(i)).exists()]
    if missing:
        from tqdm import tqdm

        jobs = [(str(root), spec, i) for i in missing]
        procs = max(1, min(processes or usable_cpus(), len(missing)))
        bar = tqdm(total=len(missing), desc=f"generating {len(missing)} JPEGs in {root}", unit="img",
                   disable=not show_progress(progress), leave=False)
        if procs == 1:
            for job in jobs:
                _make_one(job)
                bar.update()
        else:
            # spawn-free fork pool is fine: the children only run numpy and Pillow.
            ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else None)
            # large images (seconds each) one at a time, so the processes stay evenly loaded
            # and the bar moves per image; small ones in chunks of 4
            chunk = 1 if spec.height * spec.width >= 1_000_000 else 4
            with ctx.Pool(procs) as pool:
                for _ in pool.imap_unordered(_make_one, jobs, chunksize=chunk):
                    bar.update()
        bar.close()
    files = [str(root / _relpath(i)) for i in range(num_images)]
    desc = (f"built-in: {num_images} synthetic JPEGs {spec.width}x{spec.height} q{spec.quality} "
            f"{spec.subsampling}")
    return BenchData(files, [i % NUM_CLASSES for i in range(num_images)], desc, str(root))


class BenchDataError(ValueError):
    """The data cannot be benchmarked (no usable file, or a bad file with ``on_error="raise"``);
    the message is one line naming the folder or file."""


#: Files the folder scan examines (case-insensitive); other files (notes, labels) are ignored.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".ppm",
                  ".pgm")
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"), (b"II*\x00", "TIFF"),
          (b"MM\x00*", "TIFF"), (b"P5", "PGM"), (b"P6", "PPM"))


def _sniff(head: bytes) -> str | None:
    """The image format of data that does not start with a JPEG SOI marker, when known."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def _one_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1].strip()}" if lines else type(e).__name__


def check_file(path: str, checks: dict | None = None) -> str | None:
    """Why the benchmark cannot use the file at ``path``, or ``None`` when it can.

    Args:
        path: a file.
        checks: ``{key: (check, names)}``: ``check(data: bytes)`` raises when the pipelines
            ``names`` cannot use the file. ``None``: only the JPEG header is checked.

    Returns:
        ``None``, or one line: ``"empty file"``, ``"PNG data, not a JPEG"``, the header
        error, or which pipelines fail and why.
    """
    from fastprep import io as fio

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "not a regular file"
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    if not data:
        return "empty file"
    if not data.startswith(b"\xff\xd8"):
        fmt = _sniff(data[:16])
        return f"{fmt} data, not a JPEG" if fmt else "not a JPEG (no SOI marker at the start)"
    try:
        fio.jpeg_info(data)
    except Exception as e:  # noqa: BLE001 - any failure makes the file unusable; say why
        return _one_line(e)
    checks = checks or {}
    failures = []
    for check, names in checks.values():
        try:
            check(data)
        except Exception as e:  # noqa: BLE001
            failures.append((list(names), _one_line(e)))
    if not failures:
        return None
    by_reason: dict[str, list[str]] = {}
    for names, why in failures:
        by_reason.setdefault(why, []).extend(names)
    if len(failures) == len(checks) and len(by_reason) == 1:
        return failures[0][1]  # every pipeline, for the same reason
    return "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())


def _candidates(root: Path) -> tuple[list[str], list[int], list[str]]:
    """Image files of ``root`` in sorted order: flat files (target 0), then one class per
    sub-folder (ImageFolder layout, searched recursively). Returns files, targets, classes."""
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))

    def image(name):
        return not name.startswith(".") and name.lower().endswith(IMAGE_SUFFIXES)

    files = [str(root / n) for n in sorted(p.name for p in root.iterdir() if not p.is_dir() and image(p.name))]
    targets = [0] * len(files)
    for k, c in enumerate(classes):
        for dirpath, dirnames, filenames in sorted(os.walk(root / c)):
            dirnames.sort()
            for name in sorted(filenames):
                if image(name):
                    files.append(os.path.join(dirpath, name))
                    targets.append(k)
    return files, targets, classes


def mean_megapixels(root: str | os.PathLike, sample: int = 32) -> float:
    """Mean size in megapixels of the first ``sample`` image files of ``root`` (in the order
    :func:`folder_dataset` examines them), read from their headers; 0.0 when none can be read."""
    from PIL import Image

    root = Path(root).expanduser()
    if not root.is_dir():
        return 0.0
    sizes = []
    for path in _candidates(root)[0][:sample]:
        try:
            with Image.open(path) as im:  # lazy: reads the header only
                sizes.append(im.width * im.height)
        except Exception:  # noqa: BLE001 - unreadable files are left out here and listed later
            continue
    return sum(sizes) / len(sizes) / 1e6 if sizes else 0.0


def folder_dataset(root: str | os.PathLike, num_images: int | None = None, *, checks: dict | None = None,
                   on_error: str = "skip", progress: bool = False) -> BenchData:
    """The usable JPEGs of a folder: ImageFolder layout (one sub-folder per class, sorted) or flat.

    Image files (by suffix, see :data:`IMAGE_SUFFIXES`) are examined in sorted order by
    :func:`check_file` until ``num_images`` usable ones are found. Zero-byte files, PNG and
    other non-JPEG data, damaged JPEGs and files a pipeline's check refuses (e.g. CMYK for
    a YCbCr decoder) are left out and listed in :attr:`BenchData.skipped`, so every pipeline
    runs on the same files. In a flat folder every target is 0.

    Args:
        root: the folder.
        num_images: how many usable files to keep (``None``: all).
        checks: see :func:`check_file`.
        on_error: ``"skip"`` (default) or ``"raise"``: raise at the first unusable file.
        progress: show a bar while checking.

    Raises:
        BenchDataError: ``root`` is not a folder, has no usable file, or (``on_error="raise"``)
            has an unusable one.
    """
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise BenchDataError(f"--data must be a folder of JPEG files, got {str(root)!r}")
    candidates, labels, classes = _candidates(root)
    if not candidates:
        raise BenchDataError(f"no image files (*.jpg, *.jpeg, ...) found in {str(root)!r}")
    want = len(candidates) if num_images is None else num_images
    files: list[str] = []
    targets: list[int] = []
    skipped: list[tuple[str, str]] = []
    bar = tqdm(total=min(want, len(candidates)), desc=f"checking files in {root}", unit="file",
               disable=not show_progress(progress), leave=False)
    chunk = max(16, 4 * usable_cpus())
    with ThreadPoolExecutor(max_workers=usable_cpus()) as pool:  # the decoders release the GIL
        for start in range(0, len(candidates), chunk):
            if len(files) >= want:
                break
            batch = candidates[start:start + chunk]
            for path, target, why in zip(batch, labels[start:start + chunk],
                                         pool.map(lambda f: check_file(f, checks), batch)):
                if len(files) >= want:
                    break
                if why is None:
                    files.append(path)
                    targets.append(target)
                    bar.update()
                elif on_error == "raise":
                    bar.close()
                    raise BenchDataError(f"{path}: {why} (--on-error skip leaves unusable files out)")
                else:
                    skipped.append((path, why))
    bar.close()
    if not files:
        first = f"; first: {skipped[0][0]}: {skipped[0][1]}" if skipped else ""
        raise BenchDataError(f"no usable JPEG files in {str(root)!r}: all {len(skipped)} image files left "
                             f"out{first}")
    layout = f"{len(classes)} classes" if classes else "flat"
    return BenchData(files, targets, f"{root}: {len(files)} JPEGs ({layout})", str(root), skipped)


def packed_copy(files: list[str], *, progress: bool = True, workers: int | None = None) -> list[str]:
    """Paths of copies of ``files`` transcoded by :func:`fastprep.pack.pack_folder`, cached.

    The copies live in ``cache_root() / "packed-<sha1 of the files' common folder>"``:
    ``links/`` mirrors the selected files as symbolic links (so only these files are
    packed, not the rest of a large ``--data`` folder) and ``packed/`` holds the
    transcoded copies at the same relative paths. Packing is resumable (a copy whose
    modification time matches its source is not redone), so after the first run this
    costs one ``stat`` per file. A JPEG that cannot be transcoded is copied unchanged (it
    then decodes on the ordinary path).

    Args:
        files: JPEG paths (at least one).
        progress: show pack's progress bar while transcoding.
        workers: pack processes (default: the usable cores).

    Returns:
        One path per input, in order.

    Raises:
        BenchDataError: a file could not be read or its copy written.
    """
    from fastprep.pack import pack_folder

    if not files:
        raise ValueError("packed_copy needs at least one file, got none")
    real = [os.path.realpath(f) for f in files]
    root = os.path.commonpath(real)
    if len(real) == 1 or os.path.isfile(root):
        root = os.path.dirname(root)
    cache = cache_root() / f"packed-{hashlib.sha1(root.encode()).hexdigest()[:12]}"
    links, dst = cache / "links", cache / "packed"
    rels = [os.path.relpath(f, root) for f in real]
    for rel, f in zip(rels, real):
        link = links / rel
        if os.path.islink(link) and os.readlink(link) == f:
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
        os.symlink(f, tmp)
        os.replace(tmp, link)
    summary = pack_folder(links, dst, workers=workers or usable_cpus(), progress=show_progress(progress))
    if summary.errors:
        rel, why = summary.errors[0]
        raise BenchDataError(f"packing into {dst} failed for {len(summary.errors)} file(s); first: {rel}: {why}")
    return [str(dst / rel) for rel in rels]


