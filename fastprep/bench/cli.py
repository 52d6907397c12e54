"""Command line: ``python -m fastprep.bench [options]`` and ``python -m fastprep.bench diagnose``."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

__all__ = ["main"]

QUICK = {"num_images": 128, "steps": 8, "warmup": 2}
DEFAULTS = {"num_images": 512, "steps": 30, "warmup": 5}


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return list(dict.fromkeys(values))


def _pipeline_list(text: str) -> list[str]:
    from .pipelines import PIPELINES

    names = [v.strip() for v in text.split(",") if v.strip()]
    if names == ["all"]:
        return list(PIPELINES)
    bad = [n for n in names if n not in PIPELINES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown pipeline(s) {bad or text!r}; choose from {', '.join(PIPELINES)}")
    return names


def _positive(kind):
    def parse(text):
        v = kind(text)
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return v

    return parse


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="DIR", help="folder of your JPEGs (ImageFolder layout or flat); default: a "
                   "built-in synthetic set of 533x800 q90 4:2:0 photos, generated once and cached under "
                   "$FASTPREP_CACHE (default ~/.cache/fastprep)")
    g.add_argument("--num-images", type=_positive(int), metavar="N",
                   help=f"images to use (default {DEFAULTS['num_images']}, --quick {QUICK['num_images']})")
    g = p.add_argument_group("pipelines")
    g.add_argument("--pipelines", type=_pipeline_list, default=None, metavar="A,B",
                   help="comma-separated: reference, reference-optimized, fastprep, fastprep-ycbcr (default all)")
    g.add_argument("--batch-size", type=_positive(int), default=64)
    g.add_argument("--crop-size", type=_positive(int), default=256)
    g.add_argument("--mask-ratio", type=float, default=0.25)
    g.add_argument("--mp-context", choices=["fork", "spawn", "forkserver"], default=None,
                   help="DataLoader multiprocessing context (default: the platform's)")
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("trainer")
    g.add_argument("--device", default="auto",
                   help="auto (CUDA if available, else sim), sim (simulated accelerator), cpu (the real model on "
                        "the CPU, competing with the workers), cuda[:i]")
    g.add_argument("--step-ms", type=float, default=None,
                   help="simulated accelerator's time per batch (default: the toy CNN's FLOPs at an assumed "
                        "6 TFLOP/s mid-range GPU; 49 ms for batch 64 at 256x256)")
    g.add_argument("--threads", type=_positive(int), default=None,
                   help="torch threads in this (the training) process; default 1 with the simulated accelerator "
                        "(like DataLoader workers; tiny multithreaded ops only contend with the workers), "
                        "torch's default otherwise")
    g = p.add_argument_group("measurement")
    g.add_argument("--steps", type=_positive(int), help=f"measured steps per configuration (default "
                   f"{DEFAULTS['steps']}, --quick {QUICK['steps']})")
    g.add_argument("--warmup", type=int, help=f"warm-up steps, not measured (default {DEFAULTS['warmup']}, "
                   f"--quick {QUICK['warmup']})")
    g.add_argument("--quick", action="store_true", help="fewer images and steps: a smoke test in under 2 minutes")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--json", metavar="FILE", help="write every figure and the machine description as JSON")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fastprep.bench",
        description="Is your GPU starving, where does the time go, and how much does fastprep buy? Runs a toy "
                    "CNN fed by a DataLoader from JPEG files with each input pipeline and worker count, and "
                    "reports throughput, accelerator starvation and speed-ups vs the reference pipeline.",
        epilog="Subcommand: `python -m fastprep.bench diagnose --help` runs the caching ladder that shows which "
               "stage (I/O, decode+transforms, collate/IPC, host-to-device) loses the most.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _common(p)
    p.add_argument("--workers", type=_int_list, default=None, metavar="0,1,N",
                   help="DataLoader worker counts (default 0, 1 and all usable cores)")
    p.add_argument("--plot", metavar="FILE.png", help="bar chart of samples/s and starvation per pipeline x workers")
    p.add_argument("--profile", metavar="DIR", help="also write a torch.profiler trace per pipeline (workers=0, "
                   "every transform, collate, H2D copy and train step labelled) under DIR")
    p.add_argument("--profile-steps", type=_positive(int), default=4, help="steps recorded by --profile")
    p.add_argument("--itt", action="store_true", help="emit the same labelled ranges through torch.profiler.itt "
                   "(Intel VTune): a labelled pass per pipeline as --profile does, when available")
    p.add_argument("--check-syncs", action="store_true", help="CUDA only: fail on any host-device synchronisation "
                   "during the measured steps (torch.cuda.set_sync_debug_mode('error'))")
    return p


def build_diagnose_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fastprep.bench diagnose",
        description="The caching ladder, per pipeline: throughput with (1) one batch cached on the device, (2) one "
                    "batch cached on the host, (3) one processed sample cached in the dataset, (4) raw bytes "
                    "cached before the transforms, (5) the full pipeline. The biggest drop between rungs names "
                    "the stage that loses the most.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _common(p)
    p.add_argument("--workers", type=int, default=None, metavar="N", help="DataLoader workers (default: all usable "
                   "cores)")
    return p


def _resolve(args) -> None:
    preset = QUICK if args.quick else DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.warmup < 0:
        raise SystemExit(f"--warmup must be >= 0, got {args.warmup}")
    if not 0 <= args.mask_ratio <= 1:
        raise SystemExit(f"--mask-ratio must be in [0, 1], got {args.mask_ratio}")
    if args.pipelines is None:
        from .pipelines import PIPELINES

        args.pipelines = list(PIPELINES)


def _set_threads(args, trainer) -> None:
    import torch

    threads = args.threads if args.threads is not None else (1 if trainer.simulated else None)
    if threads is not None:
        torch.set_num_threads(threads)


def _load_data(args):
    from .dataset import builtin_dataset, folder_dataset

    if args.data:
        data = folder_dataset(args.data, args.num_images)
    else:
        data = builtin_dataset(args.num_images, progress=not args.no_progress)
    # the real trainer's classifier needs an output per class of the user's folders
    args.num_classes = max(10, max(data.targets, default=0) + 1)
    return data


def _trainer_line(trainer, args) -> str:
    from .trainer import ASSUMED_GPU_TFLOPS, train_step_flops

    if trainer.simulated:
        gflop = train_step_flops(args.batch_size, args.crop_size) / 1e9
        how = ("set by --step-ms" if args.step_ms is not None else
               f"toy CNN at batch {args.batch_size}, {args.crop_size}x{args.crop_size}: {gflop:.0f} GFLOP per "
               f"training step at an assumed {ASSUMED_GPU_TFLOPS:g} TFLOP/s, a mid-range GPU in fp32")
        cap = args.batch_size / trainer.step_s
        return (f"Trainer: simulated accelerator, {trainer.step_s * 1e3:.0f} ms/step ({how}); it can take at most "
                f"{cap:.0f} samples/s")
    return f"Trainer: ToyNet on {trainer.device} (CrossEntropy, SGD momentum 0.9)"


def run(args) -> int:
    import torch

    from . import report
    from .pipelines import PipelineConfig, get_pipeline
    from .profiling import itt_available
    from .runner import ConfigResult, measure, slack_batches
    from .trainer import make_trainer

    _resolve(args)
    if args.workers is None:
        args.workers = list(dict.fromkeys([0, 1, _usable_cores()]))
    if args.check_syncs and not (args.device.startswith("cuda") or (args.device == "auto"
                                                                    and torch.cuda.is_available())):
        print("--check-syncs: needs a CUDA device; ignored on this run", flush=True)
    if args.itt and not itt_available():
        print("--itt: torch.profiler.itt is not available in this build; ignored", flush=True)
        args.itt = False

    started = time.perf_counter()
    data = _load_data(args)
    probe = make_trainer(args.device, args.step_ms, args.batch_size, args.crop_size,
                                 getattr(args, "num_classes", 10))
    device_name = "sim" if probe.simulated else str(probe.device)
    _set_threads(args, probe)
    print(f"Data: {data.description}")
    print(_trainer_line(probe, args))
    capacity = args.batch_size / probe.step_s if probe.simulated and probe.step_s > 0 else None
    print(f"Measuring {args.steps} steps after {args.warmup} warm-up steps, batch {args.batch_size}, crop "
          f"{args.crop_size}, mask ratio {args.mask_ratio}, workers {', '.join(map(str, args.workers))}", flush=True)

    configs = []
    for name in args.pipelines:
        pipe = get_pipeline(name)
        reason = pipe.unavailable()
        if reason:
            print(f"Skipping {name}: {reason}", flush=True)
        for w in args.workers:
            configs.append((pipe, w, reason))
    from tqdm import tqdm

    total = sum(args.warmup + args.steps for _, _, r in configs if not r)
    bar = tqdm(total=total, unit="step", disable=args.no_progress, leave=False, dynamic_ncols=True)
    results = []
    failed = False
    for pipe, w, reason in configs:
        res = ConfigResult(pipe.name, w, args.batch_size, args.steps, args.warmup)
        if reason:
            res.skipped = reason
            results.append(res.as_dict())
            continue
        bar.set_description(f"{pipe.name}, {w} workers")
        cfg = PipelineConfig(crop_size=args.crop_size, mask_ratio=args.mask_ratio, batch_size=args.batch_size,
                             num_workers=w, device=probe.device, seed=args.seed,
                             multiprocessing_context=args.mp_context)
        trainer = make_trainer(args.device, args.step_ms, args.batch_size, args.crop_size,
                                 getattr(args, "num_classes", 10))
        torch.manual_seed(args.seed)
        length = (args.warmup + args.steps + slack_batches(w)) * args.batch_size
        done_before = bar.n
        try:
            measure(lambda: pipe.loader(data.files, data.targets, length, cfg), trainer, steps=args.steps,
                    warmup=args.warmup, result=res, crop=args.crop_size, on_step=bar.update,
                    check_syncs=args.check_syncs)
        except Exception as e:  # noqa: BLE001 - report it, run the rest, exit non-zero
            failed = True
            res.error = f"{type(e).__name__}: {e}"
            bar.clear()
            print(f"{pipe.name} with {w} workers failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            bar.update(args.warmup + args.steps - (bar.n - done_before))
        results.append(res.as_dict())
    bar.close()

    refs = {r["workers"]: r["samples_per_s"] for r in results if r["pipeline"] == "reference" and r["samples_per_s"]}
    for r in results:
        if r["samples_per_s"] and r["workers"] in refs:
            r["speedup_vs_reference"] = r["samples_per_s"] / refs[r["workers"]]

    print()
    print(report.format_table(results))
    print()
    diag = report.diagnosis(results, capacity)
    print(diag)
    best = report.best_per_pipeline(results)
    if "reference" in best and len(best) > 1:
        ref = best["reference"]["samples_per_s"]
        print("Best vs best reference: " + ", ".join(
            f"{p} {r['samples_per_s'] / ref:.2f}x ({report.workers_text(r['workers'])})" for p, r in best.items()
            if p != "reference"))

    if args.profile or args.itt:
        from .profiling import profile_pipelines

        runnable = list(dict.fromkeys(p for p, _, reason in configs if not reason))
        print(f"Profiling {', '.join(p.name for p in runnable)} ({args.profile_steps} labelled steps each, 0 workers)"
              + (", emitting ITT ranges" if args.itt else ""), flush=True)
        for path in profile_pipelines(args, data, runnable, make_trainer):
            print(f"Profile trace: {path}")

    elapsed = time.perf_counter() - started
    out = {
        "command": " ".join(["python -m fastprep.bench", *args.argv]),
        "settings": {"data": data.description, "data_root": data.root, "num_images": len(data.files),
                     "batch_size": args.batch_size, "crop_size": args.crop_size, "mask_ratio": args.mask_ratio,
                     "steps": args.steps, "warmup": args.warmup, "workers": args.workers,
                     "pipelines": args.pipelines, "device": device_name,
                     "step_ms": probe.step_s * 1e3 if probe.simulated else None,
                     "accelerator_capacity_samples_per_s": capacity, "seed": args.seed,
                     "mp_context": args.mp_context, "quick": args.quick,
                     "main_process_threads": torch.get_num_threads()},
        "machine": report.machine_info(str(probe.device)),
        "results": results,
        "diagnosis": diag,
        "elapsed_s": elapsed,
    }
    if args.json:
        report.write_json(args.json, out)
        print(f"JSON: {args.json}")
    if args.plot:
        report.plot_results(args.plot, results, capacity_samples_per_s=capacity,
                            title=f"{data.description}; {_trainer_line(probe, args).split(' (')[0]}")
        print(f"Plot: {args.plot}")
    print(f"Total time {elapsed:.0f} s")
    return 1 if failed else 0


def run_diagnose(args) -> int:
    from . import report
    from .diagnose import diagnose_pipelines, format_ladder

    _resolve(args)
    if args.workers is None:
        args.workers = _usable_cores()
    started = time.perf_counter()
    data = _load_data(args)
    print(f"Data: {data.description}")
    ladders, lines, trainer_line = diagnose_pipelines(args, data)
    print(trainer_line)
    print()
    print(format_ladder(ladders))
    print()
    for line in lines:
        print(line)
    elapsed = time.perf_counter() - started
    if args.json:
        report.write_json(args.json, {"command": " ".join(["python -m fastprep.bench", *args.argv]),
                                      "machine": report.machine_info(args.device), "ladders": ladders,
                                      "diagnosis": lines, "elapsed_s": elapsed})
        print(f"JSON: {args.json}")
    print(f"Total time {elapsed:.0f} s")
    return 1 if any(r.get("error") for rungs in ladders.values() for r in rungs) else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (non-zero when a configuration failed)."""
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "diagnose":
        args, command = build_diagnose_parser().parse_args(argv[1:]), run_diagnose
    else:
        parser = build_parser()
        args, command = parser.parse_args(argv[1:] if argv and argv[0] == "run" else argv), run
        if args.plot:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                parser.error("--plot needs matplotlib: pip install matplotlib (or fastprep[bench])")
    args.argv = argv
    threads = torch.get_num_threads()
    try:
        return command(args)
    finally:
        torch.set_num_threads(threads)  # callers in the same process keep their setting
