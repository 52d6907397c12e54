"""The benchmark's data: a built-in synthetic JPEG set, generated once and cached, or a
folder of the user's own JPEGs.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from .synthetic import encode_jpeg, photo_like

__all__ = ["BuiltinSpec", "BenchData", "builtin_dataset", "cache_root", "folder_dataset"]

#: Bumped whenever the generator's output changes, so stale caches are not reused.
GENERATOR_VERSION = 1
NUM_CLASSES = 10
JPEG_SUFFIXES = (".jpg", ".jpeg", ".JPG", ".JPEG")


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


def cache_root() -> Path:
    """``$FASTPREP_CACHE``, or ``~/.cache/fastprep``."""
    env = os.environ.get("FASTPREP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fastprep"


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
        procs = max(1, min(processes or _usable_cores(), len(missing)))
        bar = tqdm(total=len(missing), desc=f"generating {len(missing)} JPEGs in {root}", unit="img",
                   disable=not progress, leave=False)
        if procs == 1:
            for job in jobs:
                _make_one(job)
                bar.update()
        else:
            # spawn-free fork pool is fine: the children only run numpy and Pillow.
            ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else None)
            with ctx.Pool(procs) as pool:
                for _ in pool.imap_unordered(_make_one, jobs, chunksize=4):
                    bar.update()
        bar.close()
    files = [str(root / _relpath(i)) for i in range(num_images)]
    desc = (f"built-in: {num_images} synthetic JPEGs {spec.width}x{spec.height} q{spec.quality} "
            f"{spec.subsampling}")
    return BenchData(files, [i % NUM_CLASSES for i in range(num_images)], desc, str(root))


def folder_dataset(root: str | os.PathLike, num_images: int | None = None) -> BenchData:
    """JPEGs of a folder: ImageFolder layout (one sub-folder per class, sorted) or flat.

    In a flat folder every target is 0. ``num_images`` keeps the first files in sorted order.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ValueError(f"--data must be a folder of JPEG files, got {str(root)!r}")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    files, targets = [], []
    for name in sorted(p.name for p in root.iterdir() if p.is_file() and p.suffix in JPEG_SUFFIXES):
        files.append(str(root / name))
        targets.append(0)
    for k, c in enumerate(classes):
        for dirpath, dirnames, filenames in sorted(os.walk(root / c)):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(JPEG_SUFFIXES):
                    files.append(os.path.join(dirpath, name))
                    targets.append(k)
    if not files:
        raise ValueError(f"no JPEG files (*.jpg, *.jpeg) found in {str(root)!r}")
    if num_images is not None:
        files, targets = files[:num_images], targets[:num_images]
    files, targets, bad = _readable_jpegs(files, targets)
    if bad:
        shown = ", ".join(f"{os.path.relpath(f, root)} ({why})" for f, why in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        print(f"Skipping {len(bad)} file(s) whose JPEG headers do not parse: {shown}{more}", flush=True)
    if not files:
        raise ValueError(f"no decodable JPEG files in {str(root)!r}")
    layout = f"{len(classes)} classes" if classes else "flat"
    return BenchData(files, targets, f"{root}: {len(files)} JPEGs ({layout})", str(root))


def _readable_jpegs(files, targets):
    """Drop files whose headers do not parse (about 10 us a file: headers only, so a file
    damaged later in its data still fails the run, with its name)."""
    from fastprep import io as fio

    keep_f, keep_t, bad = [], [], []
    for f, t in zip(files, targets):
        try:
            fio.jpeg_info(fio.read_file(f))
        except (fio.DecodeError, OSError) as e:
            bad.append((f, str(e)))
            continue
        keep_f.append(f)
        keep_t.append(t)
    return keep_f, keep_t, bad


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
