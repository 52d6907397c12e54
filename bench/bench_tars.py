"""One epoch over WebDataset tars written by webdataset's own TarWriter, three ways:

* ``fastprep-tars``: ``make_loader(<folder of tars>, recipe="imagenet-train")`` (TarDataset,
  random access through the cached member index; threads engine);
* ``fastprep-files``: the same call on the folder of the JPEG files the tars were made from;
* ``webdataset``: ``wds.WebDataset(urls).shuffle(1000).decode("pil")`` with torchvision's
  ``RandomResizedCrop(224)``, ``RandomHorizontalFlip``, ``ToTensor``, ``Normalize`` in torch's
  ``DataLoader`` (``num_workers`` worker processes).

Runs (``--epochs`` epochs each) alternate (A, B, C, A, B, C, ...); the medians of the time per
epoch are printed, with the load average before. The webdataset runs start their worker
processes each epoch, as torch's DataLoader does without persistent workers.

    python bench/bench_tars.py --src /work/cuts --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

from fastprep._platform import describe


def make_tars(src: str, dst: str, per_tar: int) -> list[str]:
    """The JPEGs of ``src`` (sorted) as tars of ``per_tar`` samples: ``<stem>.jpg`` and
    ``<stem>.cls`` (the file's position mod 10)."""
    import webdataset as wds

    files = sorted(f for f in os.listdir(src) if f.lower().endswith((".jpg", ".jpeg")))
    os.makedirs(dst, exist_ok=True)
    urls = []
    for t in range(0, len(files), per_tar):
        url = os.path.join(dst, f"train-{t // per_tar:06d}.tar")
        with wds.TarWriter(url, encoder=False) as sink:
            for k in range(t, min(t + per_tar, len(files))):
                with open(os.path.join(src, files[k]), "rb") as f:
                    sink.write({"__key__": os.path.splitext(files[k])[0].replace(".", "_"), "jpg": f.read(),
                                "cls": str(k % 10).encode()})
        urls.append(url)
    return urls


def fastprep_epoch(source, batch_size: int, epochs: int) -> tuple[float, int]:
    import fastprep.data as D

    loader = D.make_loader(source, recipe="imagenet-train", batch_size=batch_size, device="cpu", seed=0)
    start = time.perf_counter()
    n = sum(len(y) for _ in range(epochs) for _, y in loader)
    return time.perf_counter() - start, n


def webdataset_epoch(urls: list[str], batch_size: int, workers: int, epochs: int) -> tuple[float, int]:
    import torch
    import torchvision.transforms as TV
    import webdataset as wds

    transform = TV.Compose([TV.RandomResizedCrop(224), TV.RandomHorizontalFlip(), TV.ToTensor(),
                            TV.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    dataset = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(1000).decode("pil")
               .to_tuple("jpg", "cls").map_tuple(transform, int))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    start = time.perf_counter()
    n = sum(len(y) for _ in range(epochs) for _, y in loader)
    return time.perf_counter() - start, n


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default="/work/cuts", help="a flat folder of JPEGs")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (a run's time is per epoch)")
    parser.add_argument("--per-tar", type=int, default=100, help="samples per tar")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of the webdataset run")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        urls = make_tars(args.src, os.path.join(tmp, "tars"), args.per_tar)
        folder = os.path.dirname(urls[0])
        import fastprep.data as D

        start = time.perf_counter()
        ds = D.TarDataset(folder)
        scan = time.perf_counter() - start
        start = time.perf_counter()
        D.TarDataset(folder)
        cached = time.perf_counter() - start
        print(f"{len(ds)} samples in {len(urls)} tars; index: scanned in {scan * 1e3:.0f} ms, "
              f"opened from the cache in {cached * 1e3:.0f} ms")
        print(describe(), "| load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
        runs = {
            "fastprep-tars": lambda epochs: fastprep_epoch(folder, args.batch_size, epochs),
            "fastprep-files": lambda epochs: fastprep_epoch(args.src, args.batch_size, epochs),
            "webdataset": lambda epochs: webdataset_epoch(urls, args.batch_size, args.workers, epochs),
        }
        for run in runs.values():  # warm-up: imports, kernels, page cache
            run(1)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.runs):
            for name, run in runs.items():
                seconds, n = run(args.epochs)
                times[name].append(seconds / args.epochs)
                print(f"run {r + 1} {name:15s} {seconds / args.epochs:6.3f} s/epoch  {n / seconds:7.1f} samples/s",
                      flush=True)
    report = {}
    print(f"\nmedian of {args.runs} runs of {args.epochs} epochs")
    for name, values in times.items():
        median = statistics.median(values)
        report[name] = {"seconds_per_epoch": median, "samples_per_s": len(ds) / median}
        print(f"{name:15s} {median:6.3f} s/epoch  {len(ds) / median:7.1f} samples/s")
    return report


if __name__ == "__main__":
    sys.exit(main() and 0)
