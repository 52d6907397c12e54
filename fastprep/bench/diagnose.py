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

import dataclasses

import torch

from .config import BenchConfig, trainer_line
from .dataset import show_progress
from .pipelines import FixedSampleDataset, PipelineConfig, SampleDataset, device_iterable
from .recipes import get_recipe_pipeline
from .runner import ConfigResult, measure, one_line_error, slack_batches

__all__ = ["NOISE_TOLERANCE", "RUNGS", "diagnose_pipelines", "explain", "format_ladder", "inversions", "ladder"]

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


#: A later rung may be this much faster than an earlier one before the ladder calls it noise.
NOISE_TOLERANCE = 0.05


def inversions(rungs: list[dict], tolerance: float = NOISE_TOLERANCE) -> list[tuple[int, int]]:
    """``(earlier, later)`` rung indices where the later rung, which adds a stage, is more
    than ``tolerance`` faster than the earlier one: impossible without noise."""
    out = []
    for j in range(len(rungs)):
        for k in range(j + 1, len(rungs)):
            a, b = rungs[j].get("samples_per_s"), rungs[k].get("samples_per_s")
            if a and b and b > a * (1 + tolerance):
                out.append((j, k))
    return out


def ladder(pipe, data, cfg: PipelineConfig, make_trainer, *, steps: int, warmup: int, crop: int | tuple[int, ...],
           on_step=None, tolerance: float = NOISE_TOLERANCE, bounds=None) -> list[dict]:
    """The five rungs for one pipeline, each a :class:`ConfigResult` dict plus ``rung``,
    ``remeasured`` and ``samples_per_s_runs``.

    Each rung adds a stage, so throughput cannot rise from one rung to a later one; when a
    measurement says it does (see :func:`inversions`), the rungs involved are measured once
    more and each keeps its faster run (interference from other processes only slows a
    run down). Inversions that survive are reported by :func:`explain`.
    """
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
        return pipe.loader_from(SampleDataset(raws, data.targets, None, parts.transform, length, names=data.files),
                                parts, cfg)

    makers = [
        device_batch,
        lambda: device_iterable(_Repeat(host, n + 1), parts, cfg),
        lambda: pipe.loader_from(FixedSampleDataset(sample, data.targets[0], length), parts, cfg),
        bytes_cached,
        lambda: pipe.loader(data.files, data.targets, length, cfg),
    ]

    def run(k: int) -> dict:
        res = ConfigResult(pipe.name, cfg.num_workers, cfg.batch_size, steps, warmup)
        trainer = make_trainer()
        torch.manual_seed(cfg.seed)
        try:
            measure(makers[k], trainer, steps=steps, warmup=warmup, result=res, crop=crop, on_step=on_step,
                    bounds=bounds)
        except Exception as e:  # noqa: BLE001 - shown in the ladder, exit status non-zero
            res.error = one_line_error(e)
        return {"rung": RUNGS[k], **res.as_dict()}

    out = []
    for k in range(len(RUNGS)):
        r = run(k)
        out.append({**r, "remeasured": False, "samples_per_s_runs": [r["samples_per_s"]]})
    for k in sorted({k for pair in inversions(out, tolerance) for k in pair}):
        again = run(k)
        runs = out[k]["samples_per_s_runs"] + [again["samples_per_s"]]
        if (again["samples_per_s"] or 0) > (out[k]["samples_per_s"] or 0):
            out[k] = {**again}
        out[k].update(remeasured=True, samples_per_s_runs=runs)
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


def explain(name: str, rungs: list[dict], tolerance: float = NOISE_TOLERANCE) -> list[str]:
    """Lines for one pipeline: the stage that loses the most, the rungs re-measured because
    a later rung came out faster than an earlier one, and a warning when that persists."""
    lines = []
    again = [k for k, r in enumerate(rungs) if r.get("remeasured")]
    if again:
        runs = "; ".join(f"({k + 1}) {rungs[k]['rung']}: " + ", ".join(
            "error" if v is None else f"{v:.0f}" for v in rungs[k]["samples_per_s_runs"]) for k in again)
        lines.append(f"{name}: a later rung was more than {100 * tolerance:.0f}% faster than an earlier one "
                     f"(noise: each rung adds work); re-measured once, keeping the faster run: {runs} samples/s.")
    for j, k in inversions(rungs, tolerance):
        a, b = rungs[j]["samples_per_s"], rungs[k]["samples_per_s"]
        lines.append(f"warning: {name}: ({k + 1}) {rungs[k]['rung']} is still faster than ({j + 1}) "
                     f"{rungs[j]['rung']} after re-measuring ({b:.0f} vs {a:.0f} samples/s, "
                     f"+{100 * (b / a - 1):.0f}%): "
                     f"the ladder is not monotonic, so its attribution below is unreliable; use more --steps or "
                     f"a quieter machine.")
    loss = biggest_loss(rungs)
    if loss is None:
        lines.append(f"{name}: could not measure the ladder.")
        return lines
    k, a, b = loss
    if b >= 0.95 * a:
        lines.append(f"{name}: no stage loses more than 5% ({rungs[-1]['samples_per_s']:.0f} samples/s with "
                     f"everything, {rungs[0]['samples_per_s']:.0f} with a cached device batch): the accelerator is "
                     f"the bottleneck.")
        return lines
    extra_ms = (1 / b - 1 / a) * 1e3
    lines.append(f"{name}: {STAGES[k]} loses the most, {a:.0f} -> {b:.0f} samples/s ({100 * (1 - b / a):.0f}% less, "
                 f"+{extra_ms:.2f} ms per sample between rungs {k + 1} and {k + 2}).")
    return lines


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
                row.append(f"{r['samples_per_s']:.0f} ({100 * r['starvation_fraction']:.0f}%)"
                           + ("*" if r.get("remeasured") else ""))
        rows.append(row)
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    note = ("\n* measured twice (a later rung came out faster than an earlier one), the faster run kept"
            if any(r.get("remeasured") for rungs in ladders.values() for r in rungs) else "")
    return "samples/s (accelerator starved %)\n" + "\n".join(lines) + note


def diagnose_pipelines(cfg: BenchConfig, data, num_classes: int = 10):
    """Run the ladder for every available pipeline in ``cfg.pipelines`` with
    ``cfg.workers[0]`` workers.

    Returns:
        ``(ladders {pipeline: rungs}, explanation lines, trainer description)``.
    """
    from tqdm import tqdm

    workers = cfg.workers[0]
    probe = cfg.make_trainer(num_classes)
    cfg.set_threads(probe)
    pipes = []
    skipped = []
    steps, warmup = cfg.counts.steps, cfg.counts.warmup
    for name in cfg.pipeline_names:
        pipe = get_recipe_pipeline(name, cfg.recipe)
        reason = pipe.unavailable()
        if reason:
            skipped.append(f"{name}: skipped, {reason}")
        else:
            pipes.append(pipe)
    bar = tqdm(total=len(pipes) * len(RUNGS) * (steps + warmup), unit="step", leave=False,
               disable=not show_progress(cfg.progress), dynamic_ncols=True)
    ladders = {}
    for pipe in pipes:
        bar.set_description(f"diagnose {pipe.name}")
        pdata = dataclasses.replace(data, files=pipe.prepare_files(data.files, progress=cfg.progress))
        ladders[pipe.name] = ladder(
            pipe, pdata, cfg.pipeline_config(workers, probe.device), lambda: cfg.make_trainer(num_classes),
            steps=steps, warmup=warmup, crop=cfg.check_crop, on_step=bar.update,
            bounds=cfg.output_bounds)
    bar.close()
    lines = [line for name, rungs in ladders.items() for line in explain(name, rungs)] + skipped
    return ladders, lines, trainer_line(cfg, probe) + f"; {workers} workers"
