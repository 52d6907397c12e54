"""Tables, the one-line diagnosis, machine facts, JSON and the plot."""

from __future__ import annotations

import json
import os
import platform

from fastprep._platform import cpu_model, describe, isa_level
from fastprep._threads import usable_cpus

__all__ = ["diagnosis", "format_table", "machine_info", "plot_results", "write_json"]


def _version(module: str) -> str | None:
    import importlib

    try:
        return getattr(importlib.import_module(module), "__version__", "unknown")
    except ImportError:
        return None


def machine_info(device: str | None = None) -> dict:
    """CPU (:func:`fastprep._platform.describe`, model, ISA level), cores, library versions
    (and the GPU when one is used)."""
    import torch

    usable = usable_cpus()
    info = {
        "cpu": describe(),
        "cpu_model": cpu_model(),
        "isa_level": isa_level(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "torchvision": _version("torchvision"),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "scipy": _version("scipy"),
        "pillow": _version("PIL"),
        "fastprep": _version("fastprep"),
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        from fastprep import _ops

        info["libjpeg_turbo"] = _ops.libjpeg_turbo_version
    except Exception:  # noqa: BLE001 - the extension may be missing on a broken install
        info["libjpeg_turbo"] = None
    try:
        from PIL import features

        info["pillow_libjpeg"] = features.version("jpg")
    except Exception:  # noqa: BLE001
        info["pillow_libjpeg"] = None
    if device and device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def workers_text(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


def _fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def format_table(results: list[dict], capped_by: str = "accelerator") -> str:
    """The results as an aligned text table (one row per pipeline x workers); rows the
    ``capped_by`` (the accelerator, or the training step on the CPU) set the rate of are
    marked ``*``, rows that asked for the threads engine and ran on another ``[engine]``."""
    head = ["pipeline", "workers", "samples/s", "steps/s", "starved", "data wait", "1st batch",
            "worker CPU", "speed-up"]
    rows = []
    for r in results:
        if r.get("skipped") or r.get("error"):
            note = f"skipped: {r['skipped']}" if r.get("skipped") else f"error: {r['error']}"
            rows.append([r["pipeline"], str(r["workers"]), note])
            continue
        rows.append([
            r["pipeline"] + (f" [{r['engine']}]" if r.get("engine_fallback") else ""), str(r["workers"]),
            _fmt(r["samples_per_s"], ".1f") + ("*" if r.get("capped_by_accelerator") else ""),
            _fmt(r["steps_per_s"], ".2f"),
            _fmt(None if r["starvation_fraction"] is None else 100 * r["starvation_fraction"], ".1f") + "%",
            _fmt(None if r["data_wait_fraction"] is None else 100 * r["data_wait_fraction"], ".1f") + "%",
            _fmt(r["time_to_first_batch_s"], ".2f") + " s",
            _fmt(r["worker_cpu_cores"], ".2f", "-") + ("" if r["worker_cpu_cores"] is None else " cores"),
            _fmt(r["speedup_vs_reference"], ".2f", "-") + ("" if r["speedup_vs_reference"] is None else "x"),
        ])
    widths = [len(h) for h in head]
    for row in rows:
        if len(row) == len(head):
            widths = [max(w, len(c)) for w, c in zip(widths, row)]
    left = {0}

    def line(cells):
        if len(cells) < len(head):
            return "  ".join([cells[0].ljust(widths[0]), cells[1].rjust(widths[1]), cells[2]])
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), "  ".join("-" * w for w in widths)]
    prev = None
    for row in rows:
        if prev is not None and row[0] != prev:
            out.append("")
        out.append(line(row))
        prev = row[0]
    fallbacks = {r["pipeline"]: (r["engine"], r["engine_fallback"]) for r in results if r.get("engine_fallback")}
    for name, (engine, why) in fallbacks.items():
        out.append(f"{name} [{engine}]: asked for make_loader's threads engine, ran on {engine}: {why}")
    if any(r.get("capped_by_accelerator") for r in results):
        out.append(f"* capped: the {capped_by} was busy (starved < 5 %), so the row shows its rate, not the "
                   "pipeline's; the uncapped table below has the pipeline's own")
    return "\n".join(out)


def _ok(results):
    return [r for r in results if r.get("samples_per_s") is not None]


def best_per_pipeline(results: list[dict]) -> dict[str, dict]:
    best: dict[str, dict] = {}
    for r in _ok(results):
        if r["pipeline"] not in best or r["samples_per_s"] > best[r["pipeline"]]["samples_per_s"]:
            best[r["pipeline"]] = r
    return best


def diagnosis(results: list[dict], capacity_samples_per_s: float | None = None,
              uncapped: dict[str, dict] | None = None) -> str:
    """One line: is the accelerator starving, with which pipeline, and what fixes it.

    ``uncapped``: each pipeline's rate alone (``{name: {"samples_per_s": ...}}``), quoted
    when the fastest pipeline was capped by the accelerator (its fed ratio is a floor)."""
    best = best_per_pipeline(results)
    if not best:
        return "Diagnosis: nothing ran."
    top = max(best.values(), key=lambda r: r["samples_per_s"])
    worst = min(best.values(), key=lambda r: r["samples_per_s"])
    base = best.get("reference", worst)

    def starved(r):
        return 100 * (r["starvation_fraction"] or 0.0)

    def cap(r):
        if capacity_samples_per_s:
            return capacity_samples_per_s
        s = r["starvation_fraction"] or 0.0
        return r["samples_per_s"] / max(1 - s, 1e-9)

    parts = []
    if starved(base) > 10:
        parts.append(f"with {base['pipeline']} the accelerator starves {starved(base):.0f}% of the time even at "
                     f"its best ({workers_text(base['workers'])}, {base['samples_per_s']:.0f} of the "
                     f"~{cap(base):.0f} samples/s it could take): input-bound")
    else:
        parts.append(f"{base['pipeline']} keeps the accelerator busy ({starved(base):.0f}% starved at "
                     f"{workers_text(base['workers'])}): compute-bound, a faster input pipeline will not help")
    if top is not base:
        gain = top["samples_per_s"] / base["samples_per_s"]
        if starved(top) <= 10:
            alone = (uncapped or {}).get(top["pipeline"], {}).get("samples_per_s")
            base_alone = (uncapped or {}).get(base["pipeline"], {}).get("samples_per_s")
            more = ""
            if alone and base_alone and starved(top) < 5:
                more = (f", a floor set by the accelerator's rate: alone it delivers {alone:.0f} samples/s, "
                        f"{alone / base_alone:.1f}x {base['pipeline']} alone")
            parts.append(f"{top['pipeline']} removes the bottleneck ({starved(top):.0f}% starved, {gain:.1f}x "
                         f"{base['pipeline']}{more})")
        else:
            # fastprep's pipelines already decode only the window (DCT-scaled where a recipe
            # allows); what is left is CPU for the workers and, on unpacked files, the
            # entropy decoding of rows the window does not need.
            advice = "more CPU cores for the workers would help"
            if "packed" not in top["pipeline"]:
                advice += (", and packed files (python -m fastprep.pack) let each crop entropy-decode only "
                           "its restart intervals")
            parts.append(f"{top['pipeline']} is {gain:.1f}x faster but still starves {starved(top):.0f}% "
                         f"({advice})")
    return "Diagnosis: " + "; ".join(parts) + "."


def engine_lines(results: list[dict], uncapped: dict[str, dict] | None = None) -> list[str]:
    """One line per pipeline run on make_loader's threads engine: the stage that held its
    best configuration with threads (at least one worker; rows without threads have no
    stages) -- read, decode, or the hand-over to what takes the batches -- and the stage
    that held it alone (its uncapped run), when that was measured with threads."""
    threaded = best_per_pipeline([r for r in results if r.get("engine_stage")])
    lines = []
    for name, r in threaded.items():
        stage = r["engine_stage"]
        lines.append(f"Engine stage, {name} ({workers_text(r['workers'])}): {stage[0]} -- {stage[1]}.")
        alone = (uncapped or {}).get(name, {})
        if alone.get("engine_stage"):
            stage = alone["engine_stage"]
            lines.append(f"Engine stage, {name} alone ({workers_text(alone['workers'])}, uncapped): {stage[0]} -- "
                         f"{stage[1]}.")
    return lines


def write_json(path: str | os.PathLike, report: dict) -> None:
    path = os.fspath(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, sort_keys=False)
        f.write("\n")


def plot_results(path: str | os.PathLike, results: list[dict], title: str = "",
                 capacity_samples_per_s: float | None = None, uncapped: dict[str, dict] | None = None) -> None:
    """Grouped bars: samples/s and starvation % per pipeline x workers (matplotlib Agg);
    ``uncapped`` rates (``{name: {"workers", "samples_per_s"}}``) are marked on the bar of
    the worker count they were measured at."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    ok = _ok(results)
    pipelines = list(dict.fromkeys(r["pipeline"] for r in ok))
    workers = sorted({r["workers"] for r in ok})
    lookup = {(r["pipeline"], r["workers"]): r for r in ok}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    width = 0.8 / max(len(workers), 1)
    for j, w in enumerate(workers):
        xs = [i + (j - (len(workers) - 1) / 2) * width for i in range(len(pipelines))]
        sps = [lookup[(p, w)]["samples_per_s"] if (p, w) in lookup else 0 for p in pipelines]
        stv = [100 * (lookup[(p, w)]["starvation_fraction"] or 0) if (p, w) in lookup else 0 for p in pipelines]
        axes[0].bar(xs, sps, width, label=workers_text(w))
        axes[1].bar(xs, stv, width, label=workers_text(w))
    marks = [(pipelines.index(p) + (workers.index(u["workers"]) - (len(workers) - 1) / 2) * width, u["samples_per_s"])
             for p, u in (uncapped or {}).items()
             if p in pipelines and u.get("samples_per_s") and u.get("workers") in workers]
    if marks:
        axes[0].scatter(*zip(*marks), marker="_", s=300, linewidths=2, color="k", zorder=3,
                        label="uncapped (pipeline alone)")
    if capacity_samples_per_s:
        axes[0].axhline(capacity_samples_per_s, color="k", ls="--", lw=1, label="accelerator capacity")
    axes[0].set_ylabel("samples / s (higher is better)")
    axes[1].set_ylabel("accelerator starved, % of time (lower is better)")
    axes[1].set_ylim(0, 100)
    for ax in axes:
        ax.set_xticks(range(len(pipelines)))
        ax.set_xticklabels(pipelines, rotation=15)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    d = os.path.dirname(os.fspath(path))
    if d:
        os.makedirs(d, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
