"""How much of the time one loader process holds the GIL, per pipeline, and what that means on a
machine with many cores: the one-process ceiling.

Each pipeline runs in a child process on the threads engine (``fastprep.data.DataLoader`` or
``make_loader``, as its users write it) at full speed; after a warm-up, ``py-spy record --gil``
samples it for ``--seconds`` at ``--rate`` Hz, recording a sample only when one of its threads
holds the GIL. The held fraction is those samples over ``seconds x rate``. One process can never
deliver more than ``samples/s / held fraction`` (its ceiling), however many cores it is given.

    python bench/bench_gil.py --photos /work/cuts --seconds 20

Run-to-run spread is large on a small machine (the held share of one pipeline moved by 3-5 points
between back-to-back runs here): ``--repeat N`` runs every pipeline N times, in rounds (each
round runs them all in turn), and reports the medians with the held share's range.

py-spy (``pip install py-spy``) must be allowed to read the child's memory (root, or
``ptrace_scope`` 0). ``--no-gil`` runs the pipelines and reports samples/s only. Pipelines:
``recipe`` (``make_loader(folder, recipe="imagenet-train")``), ``v2-ta`` (v2 RandomResizedCrop +
TrivialAugmentWide + Normalize + RandomErasing), ``examples-train`` / ``examples-val``
(pytorch/examples' ImageNet pipelines on PIL, ``ImageFolder``), ``dino`` (a DINO-style multi-crop
class, traced), ``timm-train`` (timm ``create_transform`` rand-m9-mstd0.5, traced; needs timm),
``hf-train`` (a Hugging Face dataset with pytorch/examples' train pipeline in ``with_transform``;
needs datasets).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIPELINES = ("recipe", "v2-ta", "examples-train", "examples-val", "dino", "timm-train", "hf-train")


def _folder(top: str, photos: str | None, count: int) -> str:
    """An ImageFolder of 4 classes: the JPEGs of ``photos`` linked, or synthetic photo-like ones."""
    from PIL import Image

    from fastprep.bench.synthetic import photo_like

    files = sorted(glob.glob(os.path.join(photos, "**", "*.jpg"), recursive=True))[:count] if photos else []
    for k in range(len(files) if photos else count):
        folder = os.path.join(top, f"class{k % 4}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{k:04d}.jpg")
        if photos:
            os.symlink(os.path.abspath(files[k]), path)
        else:
            Image.fromarray(photo_like(375, 500, k)).save(path, quality=90)
    return top


def _loader(name: str, root: str, batch_size: int, workers: int):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    import fastprep.data as fd

    kw = dict(batch_size=batch_size, shuffle=True, num_workers=workers, seed=0)
    if name == "recipe":
        return fd.make_loader(root, recipe="imagenet-train", batch_size=batch_size, num_workers=workers, seed=0)
    if name == "v2-ta":
        tf = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                         v2.TrivialAugmentWide(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
                         v2.RandomErasing(0.25)])
        return fd.DataLoader(ImageFolder(root, tf), **kw)
    if name == "examples-train":
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
        return fd.DataLoader(ImageFolder(root, tf), **kw)
    if name == "examples-val":
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
        return fd.DataLoader(ImageFolder(root, tf), **kw)
    if name == "dino":
        from fastprep.bench.unchanged import DataAugmentationDINO

        return fd.DataLoader(ImageFolder(root, DataAugmentationDINO()), **kw)
    if name == "timm-train":
        from fastprep.bench.unchanged import timm_train

        return fd.DataLoader(ImageFolder(root, timm_train(224)), **kw)
    if name == "hf-train":
        import datasets

        train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])

        def preprocess(batch):
            batch["pixel_values"] = [train(image.convert("RGB")) for image in batch["image"]]
            del batch["image"]
            return batch

        files = sorted(glob.glob(os.path.join(root, "*", "*.jpg")))
        images = []
        for path in files:
            with open(path, "rb") as f:
                images.append({"bytes": f.read(), "path": None})
        features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=4)})
        ds = datasets.Dataset.from_dict({"image": images, "label": [k % 4 for k in range(len(images))]},
                                        features=features)
        saved = root.rstrip(os.sep) + "-hf"  # beside the ImageFolder: a folder in it would be a class
        if not os.path.isdir(saved):
            ds.save_to_disk(saved)
        return fd.DataLoader(datasets.load_from_disk(saved).with_transform(preprocess), **kw)
    raise ValueError(f"unknown pipeline {name!r}; one of {', '.join(PIPELINES)}")


def _count(batch) -> int:
    if isinstance(batch, dict):
        return int(next(v for v in batch.values() if isinstance(v, torch.Tensor)).shape[0])
    return int(batch[1].shape[0])


def child(name: str, root: str, batch_size: int, workers: int, seconds: float, warmup: float) -> None:
    """Run one pipeline: warm up for ``warmup`` seconds, say READY, then iterate for ``seconds``
    and print its rate."""
    loader = _loader(name, root, batch_size, workers)
    if getattr(loader, "engine", "threads") != "threads":
        print(f"ENGINE {loader.engine}: {loader.engine_reason}", flush=True)
    it = iter(loader)
    start = time.perf_counter()
    for k in itertools.count():  # two batches, then until the warm-up is over (tracing processes started)
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
        if k >= 1 and time.perf_counter() - start >= warmup:
            break
    print("READY", flush=True)
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        for batch in it:
            n += _count(batch)
            if time.perf_counter() - start >= seconds:
                break
        else:
            it = iter(loader)
    print(f"RATE {n / (time.perf_counter() - start):.3f}", flush=True)


def _gil_samples(path: str) -> int:
    total = 0
    with open(path) as f:
        for line in f:
            line = line.rstrip()
            if line:
                total += int(line.rsplit(" ", 1)[1])
    return total


def measure(name: str, root: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--root", root, "--batch-size",
           str(args.batch_size), "--workers", str(args.workers), "--seconds", str(args.seconds),
           "--warmup", str(args.warmup)]
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True)
    assert proc.stdout is not None
    engine = "threads"
    line = proc.stdout.readline()
    while line and not line.startswith("READY"):
        if line.startswith("ENGINE"):
            engine = line.split()[1].rstrip(":")
        line = proc.stdout.readline()
    held = None
    if args.gil and line:
        with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as out:
            raw = out.name
        spy = subprocess.run([args.py_spy, "record", "--gil", "--rate", str(args.rate), "--format", "raw",
                              "--output", raw, "--pid", str(proc.pid), "--duration", str(int(args.seconds))],
                             capture_output=True, text=True)
        if spy.returncode == 0 and os.path.exists(raw):
            held = _gil_samples(raw) / (args.rate * int(args.seconds))
        else:
            print(f"  py-spy failed on {name}: {spy.stderr.strip()[-300:]}")
        if os.path.exists(raw):
            os.unlink(raw)
    rate = None
    with proc.stdout:
        for line in proc.stdout:
            if line.startswith("RATE"):
                rate = float(line.split()[1])
    if proc.wait() != 0:
        errors.seek(0)
        print(f"  {name} failed (exit {proc.returncode}): {errors.read().strip()[-400:]}")
    errors.close()
    return {"pipeline": name, "engine": engine, "samples_per_s": rate, "gil_held": held,
            "gil_us_per_sample": None if held is None or not rate else held * 1e6 / rate,
            "ceiling_per_s": None if not held or not rate else rate / held}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", help="a folder of JPEGs (default: synthetic)")
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--pipelines", default=",".join(PIPELINES))
    parser.add_argument("--seconds", type=float, default=20.0, help="sampled seconds per pipeline")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds each pipeline runs before it is sampled (traced pipelines start their tracing "
                             "processes after 512 samples)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per pipeline, in rounds; the report gives medians and the GIL share's range")
    parser.add_argument("--no-gil", dest="gil", action="store_false", help="samples/s only, no py-spy")
    parser.add_argument("--quick", action="store_true", help="24 synthetic images, 2 s, examples-train only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.root, args.batch_size, args.workers, args.seconds, args.warmup)
        return {}
    if args.quick:
        args.count, args.photos, args.seconds, args.batch_size, args.warmup = 24, None, 2.0, 8, 0.0
        args.pipelines = "examples-train"
    args.py_spy = shutil.which("py-spy")
    if args.gil and args.py_spy is None:
        print("py-spy not found (pip install py-spy): samples/s only")
        args.gil = False
    from fastprep._platform import describe

    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    print(f"CPU: {describe().removeprefix('CPU: ')}, load {' '.join(f'{x:.1f}' for x in load)}; "
          f"Python {platform.python_version()}, torch {torch.__version__}")
    print(f"{args.count} JPEGs from {args.photos or '(synthetic)'}, batch {args.batch_size}, "
          f"num_workers={args.workers}, {args.seconds:g} s per pipeline after {args.warmup:g} s of warm-up"
          + (f", py-spy --gil at {args.rate} Hz" if args.gil else ""))
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    names = [name.strip() for name in args.pipelines.split(",")]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        root = _folder(os.path.join(tmp, "images"), args.photos, args.count)  # the HF copy goes beside it
        for k in range(args.repeat):
            if args.repeat > 1:
                print(f"round {k + 1} of {args.repeat}", flush=True)
            for name in names:
                runs[name].append(measure(name, root, args))
    rows = [_median_row(runs[name]) for name in names]
    print(f"{'pipeline':16s} {'engine':9s} {'samples/s':>10s} {'GIL held':>9s} {'GIL/sample':>11s} "
          f"{'ceiling/s':>10s}" + ("  held range" if args.repeat > 1 else ""))

    def fmt(value, spec: str, unit: str = "") -> str:
        return "-" if value is None else f"{value:{spec}}{unit}"

    for r in rows:
        spread = ""
        if args.repeat > 1 and r["gil_held_range"] is not None:
            low, high = r["gil_held_range"]
            spread = f"  {100 * low:.1f}-{100 * high:.1f}%"
        print(f"{r['pipeline']:16s} {r['engine']:9s} {fmt(r['samples_per_s'], '10.0f')} "
              f"{fmt(None if r['gil_held'] is None else 100 * r['gil_held'], '8.1f', '%'):>9s} "
              f"{fmt(r['gil_us_per_sample'], '8.0f', ' us'):>11s} {fmt(r['ceiling_per_s'], '10.0f')}{spread}")
    return {"rows": rows, "runs": runs}


def _median_row(runs: list[dict]) -> dict:
    """One pipeline's runs as one row: the median of each figure over the runs that gave it,
    and the range of the GIL share."""

    def median(key: str):
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    held = [r["gil_held"] for r in runs if r["gil_held"] is not None]
    row = dict(runs[0])
    for key in ("samples_per_s", "gil_held", "gil_us_per_sample", "ceiling_per_s"):
        row[key] = median(key)
    row["gil_held_range"] = (min(held), max(held)) if held else None
    row["runs"] = len(runs)
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
