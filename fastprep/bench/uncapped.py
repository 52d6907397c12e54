"""Each pipeline's own rate, beside the rate at which it fed the accelerator.

The table's samples/s is the *fed* rate: what the trainer took. A pipeline faster than the
accelerator shows the accelerator's rate there (the row is *capped*: the accelerator was
busy, starved less than :data:`CAPPED_STARVATION` of the time), which says nothing about
how much faster the pipeline could go. So each pipeline is also run alone, at its best
worker count, feeding a consumer that takes each batch and does nothing
(:class:`~fastprep.bench.trainer.NullConsumer`): its *uncapped* rate. From the same run,
the CPU time of the whole input pipeline (worker processes and every thread of the main
process) per sample gives the CPU cores the pipeline would need to feed a target rate,
such as a big model on a fast GPU.
"""

from __future__ import annotations

from .report import workers_text

__all__ = ["CAPPED_STARVATION", "CORES_DEFINITION", "PACKED_GAP", "best_vs_reference", "format_uncapped",
           "is_capped", "packed_gap_line", "uncapped_entry", "uncapped_workers"]

#: A row whose accelerator starved less than this share of the time was capped by it: the
#: accelerator, not the pipeline, set its rate (the threads engine's "keeps up" threshold).
CAPPED_STARVATION = 0.05
#: ``fastprep-packed`` faster than ``fastprep`` by at least this factor: the report says why.
PACKED_GAP = 1.5
CORES_DEFINITION = ("CPU ms/sample: the CPU time of the whole input pipeline (its worker processes and every "
                    "thread of this process) during the uncapped run, over the samples it delivered. Cores used: "
                    "that CPU time per second of the run. Cores for {rate}/s: {rate} x CPU seconds per sample, the "
                    "cores that would feed {rate} samples/s if the work spread over more cores as it does over "
                    "these (no other limit, such as storage or memory bandwidth, assumed)")


def is_capped(row: dict) -> bool | None:
    """Whether the accelerator set a measured row's rate (``None``: the row did not run)."""
    starved = row.get("starvation_fraction")
    return None if starved is None or row.get("samples_per_s") is None else starved < CAPPED_STARVATION


def uncapped_workers(rows: list[dict]) -> int | None:
    """The worker count at which to measure a pipeline alone, from its rows of the table:
    the one with the highest fed rate; when several rows were capped (they tie at the
    accelerator's rate), the one of them with the most workers. ``None``: no row ran."""
    ran = [r for r in rows if r.get("samples_per_s") is not None]
    if not ran:
        return None
    capped = [r for r in ran if is_capped(r)]
    if capped:
        return max(r["workers"] for r in capped)
    return max(ran, key=lambda r: r["samples_per_s"])["workers"]


def uncapped_entry(run: dict, fed: dict, target_rate: float, cpu_measured: bool = True) -> dict:
    """The JSON record of a pipeline's uncapped run.

    Args:
        run: the :class:`~fastprep.bench.runner.ConfigResult` dict of the uncapped run.
        fed: the table's row at the same worker count.
        target_rate: samples/s to price in cores.
        cpu_measured: whether the run's CPU time covers the whole pipeline (not with Ray
            actors, which are not this process's children).
    """
    entry = {"workers": run["workers"], "steps": run["steps"], "samples_per_s": run["samples_per_s"],
             "window_s": run["window_s"], "fed_samples_per_s": fed.get("samples_per_s"),
             "fed_capped_by_accelerator": is_capped(fed), "cpu_ms_per_sample": None, "cores_used": None,
             "samples_per_cpu_s": None, "cores_for_target": None, "target_samples_per_s": target_rate,
             "speedup_vs_reference": None, "engine_stage": run.get("engine_stage"), "error": run.get("error")}
    if run.get("samples_per_s") and cpu_measured and run.get("main_cpu_cores") is not None:
        cores = (run.get("worker_cpu_cores") or 0.0) + run["main_cpu_cores"]
        cpu_s_per_sample = cores / run["samples_per_s"]
        entry.update(cores_used=cores, cpu_ms_per_sample=cpu_s_per_sample * 1e3)
        if cpu_s_per_sample > 0:
            entry.update(samples_per_cpu_s=1 / cpu_s_per_sample, cores_for_target=target_rate * cpu_s_per_sample)
    return entry


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_uncapped(uncapped: dict[str, dict], target_rate: float, target_source: str,
                    capped_by: str = "accelerator") -> str:
    """The uncapped table, its definitions and the target's source (``capped_by``: what
    caps a fed row, the accelerator or the training step on the CPU)."""
    head = ["pipeline", "workers", "fed samples/s", "uncapped samples/s", "vs reference", "CPU ms/sample",
            "cores used", f"cores for {target_rate:.0f}/s"]
    rows = []
    for name, u in uncapped.items():
        if u.get("error"):
            rows.append([name, str(u["workers"]), f"error: {u['error']}"])
            continue
        fed = _fmt(u["fed_samples_per_s"], ".1f") + (" (capped)" if u["fed_capped_by_accelerator"] else "")
        rows.append([name, str(u["workers"]), fed, _fmt(u["samples_per_s"], ".1f"),
                     _fmt(u["speedup_vs_reference"], ".2f") + ("x" if u["speedup_vs_reference"] else ""),
                     _fmt(u["cpu_ms_per_sample"], ".2f"), _fmt(u["cores_used"], ".2f"),
                     _fmt(u["cores_for_target"], ".1f")])
    widths = [max([len(h)] + [len(r[i]) for r in rows if len(r) == len(head)]) for i, h in enumerate(head)]

    def line(cells):
        if len(cells) < len(head):
            return "  ".join([cells[0].ljust(widths[0]), cells[1].rjust(widths[1]), cells[2]])
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    steps = sorted({u["steps"] for u in uncapped.values() if u.get("steps")})
    out = [f"Uncapped: each pipeline alone at its best worker count, the batches taken and dropped "
           f"({'/'.join(map(str, steps)) or '-'} measured steps); fed: its rate feeding the {capped_by} "
           f"(capped: the {capped_by} set it)",
           line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows),
           CORES_DEFINITION.format(rate=f"{target_rate:.0f}") + ".",
           f"Target {target_rate:.0f} samples/s: {target_source}."]
    return "\n".join(out)


def best_vs_reference(best: dict[str, dict], uncapped: dict[str, dict], capped_by: str) -> tuple[list[str], dict]:
    """The headline: each pipeline's best fed rate and its uncapped rate over the
    reference's, a capped ratio said to be one. Returns the lines and their JSON."""
    if "reference" not in best or len(best) < 2:
        return [], {}
    ref = best["reference"]["samples_per_s"]
    ref_alone = uncapped.get("reference", {}).get("samples_per_s")
    lines = [f"Best vs best reference (fed: feeding the {capped_by}, at each pipeline's best worker count; "
             "uncapped: the pipeline alone):"]
    doc = {}
    width = max(len(p) for p in best)
    for name, row in best.items():
        if name == "reference":
            continue
        fed = row["samples_per_s"] / ref
        capped = bool(is_capped(row))
        alone = uncapped.get(name, {})
        ratio = alone["samples_per_s"] / ref_alone if alone.get("samples_per_s") and ref_alone else None
        text = f"  {name.ljust(width)}  fed {fed:.2f}x ({workers_text(row['workers'])}"
        text += f", capped by the {capped_by}: a floor)" if capped else ")"
        text += (f", uncapped {ratio:.2f}x ({workers_text(alone['workers'])}, {alone['samples_per_s']:.0f} vs "
                 f"{ref_alone:.0f} samples/s)" if ratio is not None else ", uncapped -")
        lines.append(text)
        doc[name] = {"fed": fed, "fed_workers": row["workers"], "fed_capped_by_accelerator": capped,
                     "uncapped": ratio, "uncapped_workers": alone.get("workers")}
    return lines, doc


def packed_gap_line(best: dict[str, dict], uncapped: dict[str, dict], threshold: float = PACKED_GAP) -> str | None:
    """When ``fastprep-packed`` is at least ``threshold`` times ``fastprep`` (uncapped rates
    when both were measured, else the fed ones), a line saying why, with the ratio."""
    packed = uncapped.get("fastprep-packed", {}).get("samples_per_s")
    plain = uncapped.get("fastprep", {}).get("samples_per_s")
    how = "uncapped"
    if not (packed and plain):
        if "fastprep-packed" not in best or "fastprep" not in best:
            return None
        packed, plain = best["fastprep-packed"]["samples_per_s"], best["fastprep"]["samples_per_s"]
        how = "fed"
    if packed < threshold * plain:
        return None
    return (f"Packed vs unpacked: fastprep-packed is {packed / plain:.1f}x fastprep here ({how}, {packed:.0f} vs "
            f"{plain:.0f} samples/s). A packed file is sequential with restart markers inside each MCU row, so a "
            "crop entropy-decodes only the restart intervals it covers; the original must be entropy-decoded from "
            "its first row down to the crop's last, across the full width (a progressive one: every scan of the "
            "whole image). The larger the photos relative to the crop, the larger the gap (python -m fastprep.pack "
            "packs a folder once).")
