"""Standard recipes benchmark: decode + RandomResizedCrop(224) + horizontal flip (train) and
decode + Resize(256) + CenterCrop(224) (eval) to a uint8 tensor, one thread.

Inputs: photo-like JPEGs made with Pillow (smooth gradients, hard-edged objects, texture
and noise; q90, 4:2:0): ImageNet-sized 500x375 and 12 MP 4000x3000, a few distinct images
each. Pipelines, all ending in a uint8 ``[3, 224, 224]`` tensor:

* fastprep: ``DecodeRandomResizedCrop(224, flip_p=0.5)`` / ``DecodeResizeCenterCrop()``,
  with DCT scaling (default) and without;
* torchvision v2: ``torchvision.io.decode_jpeg`` + ``v2.RandomResizedCrop(224)`` +
  ``v2.RandomHorizontalFlip()`` / ``v2.Resize(256)`` + ``v2.CenterCrop(224)``;
* Pillow: ``Image.open`` + the same v2 transforms on the PIL image + ``v2.PILToTensor``;
* fastprep, packed file: the same fastprep transforms on the same images after
  ``fastprep.io.transcode_jpeg`` (lossless re-encode with restart markers, identical
  pixels), i.e. the files ``python -m fastprep.pack`` writes; the ratio column stays
  "vs torchvision v2 on the original file";
* DALI CPU (optional, only where ``nvidia.dali`` imports; not a fastprep dependency, e.g.
  ``pip install nvidia-dali-cuda120``; ``--no-dali`` leaves it out): a CPU-only pipeline
  (``device_id=None``, ``num_threads=1``, ``batch_size=1``, synchronous executor) fed by
  ``fn.external_source`` with the encoded bytes: ``fn.decoders.image(device="cpu")`` +
  ``fn.random_resized_crop(size=224)`` + ``fn.flip(horizontal=fn.random.coin_flip())``
  (train), the fused crop decode ``fn.decoders.image_random_crop`` + ``fn.resize`` + the
  same flip (train, second row), ``fn.decoders.image`` + ``fn.resize(resize_shorter=256)``
  + ``fn.crop(crop=(224, 224))`` (eval). One sample per ``pipe.run()``: a DALI row is
  ``feed_input`` + ``run()`` (its call and scheduling overhead included) + a copy of the
  HWC output out of DALI's buffer (reused by the next run) into a tensor returned as a
  CHW view. DALI is built for batches and several threads; this is its per-sample,
  one-thread cost, the unit the other rows are in.

A resize table compares ``fastprep.resize.resize`` (on the CHW window a fastprep decode
returns) with ``v2.functional.resize`` on torchvision's decode (channels-last strided).

Methods take turns in blocks of --block samples, so machine noise hits all alike; the
tables give the median ms per sample and the ratio to torchvision v2 in the same run.

With --quality it instead prints the PSNR of the DCT-scaled outputs against torchvision
v2 on the full decode, per DCT scale, and with --png saves a side-by-side picture.

    python bench/bench_recipes.py [--runs 200] [--runs-12mp 30] [--json out.json] [--no-dali]
    python bench/bench_recipes.py --quality [--png docs/recipes_rrc.png]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time

import numpy as np
import PIL.Image
import torch
import torchvision.io
from torchvision.transforms import v2

import fastprep.io as fio
from fastprep import _platform
from fastprep.bench.synthetic import photo_like
from fastprep.resize import resize
from fastprep.transforms import DecodeRandomResizedCrop, DecodeResizeCenterCrop, plan_scaled_window


def make_jpegs(height, width, count):
    out = []
    for seed in range(count):
        buf = io.BytesIO()
        PIL.Image.fromarray(photo_like(height, width, seed)).save(buf, "JPEG", quality=90, subsampling="4:2:0")
        out.append(buf.getvalue())
    return out


def dali_status():
    """(nvidia.dali module or None, a line saying what DALI rows there are or why none)."""
    try:
        import nvidia.dali as dali
        from nvidia.dali import fn, pipeline_def, types  # noqa: F401
    except Exception as e:  # not installed, or its import fails (no CUDA is fine for CPU)
        return None, f"DALI rows skipped: nvidia.dali does not import ({type(e).__name__}: {e})"
    try:  # a CPU-only pipeline must build and run here (no GPU needed)
        probe = torch.frombuffer(bytearray(make_jpegs(64, 64, 1)[0]), dtype=torch.uint8)
        for run in dali_pipelines("eval", size=(32, 32)).values():
            run(probe)
    except Exception as e:
        return None, (f"DALI rows skipped: DALI {dali.__version__} imports but a CPU-only pipeline fails "
                      f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    return dali, f"DALI {dali.__version__}: CPU-only pipelines (device_id=None), one thread, one sample per run()"


def dali_pipelines(kind, size=(256, 224)):
    """DALI CPU pipelines for the recipe, each wrapped as data tensor -> uint8 [3, 224, 224]
    (``size``: the eval recipe's resize and crop sizes)."""
    from nvidia.dali import fn, pipeline_def, types

    def graph(variant):
        enc = fn.external_source(name="enc", dtype=types.UINT8, ndim=1)
        if variant == "fused":
            img = fn.decoders.image_random_crop(enc, device="cpu", output_type=types.RGB)
            img = fn.resize(img, size=(224, 224))
        else:
            img = fn.decoders.image(enc, device="cpu", output_type=types.RGB)
            if variant == "train":
                img = fn.random_resized_crop(img, size=224)
            else:
                img = fn.crop(fn.resize(img, resize_shorter=size[0]), crop=(size[1], size[1]))
        if variant != "eval":
            img = fn.flip(img, horizontal=fn.random.coin_flip())
        return img

    def wrap(variant):
        # synchronous executor: run() decodes and transforms the sample just fed, no prefetch
        pipe = pipeline_def(graph, batch_size=1, num_threads=1, device_id=None, seed=0,
                            prefetch_queue_depth=1, exec_async=False, exec_pipelined=False)(variant)
        pipe.build()

        def run(d):
            pipe.feed_input("enc", [d.numpy()])
            (out,) = pipe.run()
            return torch.from_numpy(np.array(out[0])).permute(2, 0, 1)

        return run

    if kind == "train":
        return {"DALI CPU, decoders.image + random_resized_crop + flip": wrap("train"),
                "DALI CPU, fused decoders.image_random_crop + resize + flip": wrap("fused")}
    return {"DALI CPU, decoders.image + resize + crop": wrap("eval")}


def pipelines(kind, packed=None, dali=False):
    """The recipe's methods, each taking an original file's data tensor. ``packed`` maps
    id(data) to that file transcoded (the packed rows decode it instead); ``dali`` adds
    the DALI rows."""
    if kind == "train":
        tv = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()])
        pil = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor()])
        ours = DecodeRandomResizedCrop(224, flip_p=0.5)
        ours_nodct = DecodeRandomResizedCrop(224, flip_p=0.5, dct_scaling=False)
    else:
        tv = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])
        pil = v2.Compose([v2.Resize(256), v2.CenterCrop(224), v2.PILToTensor()])
        ours = DecodeResizeCenterCrop(256, 224)
        ours_nodct = DecodeResizeCenterCrop(256, 224, dct_scaling=False)
    methods = {
        "torchvision v2": lambda d: tv(torchvision.io.decode_jpeg(d)),
        "Pillow": lambda d: pil(PIL.Image.open(io.BytesIO(d.numpy().tobytes())).convert("RGB")),
        "fastprep, DCT scaling": ours,
        "fastprep, no DCT scaling": ours_nodct,
    }
    if packed is not None:
        methods["fastprep, packed file (DCT scaling)"] = lambda d: ours(packed[id(d)])
        methods["fastprep, packed file (no DCT scaling)"] = lambda d: ours_nodct(packed[id(d)])
    if dali:
        methods.update(dali_pipelines(kind))
    return methods


def measure(methods, datas, runs, block):
    """Median seconds per sample of each method; methods take turns in blocks."""
    times = {name: [] for name in methods}
    for fn in methods.values():  # warm-up
        for d in datas:
            out = fn(d)
            assert out.shape[-2:] == (224, 224) and out.dtype == torch.uint8, out.shape
    done = 0
    while done < runs:
        n = min(block, runs - done)
        for name, fn in methods.items():
            for k in range(n):
                d = datas[(done + k) % len(datas)]
                t0 = time.perf_counter()
                fn(d)
                times[name].append(time.perf_counter() - t0)
        done += n
    return {name: statistics.median(v) for name, v in times.items()}


def resize_methods(data):
    """Resize of a 300x320 window to 224x224 from each decoder's native layout."""
    ours_in = fio.decode_jpeg_roi(data, 20, 30, 300, 320)
    tv_in = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))[:, 20:320, 30:350]
    chw = tv_in.contiguous()
    return {
        "torchvision v2 resize (tv decode, channels-last)": lambda _: v2.functional.resize(tv_in, [224, 224]),
        "torchvision v2 resize (CHW-contiguous)": lambda _: v2.functional.resize(chw, [224, 224]),
        "fastprep.resize (fastprep decode, CHW)": lambda _: resize(ours_in, (224, 224)),
        "fastprep.resize + hflip": lambda _: resize(ours_in, (224, 224), hflip=True),
    }


def table(title, result, ref, ref_label=None):
    print(f"\n{title}")
    print(f"| method | ms/sample | vs {ref_label or ref} |")
    print("|---|---:|---:|")
    for name, t in result.items():
        print(f"| {name} | {t * 1e3:.3f} | {result[ref] / t:.2f}x |")


def psnr(a, b) -> float:
    mse = ((a.double() - b.double()) ** 2).mean().item()
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def quality(args):
    """PSNR of DCT-scaled recipes against v2 on the full decode, per DCT scale."""
    ours, ref = DecodeRandomResizedCrop(224), v2.RandomResizedCrop(224)
    per_scale, examples = {}, {}
    for hw, count, seeds in (((375, 500), args.images, 50), ((3000, 4000), 2, 25)):
        for data in make_jpegs(*hw, count):
            full = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            for seed in range(seeds):
                torch.manual_seed(seed)
                window = ours.get_params(*hw)
                num = plan_scaled_window(*hw, window, (224, 224))[0]
                torch.manual_seed(seed)
                a = ours(data)
                torch.manual_seed(seed)
                b = ref(full)
                per_scale.setdefault(num, []).append(psnr(a, b))
                examples.setdefault(num, (a, b))
    print("\nDecodeRandomResizedCrop(224) vs v2.RandomResizedCrop(224) on the full decode, photo-like "
          "500x375 and 4000x3000 q90 4:2:0")
    print("| DCT scale | windows | median PSNR (dB) | min PSNR (dB) |")
    print("|---|---:|---:|---:|")
    for num in sorted(per_scale):
        v = per_scale[num]
        print(f"| {num}/8 | {len(v)} | {np.median(v):.1f} | {min(v):.1f} |")
    evals = []
    for hw in ((375, 500), (3000, 4000)):
        for data in make_jpegs(*hw, 2):
            full = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            evals.append((hw, psnr(DecodeResizeCenterCrop()(data),
                                   v2.Compose([v2.Resize(256), v2.CenterCrop(224)])(full))))
    print("\nDecodeResizeCenterCrop(256, 224) vs v2 Resize(256) + CenterCrop(224): " +
          ", ".join(f"{h}x{w}: {p:.1f} dB" for (w, h), p in evals))
    if args.png:
        rows = [torch.cat([b, torch.full((3, 224, 8), 255, dtype=torch.uint8), a], 2)
                for num, (a, b) in sorted(examples.items())]
        sheet = torch.cat([torch.cat([r, torch.full((3, 8, r.shape[2]), 255, dtype=torch.uint8)], 1)
                           for r in rows], 1)
        PIL.Image.fromarray(sheet.permute(1, 2, 0).contiguous().numpy()).save(args.png)
        print(f"saved {args.png}: rows = DCT scales {sorted(examples)}; left v2 on the full decode, "
              "right fastprep DCT-scaled")
    return {str(k): v for k, v in per_scale.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200, help="samples per method at 500x375 (default 200)")
    ap.add_argument("--runs-12mp", type=int, default=30, help="samples per method at 4000x3000 (default 30)")
    ap.add_argument("--block", type=int, default=10, help="samples per turn (default 10)")
    ap.add_argument("--images", type=int, default=4, help="distinct images per size (default 4)")
    ap.add_argument("--json", help="write the medians (seconds) here")
    ap.add_argument("--quality", action="store_true", help="PSNR per DCT scale instead of timings")
    ap.add_argument("--png", help="with --quality: save a side-by-side picture here")
    ap.add_argument("--no-dali", action="store_true", help="leave the DALI rows out even if DALI imports")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(_platform.describe())
    if args.quality:
        quality(args)
        return
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow {PIL.__version__}, "
          "one thread")
    dali, dali_line = (None, "DALI rows skipped: --no-dali") if args.no_dali else dali_status()
    print(dali_line)
    results = {}
    for label, hw, runs in (("500x375", (375, 500), args.runs), ("4000x3000", (3000, 4000), args.runs_12mp)):
        files = make_jpegs(*hw, args.images)
        datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in files]
        packed = {id(d): torch.frombuffer(bytearray(fio.transcode_jpeg(b)), dtype=torch.uint8)
                  for d, b in zip(datas, files)}
        for kind in ("train", "eval"):
            torch.manual_seed(0)
            res = measure(pipelines(kind, packed, dali is not None), datas, runs, args.block)
            results[f"{kind} {label}"] = res
            what = "RandomResizedCrop(224) + flip" if kind == "train" else "Resize(256) + CenterCrop(224)"
            table(f"{kind}, {label} ({len(datas)} images, {runs} samples each): decode + {what}",
                  res, "torchvision v2", "torchvision v2 on the original file, same run")
    res = measure(resize_methods(make_jpegs(375, 500, 1)[0]), [None], args.runs, args.block)
    results["resize 300x320 -> 224"] = res
    table("resize 300x320 -> 224x224, uint8, antialiased bilinear", res,
          "torchvision v2 resize (tv decode, channels-last)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"platform": _platform.describe(), "dali": dali_line, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
