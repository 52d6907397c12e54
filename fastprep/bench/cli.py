"""Command line: ``python -m fastprep.bench [options]`` and ``python -m fastprep.bench diagnose``.

The parsers turn the command line into a :class:`~fastprep.bench.config.BenchConfig`;
:func:`run` and :func:`run_diagnose` take that config (call them from Python with one you
build). Exit status: 0 when every configuration ran, 1 when one failed, 2 for bad
arguments or data that cannot be benchmarked (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, NamedTuple

import torch

from fastprep._platform import describe

from . import report
from .config import (BUILTIN_SIZES, DEFAULTS, LARGE_DEFAULTS, LARGE_QUICK, ON_ERROR, QUICK, QUICK_FLOOR,
                     QUICK_MAX_STEPS, QUICK_MIN_WINDOW_S, TARGET_RATE, TARGET_SOURCE, BenchConfig, trainer_line,
                     usable_cores)
from .dataset import BenchData, BenchDataError, builtin_dataset, folder_dataset, mean_megapixels, show_progress
from .pipelines import PIPELINES, Pipeline
from .recipes import RECIPE_PIPELINES, RECIPES, get_recipe_pipeline
from .runner import ConfigResult, measure, one_line_error, slack_batches
from .trainer import NullConsumer, Trainer
from .uncapped import (CAPPED_STARVATION, CORES_DEFINITION, best_vs_reference, format_uncapped, is_capped,
                       packed_gap_line, uncapped_entry, uncapped_workers)

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["build_diagnose_parser", "build_parser", "config_from_args", "load_data", "main", "run", "run_diagnose"]

#: Skipped files listed by name before the list is cut short (the JSON has them all).
MAX_LISTED = 20


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return list(dict.fromkeys(values))


def _pipeline_list(text: str) -> list[str] | None:
    names = [v.strip() for v in text.split(",") if v.strip()]
    if names == ["all"]:
        return None
    known = set(PIPELINES).union(*RECIPE_PIPELINES.values())
    bad = [n for n in names if n not in known]
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


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` only where the help text does not state its default
    already, and never for ``None`` or ``False`` (a preset or an off switch)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


#: What ``--workers`` counts, per engine (the help of both parsers and of --engine).
WORKERS_MEANING = ("each row's loader workers: native decode threads for the rows on make_loader's threads engine "
                   "(fastprep, fastprep-packed), DataLoader worker processes for the others, Ray actors with "
                   "--engine ray; 0: everything in this process")


def _common(p: argparse.ArgumentParser, table: bool = True) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="DIR", help="folder of your JPEGs (ImageFolder layout or flat; an s3:// URL "
                   "runs the object storage measurement instead: python -m fastprep.bench --data s3://B/P/ --help); "
                   "default: a "
                   "built-in synthetic set of q90 4:2:0 photos (800x533 for the seed recipe; 500x375 or 4000x3000 for "
                   "the ImageNet recipes, see --builtin-size), generated once and cached under $FASTPREP_CACHE "
                   "(default ~/.cache/fastprep)")
    g.add_argument("--builtin-size", choices=BUILTIN_SIZES, default=None,
                   help="the built-in photos of the recipes other than seed: imagenet (default): "
                        "500x375, ImageNet's typical size; 12mp: 4000x3000 (a phone or camera photo, 64x the "
                        "pixels; fewer images and steps by default). Both q90 4:2:0, generated once and cached. "
                        "An error with --data or with the seed recipe")
    g.add_argument("--num-images", type=_positive(int), metavar="N",
                   help=f"images to use (default {DEFAULTS['num_images']}, --quick {QUICK['num_images']}; "
                        f"--builtin-size 12mp: {LARGE_DEFAULTS['num_images']}, --quick "
                        f"{LARGE_QUICK['num_images']})")
    g.add_argument("--on-error", choices=ON_ERROR, default="skip",
                   help="--data files that a pipeline cannot read (damaged, empty, PNG, CMYK for YCbCr "
                        "decoding): skip leaves them out and lists them once; raise stops at the first")
    g = p.add_argument_group("pipelines")
    g.add_argument("--recipe", choices=RECIPES, default="seed",
                   help="seed (default): the crop+mask+YUV pipelines; imagenet-train: RandomResizedCrop(224)+flip; "
                        "imagenet-eval: Resize(256)+CenterCrop(224); trivialaugment, randaugment (DeiT), ssl-colour "
                        "(BYOL/SimCLR colour view): an unchanged torchvision v2 augmentation pipeline that every row "
                        "runs (fastprep: make_loader(transform=...)); dino (2 x 224 + 8 x 96 views), simclr (2 x 224): "
                        "multi-crop, a list of v2 views per image (fastprep: MultiView, one decode; fastprep-fast: "
                        "separable blur); examples-train (pytorch/examples), dino-pil (DINO's multi-crop class), "
                        "timm-rand-m9 (timm create_transform, needs timm): an ImageFolder with the script's own PIL "
                        "transform, torch's DataLoader against fastprep.data.DataLoader; all RGB normalised, "
                        "torchvision as reference, on built-in 500x375 photos (or 4000x3000: --builtin-size 12mp)")
    g.add_argument("--engine", choices=("dataloader", "ray"), default="dataloader",
                   help="dataloader (default): each pipeline's own loader on this machine (fastprep and "
                        "fastprep-packed: make_loader's threads engine, --workers = native decode threads; the "
                        "others: DataLoader worker processes); ray: the per-sample work on Ray Data actors "
                        "(fastprep.ray; --workers = actors, at least 1; fastprep pipelines only; needs the ray "
                        "extra: pip install --no-build-isolation -e '.[ray]')")
    g.add_argument("--pipelines", type=_pipeline_list, default=None, metavar="A,B",
                   help=f"comma-separated, from: {', '.join(PIPELINES)} (default all)")
    g.add_argument("--batch-size", type=_positive(int), default=None,
                   help="images per batch (default 64; --quick on --data lowers it for large images)")
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
                   f"{DEFAULTS['steps']}, --quick {QUICK['steps']}; --builtin-size 12mp: "
                   f"{LARGE_DEFAULTS['steps']}, --quick {LARGE_QUICK['steps']})")
    g.add_argument("--warmup", type=int, help=f"warm-up steps, not measured (default {DEFAULTS['warmup']}, "
                   f"--quick {QUICK['warmup']}; --builtin-size 12mp: {LARGE_DEFAULTS['warmup']}, --quick "
                   f"{LARGE_QUICK['warmup']})")
    window = (f"; each configuration measures at least {QUICK_FLOOR['steps']} steps and, with --steps left to the "
              f"preset, goes on until it has run {QUICK_MIN_WINDOW_S:g} s (at most {QUICK_MAX_STEPS} steps)"
              if table else "")
    g.add_argument("--quick", action="store_true",
                   help=f"fewer images and steps: a smoke test in a few minutes{window}; on --data folders of large "
                        "photos it also lowers the batch size and image count (and says so)")
    if table:
        g.add_argument("--target-rate", type=_positive(float), default=TARGET_RATE, metavar="SAMPLES_PER_S",
                       help=f"the accelerator rate the report prices in CPU cores per pipeline (default "
                            f"{TARGET_RATE:.0f}: {TARGET_SOURCE})")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they are also off when stderr is not a terminal)")
    g.add_argument("--json", metavar="FILE", help="write every figure and the machine description as JSON")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fastprep.bench",
        description="Is your GPU starving, where does the time go, and how much does fastprep buy? Feeds a toy "
                    "CNN (or a simulated accelerator) from JPEG files through each input pipeline and worker count, "
                    "and reports throughput, accelerator starvation and speed-ups vs the reference pipeline; then "
                    "each pipeline's own rate with nothing consuming it (uncapped) and the CPU cores it would need "
                    "to feed --target-rate.",
        epilog="Subcommand: `python -m fastprep.bench diagnose --help` runs the caching ladder that shows which "
               "stage (I/O, decode+transforms, collate/IPC, host-to-device) loses the most.",
        formatter_class=_HelpFormatter)
    _common(p)
    p.add_argument("--workers", type=_int_list, default=None, metavar="0,1,N",
                   help=f"worker counts to measure, {WORKERS_MEANING} (default 0, 1 and the usable cores, "
                        f"{usable_cores()} here)")
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
        formatter_class=_HelpFormatter)
    _common(p, table=False)
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help=f"the worker count, {WORKERS_MEANING} (default the usable cores, {usable_cores()} here)")
    return p


def config_from_args(args: argparse.Namespace, argv: list[str], diagnose: bool = False) -> BenchConfig:
    """The :class:`BenchConfig` for parsed arguments (presets filled in by the config: see
    :func:`~fastprep.bench.config.presets`).

    Raises:
        ValueError: a setting is out of range.
    """
    workers: tuple[int, ...]
    if diagnose:
        workers = (args.workers if args.workers is not None else usable_cores(),)
    else:
        workers = tuple(args.workers if args.workers is not None else dict.fromkeys([0, 1, usable_cores()]))
    return BenchConfig(
        data=args.data, num_images=args.num_images, pipelines=args.pipelines, workers=workers,
        batch_size=args.batch_size, crop_size=args.crop_size, mask_ratio=args.mask_ratio, seed=args.seed,
        mp_context=args.mp_context, device=args.device, step_ms=args.step_ms, threads=args.threads,
        steps=args.steps, warmup=args.warmup, on_error=args.on_error, progress=not args.no_progress,
        json_path=args.json, plot_path=getattr(args, "plot", None), profile_dir=getattr(args, "profile", None),
        profile_steps=getattr(args, "profile_steps", 4), itt=getattr(args, "itt", False),
        check_syncs=getattr(args, "check_syncs", False), quick=args.quick,
        command=" ".join(["python -m fastprep.bench", *argv]), recipe=args.recipe, engine=args.engine,
        builtin_size=args.builtin_size, target_rate=getattr(args, "target_rate", TARGET_RATE))


def _stop_ray() -> None:
    """Shut down the local Ray instance the Ray engine started (no stray processes)."""
    try:
        import ray
    except ImportError:
        return
    if ray.is_initialized():
        ray.shutdown()


def _ray_reason(pipe: Pipeline) -> str | None:
    """Why ``pipe`` cannot run on the Ray engine, or ``None``."""
    if not pipe.ray_capable:
        return "no Ray Data engine for this pipeline (--engine ray runs the seed recipe's fastprep pipelines)"
    try:
        import fastprep.ray  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


def load_data(cfg: BenchConfig) -> BenchData:
    """The built-in set, or ``cfg.data`` checked file by file against the runnable pipelines.

    Raises:
        BenchDataError: no usable file, or a bad one with ``cfg.on_error == "raise"``.
    """
    if not cfg.data:
        return builtin_dataset(cfg.counts.num_images, cfg.builtin_spec(), progress=cfg.progress)
    if cfg.quick:
        note = cfg.fit_quick(mean_megapixels(cfg.data))
        if note:
            print(note, flush=True)
    checks: dict = {}
    for name in cfg.pipeline_names:
        pipe = get_recipe_pipeline(name, cfg.recipe)
        if not pipe.unavailable():
            checks.setdefault(pipe.check_key, (pipe.check, []))[1].append(name)
    return folder_dataset(cfg.data, cfg.num_images, checks=checks, on_error=cfg.on_error, progress=cfg.progress)


def _print_skipped(data: BenchData) -> None:
    """The files left out, once, with the reason for each."""
    import os

    if not data.skipped:
        return
    n = len(data.skipped)
    print(f"Left out {n} file{'s' if n != 1 else ''} that the pipelines cannot use (--on-error skip; "
          f"--on-error raise stops at the first):")
    for path, why in data.skipped[:MAX_LISTED]:
        print(f"  {os.path.relpath(path, data.root)}: {why}")
    if n > MAX_LISTED:
        print(f"  ... and {n - MAX_LISTED} more (all of them in --json)")


def _header(cfg: BenchConfig, data: BenchData, trainer: Trainer) -> None:
    _print_skipped(data)
    print(f"Data: {data.description}")
    print(trainer_line(cfg, trainer), flush=True)


def _num_classes(data: BenchData) -> int:
    # the real trainer's classifier needs an output per class of the user's folders
    return max(10, max(data.targets, default=0) + 1)


def _data_settings(data: BenchData) -> dict:
    return {"data": data.description, "data_root": data.root, "num_images": len(data.files),
            "skipped_files": [{"path": p, "reason": why} for p, why in data.skipped]}


class _Planned(NamedTuple):
    """One configuration of the table: a pipeline at a worker count, and why it does not run."""

    pipe: Pipeline
    workers: int
    reason: str | None


def _announce(cfg: BenchConfig) -> bool:
    """Print the platform and which profiling options this build ignores; returns whether
    ITT ranges are emitted."""
    from .profiling import itt_available

    print(describe(), flush=True)
    if cfg.check_syncs and not (cfg.device.startswith("cuda") or (cfg.device == "auto"
                                                                  and torch.cuda.is_available())):
        print("--check-syncs: needs a CUDA device; ignored on this run", flush=True)
    itt = cfg.itt and itt_available()
    if cfg.itt and not itt:
        print("--itt: torch.profiler.itt is not available in this build; ignored", flush=True)
    return itt


def _print_plan(cfg: BenchConfig) -> None:
    counts = cfg.counts
    what = f"mask ratio {cfg.mask_ratio}" if cfg.recipe == "seed" else f"recipe {cfg.recipe}"
    engine = ", engine ray (workers = Ray actors)" if cfg.engine == "ray" else ""
    steps = f"{counts.steps} steps"
    if cfg.max_steps > counts.steps:
        steps += f" (more until {cfg.min_window_s:g} s have passed, at most {cfg.max_steps})"
    print(f"Measuring {steps} after {counts.warmup} warm-up steps, batch {counts.batch_size}, crop "
          f"{cfg.crop_size}, {what}{engine}, workers {', '.join(map(str, cfg.workers))}; after its rows, each "
          "pipeline alone at its best worker count (uncapped)", flush=True)


def _schedule(cfg: BenchConfig) -> list[_Planned]:
    """Every pipeline x worker count in table order, each with the reason it cannot run."""
    planned: list[_Planned] = []
    for name in cfg.pipeline_names:
        pipe = get_recipe_pipeline(name, cfg.recipe)
        reason = pipe.unavailable()
        if not reason and cfg.engine == "ray":
            reason = _ray_reason(pipe)
        if reason:
            print(f"Skipping {name}: {reason}", flush=True)
        planned.extend(_Planned(pipe, w, reason) for w in cfg.workers)
    return planned


def _prepare_files(planned: list[_Planned], data: BenchData, progress: bool) -> dict[str, list[str] | Exception]:
    """Per runnable pipeline, the files it reads (prepared once, before anything is timed),
    or the exception preparing them raised."""
    files: dict[str, list[str] | Exception] = {}
    for pipe, _, reason in planned:
        if not reason and pipe.name not in files:
            try:
                files[pipe.name] = pipe.prepare_files(data.files, progress=progress)
            except Exception as e:  # noqa: BLE001 - reported per configuration
                files[pipe.name] = e
    return files


def _measure_one(cfg: BenchConfig, item: _Planned, files: list[str], data: BenchData, trainer: Trainer,
                 res: ConfigResult, bar: tqdm) -> bool:
    """Measure one configuration into ``res``, feeding ``trainer``; returns ``False`` when
    it failed (reported on one line, the bar advanced past its steps)."""
    counts = cfg.counts
    alone = " alone" if isinstance(trainer, NullConsumer) else ""
    bar.set_description(f"{item.pipe.name}{alone}, {item.workers} workers")
    pcfg = cfg.pipeline_config(item.workers, trainer.device)
    torch.manual_seed(cfg.seed)
    length = (counts.warmup + cfg.max_steps + slack_batches(item.workers)) * counts.batch_size
    make = item.pipe.ray_loader if cfg.engine == "ray" else item.pipe.loader
    planned, done_before = counts.warmup + counts.steps, bar.n

    def on_step():
        if bar.n - done_before >= planned:  # measuring past the planned steps (min_window_s)
            bar.total += 1
        bar.update()

    try:
        measure(lambda: make(files, data.targets, length, pcfg), trainer, steps=counts.steps, warmup=counts.warmup,
                result=res, crop=cfg.check_crop, on_step=on_step, bounds=cfg.output_bounds,
                check_syncs=cfg.check_syncs, min_window_s=cfg.min_window_s or 0.0, max_steps=cfg.max_steps)
        if cfg.engine == "ray":  # Ray's actors are not this process's children: not measured
            res.worker_cpu_cores = None
        res.exactness = getattr(item.pipe, "exactness", None)
        fell_back = item.pipe.engine == "threads" and res.engine not in (None, "threads")
        if fell_back and cfg.engine == "dataloader" and not alone:
            res.engine_fallback = res.engine_reason or f"make_loader chose the {res.engine} engine"
            bar.clear()
            print(f"{item.pipe.name} with {item.workers} workers ran on the {res.engine} engine, not threads: "
                  f"{res.engine_fallback}", flush=True)
    except Exception as e:  # noqa: BLE001 - report it on one line, run the rest, exit non-zero
        res.error = one_line_error(e)
        bar.clear()
        print(f"{item.pipe.name}{alone} with {item.workers} workers failed: {res.error}", file=sys.stderr,
              flush=True)
        bar.update(max(0, planned - (bar.n - done_before)))
        return False
    return True


class _Measured(NamedTuple):
    """What :func:`_measure_all` measured: the table's rows, each pipeline alone, and
    whether a configuration failed."""

    results: list[dict]
    uncapped: dict[str, dict]
    failed: bool


def _measure_alone(cfg: BenchConfig, rows: list[dict], runnable: list[_Planned],
                   files: dict[str, list[str] | Exception], data: BenchData, device: torch.device,
                   bar: tqdm) -> dict | None:
    """A pipeline alone, at the worker count :func:`~fastprep.bench.uncapped.uncapped_workers`
    picks from its ``rows``: its :func:`~fastprep.bench.uncapped.uncapped_entry`, or ``None``
    when none of its rows ran."""
    counts = cfg.counts
    workers = uncapped_workers(rows)
    prepared = files.get(rows[0]["pipeline"]) if rows else None
    if workers is None or prepared is None or isinstance(prepared, Exception):
        bar.update(counts.warmup + counts.steps)
        return None
    item = next(i for i in runnable if i.pipe.name == rows[0]["pipeline"] and i.workers == workers)
    res = ConfigResult(item.pipe.name, workers, counts.batch_size, counts.steps, counts.warmup)
    _measure_one(cfg, item, prepared, data, NullConsumer(device), res, bar)
    fed = next(r for r in rows if r["workers"] == workers)
    return uncapped_entry(res.as_dict(), fed, cfg.target_rate, cpu_measured=cfg.engine != "ray")


def _measure_all(cfg: BenchConfig, planned: list[_Planned], data: BenchData, device: torch.device,
                 num_classes: int) -> _Measured:
    """Run every configuration in turn and, right after a pipeline's rows (so that both see
    the same machine), that pipeline alone (:func:`_measure_alone`).

    With ``on_error="raise"`` the configurations after the first failure are recorded as
    not run (nor measured alone)."""
    from tqdm import tqdm

    counts = cfg.counts
    files = _prepare_files(planned, data, cfg.progress)
    runnable = [item for item in planned if not item.reason]
    total = (len(runnable) + len({item.pipe.name for item in runnable})) * (counts.warmup + counts.steps)
    bar = tqdm(total=total, unit="step", disable=not show_progress(cfg.progress), leave=False, dynamic_ncols=True)
    results: list[dict] = []
    alone: dict[str, dict] = {}
    failed = False
    for k, item in enumerate(planned):
        res = ConfigResult(item.pipe.name, item.workers, counts.batch_size, counts.steps, counts.warmup)
        if item.reason or (failed and cfg.on_error == "raise"):
            res.skipped = item.reason or "not run: an earlier configuration failed (--on-error raise)"
        else:
            prepared = files[item.pipe.name]
            if isinstance(prepared, Exception):
                failed = True
                res.error = f"preparing the files failed: {one_line_error(prepared)}"
                print(f"{item.pipe.name} with {item.workers} workers failed: {res.error}", file=sys.stderr,
                      flush=True)
                bar.update(counts.warmup + counts.steps)
            elif not _measure_one(cfg, item, prepared, data, cfg.make_trainer(num_classes), res, bar):
                failed = True
        res.capped_by_accelerator = is_capped(res.as_dict())
        results.append(res.as_dict())
        last_row = k + 1 == len(planned) or planned[k + 1].pipe.name != item.pipe.name
        stop = failed and cfg.on_error == "raise"
        if last_row and not stop and any(i.pipe.name == item.pipe.name for i in runnable):
            rows = [r for r in results if r["pipeline"] == item.pipe.name and not r["skipped"]]
            entry = _measure_alone(cfg, rows, runnable, files, data, device, bar)
            if entry is not None:
                alone[item.pipe.name] = entry
                failed |= entry["error"] is not None
    bar.close()
    if cfg.engine == "ray":
        _stop_ray()
    _add_speedups(results, alone)
    return _Measured(results, alone, failed)


def _add_speedups(results: list[dict], alone: dict[str, dict]) -> None:
    """Each result's throughput over the reference pipeline's at the same worker count, and
    each uncapped rate over the reference's uncapped rate."""
    refs = {r["workers"]: r["samples_per_s"] for r in results if r["pipeline"] == "reference" and r["samples_per_s"]}
    for r in results:
        if r["samples_per_s"] and r["workers"] in refs:
            r["speedup_vs_reference"] = r["samples_per_s"] / refs[r["workers"]]
    ref_alone = alone.get("reference", {}).get("samples_per_s")
    for u in alone.values():
        if u["samples_per_s"] and ref_alone:
            u["speedup_vs_reference"] = u["samples_per_s"] / ref_alone


def _capped_by(trainer: Trainer) -> str:
    """What caps a row: the accelerator (simulated or CUDA), or the training step on the CPU."""
    return "training step" if trainer.device.type == "cpu" and not trainer.simulated else "accelerator"


def _print_results(cfg: BenchConfig, measured: _Measured, capacity: float | None,
                   capped_by: str) -> tuple[str, dict[str, dict], dict]:
    """Print the table, the diagnosis, the engine stages, the uncapped table and the
    best-vs-best lines; returns the diagnosis, the best result per pipeline and the
    best-vs-best ratios (JSON)."""
    results, alone = measured.results, measured.uncapped
    print()
    print(report.format_table(results, capped_by))
    print()
    diag = report.diagnosis(results, capacity, alone)
    print(diag)
    for line in report.engine_lines(results, alone):
        print(line)
    if alone:
        print()
        source = f"{TARGET_SOURCE} (--target-rate to change)" if cfg.target_rate == TARGET_RATE else "--target-rate"
        print(format_uncapped(alone, cfg.target_rate, source, capped_by))
    best = report.best_per_pipeline(results)
    lines, ratios = best_vs_reference(best, alone, capped_by)
    gap = packed_gap_line(best, alone)
    if lines or gap:
        print()
    for line in lines + ([gap] if gap else []):
        print(line)
    return diag, best, ratios


def _profile(cfg: BenchConfig, names: list[str], data: BenchData, device: torch.device, num_classes: int,
             itt: bool) -> None:
    """``--profile`` / ``--itt``: a labelled pass per pipeline that ran, with 0 workers."""
    from .profiling import profile_pipelines

    runnable = [get_recipe_pipeline(p, cfg.recipe) for p in names]
    print(f"Profiling {', '.join(p.name for p in runnable)} ({cfg.profile_steps} labelled steps each, 0 workers)"
          + (", emitting ITT ranges" if itt else ""), flush=True)
    for path in profile_pipelines(runnable, data, cfg.pipeline_config(0, device),
                                  lambda: cfg.make_trainer(num_classes), steps=cfg.profile_steps,
                                  directory=cfg.profile_dir, itt=itt, seed=cfg.seed):
        print(f"Profile trace: {path}")


def _run_json(cfg: BenchConfig, data: BenchData, probe: Trainer, measured: _Measured, diag: str,
              ratios: dict, capacity: float | None, elapsed: float) -> dict:
    """The ``--json`` document of a run."""
    counts = cfg.counts
    device_name = "sim" if probe.simulated else str(probe.device)
    return {
        "command": cfg.command,
        "platform": describe(),
        "settings": {**_data_settings(data),
                     "recipe": cfg.recipe, "builtin_size": cfg.builtin_size, "engine": cfg.engine,
                     "batch_size": counts.batch_size, "crop_size": cfg.crop_size, "mask_ratio": cfg.mask_ratio,
                     "steps": counts.steps, "warmup": counts.warmup, "min_window_s": cfg.min_window_s,
                     "max_steps": cfg.max_steps, "workers": list(cfg.workers),
                     "pipelines": list(cfg.pipeline_names), "device": device_name, "on_error": cfg.on_error,
                     "step_ms": probe.step_s * 1e3 if probe.simulated else None,
                     "accelerator_capacity_samples_per_s": capacity, "seed": cfg.seed,
                     "mp_context": cfg.mp_context, "quick": cfg.quick,
                     "main_process_threads": torch.get_num_threads(), "load_average": _load_average()},
        "machine": report.machine_info(str(probe.device)),
        "results": measured.results,
        "uncapped": measured.uncapped,
        "target": {"samples_per_s": cfg.target_rate,
                   "source": TARGET_SOURCE if cfg.target_rate == TARGET_RATE else "--target-rate",
                   "cores_definition": CORES_DEFINITION.format(rate=f"{cfg.target_rate:g}"),
                   "capped_below_starvation": CAPPED_STARVATION},
        "best_vs_reference": ratios,
        "diagnosis": diag,
        "elapsed_s": elapsed,
    }


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages at the end of the run (others' work on a shared machine)."""
    import os

    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _write_plot(cfg: BenchConfig, data: BenchData, probe: Trainer, measured: _Measured, any_ran: bool,
                capacity: float | None) -> None:
    if not cfg.plot_path:
        return
    if any_ran:
        report.plot_results(cfg.plot_path, measured.results, capacity_samples_per_s=capacity,
                            title=f"{data.description}; {trainer_line(cfg, probe).split(' (')[0]}",
                            uncapped=measured.uncapped)
        print(f"Plot: {cfg.plot_path}")
    else:
        print("Plot: not written, no configuration ran")


def run(cfg: BenchConfig) -> int:
    """The throughput table for ``cfg.pipelines`` x ``cfg.workers``, then each pipeline
    alone (uncapped) and the cores it needs for ``cfg.target_rate``; returns the exit
    status.

    Raises:
        BenchDataError: see :func:`load_data`.
    """
    started = time.perf_counter()
    itt = _announce(cfg)
    data = load_data(cfg)
    num_classes = _num_classes(data)
    probe = cfg.make_trainer(num_classes)
    cfg.set_threads(probe)
    _header(cfg, data, probe)
    capacity = cfg.counts.batch_size / probe.step_s if probe.simulated and probe.step_s > 0 else None
    _print_plan(cfg)

    measured = _measure_all(cfg, _schedule(cfg), data, probe.device, num_classes)
    diag, best, ratios = _print_results(cfg, measured, capacity, _capped_by(probe))
    if (cfg.profile_dir or itt) and best:
        _profile(cfg, list(best), data, probe.device, num_classes, itt)

    elapsed = time.perf_counter() - started
    if cfg.json_path:
        report.write_json(cfg.json_path, _run_json(cfg, data, probe, measured, diag, ratios, capacity, elapsed))
        print(f"JSON: {cfg.json_path}")
    _write_plot(cfg, data, probe, measured, bool(best), capacity)
    print(f"Total time {elapsed:.0f} s")
    return 1 if measured.failed else 0


def run_diagnose(cfg: BenchConfig) -> int:
    """The caching ladder (see :mod:`fastprep.bench.diagnose`); returns the exit status.

    Raises:
        BenchDataError: see :func:`load_data`.
    """
    from .diagnose import diagnose_pipelines, format_ladder

    started = time.perf_counter()
    print(describe(), flush=True)
    data = load_data(cfg)
    num_classes = _num_classes(data)
    _print_skipped(data)
    print(f"Data: {data.description}", flush=True)
    ladders, lines, trainer_text = diagnose_pipelines(cfg, data, num_classes)
    print(trainer_text)
    print()
    print(format_ladder(ladders))
    print()
    for line in lines:
        print(line)
    elapsed = time.perf_counter() - started
    if cfg.json_path:
        report.write_json(cfg.json_path, {"command": cfg.command, "platform": describe(),
                                          "settings": {**_data_settings(data), "workers": cfg.workers[0],
                                                       "steps": cfg.steps, "warmup": cfg.warmup},
                                          "machine": report.machine_info(cfg.device), "ladders": ladders,
                                          "diagnosis": lines, "elapsed_s": elapsed})
        print(f"JSON: {cfg.json_path}")
    print(f"Total time {elapsed:.0f} s")
    return 1 if any(r.get("error") for rungs in ladders.values() for r in rungs) else 0


def _object_url_data(argv: list[str]) -> bool:
    """``--data`` names an ``s3://`` URL."""
    for k, arg in enumerate(argv):
        if arg == "--data" and k + 1 < len(argv):
            return argv[k + 1].startswith("s3://")
        if arg.startswith("--data="):
            return arg.split("=", 1)[1].startswith("s3://")
    return False


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 all ran, 1 a configuration failed, 2 bad
    arguments or unusable data)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if _object_url_data(argv):  # --data s3://...: the object storage measurement (fastprep.bench.objects)
        from . import objects

        return objects.main(argv[1:] if argv[0] == "run" else argv)
    if argv and argv[0] == "diagnose":
        parser = build_diagnose_parser()
        args, command, diagnose = parser.parse_args(argv[1:]), run_diagnose, True
    else:
        parser = build_parser()
        args, command, diagnose = parser.parse_args(argv[1:] if argv and argv[0] == "run" else argv), run, False
        if args.plot:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                parser.error("--plot needs matplotlib: pip install matplotlib (or the bench extra: pip install "
                             "--no-build-isolation -e '.[bench]')")
    try:
        cfg = config_from_args(args, argv, diagnose)
    except ValueError as e:
        parser.error(str(e))
    threads = torch.get_num_threads()
    try:
        return command(cfg)
    except BenchDataError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        torch.set_num_threads(threads)  # callers in the same process keep their setting
