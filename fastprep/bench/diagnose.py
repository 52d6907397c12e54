"""``python -m fastprep.bench diagnose``: the caching ladder.

For each pipeline, the same trainer is fed five ways, each removing one more stage of the
input pipeline by caching its output:

1. ``device batch``   -- one batch already on the device, reused: the trainer's own limit;
2. ``host batch``     -- one collated batch in host memory, reused: + host-to-device copy
   and the device batch transform;
3. ``sample cached``  -- the dataset returns one processed sample: + DataLoader collate and
   worker-to-main transfer;
4. ``bytes cached``   -- the dataset holds the encoded files in memory: + the per-sample
   transforms (decode, crop, mask, colour);
5. ``full``           -- the pipeline as it runs: + reading the files.

The biggest drop between consecutive rungs names the stage that loses the most. A stage
whose cost is hidden under the accelerator's step shows no drop: that is the point --
only the stages that make the accelerator wait matter.
"""

from __future__ import annotations

import torch

from .pipelines import FixedSampleDataset, PipelineConfig, SampleDataset, data_loader, device_iterable, get_pipeline
from .runner import ConfigResult, measure, slack_batches

__all__ = ["RUNGS", "diagnose_pipelines", "format_ladder", "ladder"]

RUNGS = ("device batch", "host batch", "sample cached", "bytes cached", "full")
STAGES = ("host-to-device copy + device batch transform", "collate + worker-to-main transfer",
          "per-sample transforms (decode, crop, mask, colour)", "reading the files")


class _Repeat:
    """The same object ``n`` times (an iterable of batches)."""

    def __init__(self, obj, n: int):
        self.obj, self.n = obj, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            yield self.obj


def _host_batch(parts, data, cfg):
    samples = [(parts.transform(parts.read(data.files[i % len(data.files)])), data.targets[i % len(data.files)])
               for i in range(cfg.batch_size)]
    batch = parts.collate(samples)
    if cfg.pin_memory:
        batch = tuple(t.pin_memory() for t in batch)
    return batch


def ladder(pipe, data, cfg: PipelineConfig, make_trainer, *, steps: int, warmup: int, crop: int,
           on_step=None) -> list[dict]:
    """The five rungs for one pipeline, each a :class:`ConfigResult` dict plus ``rung``."""
    parts = pipe.parts(cfg)
    n = warmup + steps
    length = (n + slack_batches(cfg.num_workers)) * cfg.batch_size
    torch.manual_seed(cfg.seed)
    host = _host_batch(parts, data, cfg)
    sample = parts.transform(parts.read(data.files[0]))

    def device_batch():
        images, targets = parts.to_device(host)
        if parts.batch_transform is not None:
            images = parts.batch_transform(images)
        return _Repeat((images, targets), n + 1)

    raws = None

    def bytes_cached():
        nonlocal raws
        if raws is None:
            raws = [parts.read(f) for f in data.files]
        return device_iterable(data_loader(SampleDataset(raws, data.targets, None, parts.transform, length),
                                           parts.collate, cfg), parts, cfg)

    makers = [
        device_batch,
        lambda: device_iterable(_Repeat(host, n + 1), parts, cfg),
        lambda: device_iterable(data_loader(FixedSampleDataset(sample, data.targets[0], length), parts.collate, cfg),
                                parts, cfg),
        bytes_cached,
        lambda: pipe.loader(data.files, data.targets, length, cfg),
    ]
    out = []
    for rung, make in zip(RUNGS, makers):
        res = ConfigResult(pipe.name, cfg.num_workers, cfg.batch_size, steps, warmup)
        trainer = make_trainer()
        torch.manual_seed(cfg.seed)
        try:
            measure(make, trainer, steps=steps, warmup=warmup, result=res, crop=crop, on_step=on_step)
        except Exception as e:  # noqa: BLE001 - shown in the ladder, exit status non-zero
            res.error = f"{type(e).__name__}: {e}"
        out.append({"rung": rung, **res.as_dict()})
    return out


def biggest_loss(rungs: list[dict]) -> tuple[int, float, float] | None:
    """``(stage index, throughput before, after)`` of the largest relative drop."""
    best = None
    for k in range(len(rungs) - 1):
        a, b = rungs[k].get("samples_per_s"), rungs[k + 1].get("samples_per_s")
        if not a or not b:
            continue
        if best is None or b / a < best[2] / best[1]:
            best = (k, a, b)
    return best


def explain(name: str, rungs: list[dict]) -> str:
    loss = biggest_loss(rungs)
    if loss is None:
        return f"{name}: could not measure the ladder."
    k, a, b = loss
    if b >= 0.95 * a:
        return (f"{name}: no stage loses more than 5% ({rungs[-1]['samples_per_s']:.0f} samples/s with everything, "
                f"{rungs[0]['samples_per_s']:.0f} with a cached device batch): the accelerator is the bottleneck.")
    extra_ms = (1 / b - 1 / a) * 1e3
    return (f"{name}: {STAGES[k]} loses the most, {a:.0f} -> {b:.0f} samples/s ({100 * (1 - b / a):.0f}% less, "
            f"+{extra_ms:.2f} ms per sample between rungs {k + 1} and {k + 2}).")


def format_ladder(ladders: dict[str, list[dict]]) -> str:
    """Samples/s per pipeline (rows) and rung (columns)."""
    head = ["pipeline"] + [f"({i + 1}) {r}" for i, r in enumerate(RUNGS)]
    rows = []
    for name, rungs in ladders.items():
        row = [name]
        for r in rungs:
            if r.get("error"):
                row.append("error")
            elif r.get("samples_per_s") is None:
                row.append("-")
            else:
                row.append(f"{r['samples_per_s']:.0f} ({100 * r['starvation_fraction']:.0f}%)")
        rows.append(row)
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "samples/s (accelerator starved %)\n" + "\n".join(lines)


def diagnose_pipelines(args, data):
    """Run the ladder for every available pipeline in ``args.pipelines``; returns
    ``(ladders, explanation lines, trainer description)``."""
    from tqdm import tqdm

    from .cli import _trainer_line  # noqa: PLC0415
    from .trainer import make_trainer

    from .cli import _set_threads  # noqa: PLC0415

    probe = make_trainer(args.device, args.step_ms, args.batch_size, args.crop_size,
                                 getattr(args, "num_classes", 10))
    _set_threads(args, probe)
    pipes = []
    lines = []
    for name in args.pipelines:
        pipe = get_pipeline(name)
        reason = pipe.unavailable()
        if reason:
            lines.append(f"{name}: skipped, {reason}")
        else:
            pipes.append(pipe)
    bar = tqdm(total=len(pipes) * len(RUNGS) * (args.steps + args.warmup), unit="step", leave=False,
               disable=args.no_progress, dynamic_ncols=True)
    ladders = {}
    for pipe in pipes:
        bar.set_description(f"diagnose {pipe.name}")
        cfg = PipelineConfig(crop_size=args.crop_size, mask_ratio=args.mask_ratio, batch_size=args.batch_size,
                             num_workers=args.workers, device=probe.device, seed=args.seed,
                             multiprocessing_context=args.mp_context)
        ladders[pipe.name] = ladder(
            pipe, data, cfg, lambda: make_trainer(args.device, args.step_ms, args.batch_size, args.crop_size,
                                 getattr(args, "num_classes", 10)),
            steps=args.steps, warmup=args.warmup, crop=args.crop_size, on_step=bar.update)
    bar.close()
    lines = [explain(name, rungs) for name, rungs in ladders.items()] + lines
    return ladders, lines, _trainer_line(probe, args) + f"; {args.workers} workers"
