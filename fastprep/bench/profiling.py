"""Labelled pipeline pieces for torch.profiler / VTune, and the ``--profile`` runner.

:class:`LabelledCompose` is a drop-in for ``torchvision.transforms.Compose`` that wraps
every step in ``torch.profiler.record_function``, so a trace shows each transform as its
own range. Use it in your own code::

    from fastprep.bench.profiling import LabelledCompose, Labelled
    transform = LabelledCompose([DecodeRandomCrop(256), RandomMask(0.25)])
    loader = DataLoader(ds, collate_fn=Labelled(collate_uint8, "collate"), ...)

Ranges recorded in DataLoader worker processes are not seen by a profiler running in the
main process; profile with ``num_workers=0`` (as ``--profile`` does) to see every label.
When not profiling, a ``record_function`` costs about a microsecond.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence

import torch
from torch.profiler import record_function

from .trainer import Trainer

__all__ = ["Labelled", "LabelledCompose", "itt_available", "itt_ranges", "label_of", "profile_pipelines"]


def label_of(fn) -> str:
    """A readable name for a transform: its class name, or a function's name."""
    if isinstance(fn, Labelled):
        return fn.name
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


class Labelled:
    """``fn`` run inside ``record_function(name)``; picklable when ``fn`` is."""

    def __init__(self, fn: Callable, name: str | None = None):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name if name is not None else label_of(fn)

    def __call__(self, *args, **kwargs):
        with record_function(self.name):
            return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Labelled({self.fn!r}, name={self.name!r})"


class LabelledCompose(torch.nn.Module):
    """Apply ``transforms`` in order, each inside ``record_function(prefix + name)``.

    Args:
        transforms: callables (nn.Modules, torchvision transforms or functions).
        names: one label per transform; default the class (or function) name.
        prefix: prepended to every label, e.g. ``"reference/"``.
    """

    def __init__(self, transforms: Sequence[Callable], names: Sequence[str] | None = None, prefix: str = ""):
        super().__init__()
        transforms = list(transforms)
        for t in transforms:
            if not callable(t):
                raise TypeError(f"every transform must be callable, got {type(t).__name__}")
        if names is None:
            names = [label_of(t) for t in transforms]
        elif len(names) != len(transforms):
            raise ValueError(f"names must have one entry per transform: got {len(names)} for {len(transforms)}")
        self.transforms = transforms
        self.names = [prefix + n for n in names]
        # Register modules so .to(), repr and state_dict see them, as torchvision Compose does not.
        self._modules_list = torch.nn.ModuleList(t for t in transforms if isinstance(t, torch.nn.Module))

    def forward(self, x):
        for name, t in zip(self.names, self.transforms):
            with record_function(name):
                x = t(x)
        return x

    def __repr__(self) -> str:
        inner = "".join(f"\n    {n}: {t!r}" for n, t in zip(self.names, self.transforms))
        return f"{type(self).__name__}({inner}\n)"


def itt_available() -> bool:
    """Whether ``torch.profiler.itt`` (Intel VTune ITT ranges) works in this build."""
    try:
        return bool(torch.profiler.itt.is_available())
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False


@contextlib.contextmanager
def itt_ranges(enabled: bool = True):
    """Emit every ``record_function`` range as an ITT range (for VTune) while active."""
    if not enabled:
        yield
        return
    with torch.autograd.profiler.emit_itt():
        yield


def trace_path(directory: str | os.PathLike, pipeline: str) -> str:
    """Where ``--profile`` writes a pipeline's trace: ``DIR/<pipeline>/<host>.pt.trace.json``
    (one TensorBoard run per pipeline; Perfetto and chrome://tracing open it directly)."""
    import socket

    sub = os.path.join(os.fspath(directory), pipeline)
    os.makedirs(sub, exist_ok=True)
    return os.path.join(sub, f"{socket.gethostname()}_{os.getpid()}.pt.trace.json")


def _labelled_steps(pipe, data, cfg, trainer, steps: int, warmup: int = 1) -> None:
    """Run ``warmup + steps`` labelled steps in this process (workers=0)."""
    length = (warmup + steps) * cfg.batch_size
    it = iter(pipe.loader(pipe.prepare_files(data.files, progress=False), data.targets, length, cfg))
    try:
        for _ in range(warmup + steps):
            with record_function("data_wait"):
                images, targets = next(it)
            with record_function("train_step"):
                trainer.step(images, targets)
        trainer.begin_window()
        trainer.end_window()  # wait for the device to finish the last step
    finally:
        del it


def profile_pipelines(pipelines, data, cfg, make_trainer: Callable[[], Trainer], *, steps: int,
                      directory: str | os.PathLike | None = None, itt: bool = False, seed: int = 0) -> list[str]:
    """``--profile DIR`` / ``--itt``: per pipeline, ``steps`` steps with ``num_workers=0`` and
    every piece labelled (read_file, each transform, collate, h2d_copy, batch_transform,
    data_wait, train_step), recorded by torch.profiler into ``directory/<pipeline>/`` and/or
    emitted as ITT ranges.

    Args:
        pipelines: :class:`~fastprep.bench.pipelines.Pipeline` objects.
        data: the files and targets (:class:`~fastprep.bench.dataset.BenchData`).
        cfg: a :class:`~fastprep.bench.pipelines.PipelineConfig`; it is copied with
            ``num_workers=0, labelled=True``.
        make_trainer: a fresh trainer per pipeline.
        steps: labelled steps recorded per pipeline (after one warm-up step).
        directory: where traces go (``None``: no trace).
        itt: also emit ITT ranges (VTune).
        seed: ``torch.manual_seed`` before each pipeline.

    Returns:
        The trace paths written.
    """
    from torch.profiler import ProfilerActivity, profile

    paths = []
    for pipe in pipelines:
        trainer = make_trainer()
        pcfg = dataclasses.replace(cfg, num_workers=0, labelled=True, device=trainer.device,
                                   multiprocessing_context=None)
        torch.manual_seed(seed)
        if itt:
            with itt_ranges(True):
                _labelled_steps(pipe, data, pcfg, trainer, steps)
        if directory is not None:
            activities = [ProfilerActivity.CPU]
            if trainer.device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            with profile(activities=activities) as prof:
                _labelled_steps(pipe, data, pcfg, trainer, steps)
            path = trace_path(directory, pipe.name)
            prof.export_chrome_trace(path)
            paths.append(path)
    return paths
