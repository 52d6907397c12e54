"""The settings of a benchmark run, resolved once from the command line (or built in code).

:class:`BenchConfig` is what every runner function takes: nothing below the command line
reads ``argparse`` objects. Build one directly to drive the benchmark from Python::

    from fastprep.bench.config import BenchConfig
    from fastprep.bench.cli import run
    run(BenchConfig(num_images=64, steps=4, warmup=1, workers=(0, 2), pipelines=("fastprep",)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from .._threads import usable_cpus
from .pipelines import PipelineConfig
from .recipes import RECIPE_CROP, RECIPES, pipeline_registry, recipe_bounds, view_sizes
from .trainer import ASSUMED_GPU_TFLOPS, Trainer, make_trainer, train_step_flops

if TYPE_CHECKING:
    from .dataset import BuiltinSpec

__all__ = ["BUILTIN_SIZES", "DEFAULTS", "LARGE_DEFAULTS", "LARGE_QUICK", "ON_ERROR", "QUICK", "QUICK_FLOOR",
           "QUICK_MAX_STEPS", "QUICK_MEGAPIXELS", "QUICK_MIN_WINDOW_S", "TARGET_RATE", "TARGET_SOURCE", "BenchConfig",
           "Counts", "presets", "trainer_line", "usable_cores"]

QUICK = {"num_images": 128, "steps": 8, "warmup": 2}
DEFAULTS = {"num_images": 512, "steps": 30, "warmup": 5}
#: ``--builtin-size``: the built-in photos of the ImageNet recipes, ``{name: (width, height)}``.
#: ``imagenet`` (the default) is ImageNet's typical photo; ``12mp`` a 12-megapixel camera's.
BUILTIN_SIZES = {"imagenet": (500, 375), "12mp": (4000, 3000)}
#: Presets for ``--builtin-size 12mp``: each photo has 64 times the pixels of an ImageNet
#: one (about 2 MB; 3-4 CPU seconds to generate, so 24 take under a minute on 2 cores; some
#: 50 ms to decode whole), so fewer images (the loaders cycle over them) and fewer steps
#: keep a default run to a few minutes. The quick set is the first half of the default one.
LARGE_DEFAULTS = {"num_images": 24, "steps": 8, "warmup": 2}
LARGE_QUICK = {"num_images": 12, "steps": 3, "warmup": 1}
#: ``--quick`` on ``--data DIR``: megapixels decoded per measured configuration (a pipeline
#: at a worker count) at most, about what the built-in quick run decodes (10 batches of 64
#: images of 800x533: 273 MP). A folder of 12-MP photos then takes about as long as the
#: built-in set instead of 30 times longer; see :meth:`BenchConfig.fit_quick`.
QUICK_MEGAPIXELS = 280
#: The floor :meth:`BenchConfig.fit_quick` never goes below, whatever the image size: at
#: least 4 measured steps of 8 images (fewer would leave a batch that straddles the
#: window's ends a large share of it).
QUICK_FLOOR = {"num_images": 16, "batch_size": 8, "steps": 4, "warmup": 1}
#: ``--quick`` with the steps left to the preset: a configuration goes on measuring past
#: its steps until its window has lasted this long (a fast pipeline's 8 steps can take a
#: tenth of a second), up to :data:`QUICK_MAX_STEPS` measured steps.
QUICK_MIN_WINDOW_S = 2.0
QUICK_MAX_STEPS = 64
#: ``--target-rate``'s default, samples/s: the accelerator rate whose feeding the report
#: prices in CPU cores (:data:`TARGET_SOURCE`).
TARGET_RATE = 2470.0
TARGET_SOURCE = ("ResNet-50 v1.5 training on one A100 80GB in mixed precision, 2,470 images/s: NVIDIA's published "
                 "figure (DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5 README, DGX A100, "
                 "NGC PyTorch 21.03)")
#: ``skip``: leave out files a pipeline cannot read (listed once); ``raise``: stop at the first.
ON_ERROR = ("skip", "raise")
#: ``--engine``: DataLoader workers, or Ray Data actors (fastprep.ray) on this machine.
ENGINES = ("dataloader", "ray")


def presets(quick: bool = False, builtin_size: str | None = None) -> dict[str, int]:
    """``{"num_images", "steps", "warmup"}`` defaults for a run (``--quick``, ``--builtin-size``)."""
    if builtin_size == "12mp":
        return LARGE_QUICK if quick else LARGE_DEFAULTS
    return QUICK if quick else DEFAULTS


usable_cores = usable_cpus  # CPUs this process may run on


class Counts(NamedTuple):
    """A run's counts once :class:`BenchConfig` has filled the presets in (never ``None``)."""

    num_images: int
    batch_size: int
    steps: int
    warmup: int


def _filled(name: str, value: int | None) -> int:
    if value is None:  # BenchConfig.__post_init__ fills every count
        raise AssertionError(f"BenchConfig.{name} was not filled in")
    return value


@dataclass
class BenchConfig:
    """Everything one ``python -m fastprep.bench`` (or ``diagnose``) run needs.

    Attributes:
        data: folder of the user's JPEGs, or ``None`` for the built-in synthetic set.
        num_images: images to use (the first ones in sorted order for a folder); ``None``:
            the preset (see :func:`presets`), as for ``steps`` and ``warmup``.
        pipelines: names in :data:`fastprep.bench.pipelines.PIPELINES`.
        workers: DataLoader worker counts to measure (``diagnose`` uses the first).
        batch_size: images per batch (``None``: 64, which ``--quick`` may lower for a
            folder of large images, see :meth:`fit_quick`).
        crop_size, mask_ratio, seed, mp_context: the pipelines' settings.
        device: ``auto``, ``sim``, ``cpu`` or ``cuda[:i]`` (see :func:`~fastprep.bench.trainer.make_trainer`).
        step_ms: the simulated accelerator's step time (``None``: from the toy CNN's FLOPs).
        threads: torch threads in the training process (``None``: 1 with the simulated
            accelerator, torch's default otherwise).
        steps, warmup: measured and unmeasured steps per configuration.
        builtin_size: the built-in photos of the ImageNet recipes, a key of
            :data:`BUILTIN_SIZES` (``None``: ``imagenet``). Only for the built-in data of
            the recipes other than ``seed``: with ``data`` or the ``seed`` recipe it is
            a ``ValueError``.
        on_error: ``"skip"`` or ``"raise"`` (see :data:`ON_ERROR`).
        min_window_s: each configuration measures past ``steps`` until its window lasts
            this long, up to :data:`QUICK_MAX_STEPS` steps (``None``:
            :data:`QUICK_MIN_WINDOW_S` with ``quick`` when ``steps`` is left to the
            preset, else 0: exactly ``steps``).
        target_rate: the accelerator rate, samples/s, that the report says how many CPU
            cores each pipeline needs to feed (default :data:`TARGET_RATE`, see
            :data:`TARGET_SOURCE`).
        progress: show progress bars.
        json_path, plot_path, profile_dir: optional outputs.
        profile_steps, itt, check_syncs: profiling options.
        quick: use the ``--quick`` presets for counts left at ``None`` (recorded in the JSON).
        command: the command line, for the JSON report.
    """

    data: str | None = None
    num_images: int | None = None  # None: the preset (see presets())
    pipelines: tuple[str, ...] | None = None  # None: every registered pipeline
    workers: tuple[int, ...] = (0, 1)
    batch_size: int | None = None  # None: 64 (--quick may lower it for large images)
    crop_size: int = 256
    mask_ratio: float = 0.25
    seed: int = 0
    mp_context: str | None = None
    device: str = "auto"
    step_ms: float | None = None
    threads: int | None = None
    steps: int | None = None
    warmup: int | None = None
    on_error: str = "skip"
    progress: bool = True
    json_path: str | None = None
    plot_path: str | None = None
    profile_dir: str | None = None
    profile_steps: int = 4
    itt: bool = False
    check_syncs: bool = False
    quick: bool = False
    command: str = "python -m fastprep.bench"
    recipe: str = "seed"
    engine: str = "dataloader"
    builtin_size: str | None = None
    min_window_s: float | None = None
    target_rate: float = TARGET_RATE

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, got {self.recipe!r}")
        if self.builtin_size is not None:
            if self.builtin_size not in BUILTIN_SIZES:
                raise ValueError(f"--builtin-size must be one of {', '.join(BUILTIN_SIZES)}, got "
                                 f"{self.builtin_size!r}")
            if self.data:
                raise ValueError("--builtin-size chooses the built-in photos and does not apply to --data DIR "
                                 "(your files keep their size); drop one of the two")
            if self.recipe == "seed":
                raise ValueError("--builtin-size applies to the ImageNet recipes (--recipe "
                                 f"{', '.join(r for r in RECIPES if r != 'seed')}); the seed recipe always uses its "
                                 "800x533 built-in photos")
        elif self.recipe != "seed" and not self.data:
            self.builtin_size = "imagenet"
        # The counts left to the presets: only these may fit_quick() lower.
        self._preset_fields = {name for name in ("num_images", "steps", "warmup", "batch_size")
                               if getattr(self, name) is None}
        if self.batch_size is None:
            self.batch_size = 64
        if self.min_window_s is None:
            self.min_window_s = QUICK_MIN_WINDOW_S if self.quick and self.steps is None else 0.0
        for name, value in presets(self.quick, self.builtin_size).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        PIPELINES = pipeline_registry(self.recipe)
        if self.recipe != "seed":  # the recipe fixes the output size and has no mask
            self.crop_size, self.mask_ratio = RECIPE_CROP, 0.0
        self.pipelines = tuple(PIPELINES) if self.pipelines is None else tuple(self.pipelines)
        self.workers = tuple(self.workers)
        unknown = [p for p in self.pipelines if p not in PIPELINES]
        if unknown or not self.pipelines:
            raise ValueError(f"unknown pipeline(s) {unknown or list(self.pipelines)}; choose from "
                             f"{', '.join(PIPELINES)}")
        if not self.workers or min(self.workers) < 0:
            raise ValueError(f"workers must be non-negative counts, got {self.workers}")
        for name in ("num_images", "batch_size", "crop_size", "steps", "profile_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if not self.min_window_s >= 0:
            raise ValueError(f"min_window_s must be >= 0, got {self.min_window_s}")
        if not self.target_rate > 0:
            raise ValueError(f"target_rate must be > 0 samples/s, got {self.target_rate}")
        if not 0 <= self.mask_ratio <= 1:
            raise ValueError(f"mask_ratio must be in [0, 1], got {self.mask_ratio}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}")

    @property
    def counts(self) -> Counts:
        """``num_images``, ``batch_size``, ``steps`` and ``warmup`` as filled in by the presets."""
        return Counts(_filled("num_images", self.num_images), _filled("batch_size", self.batch_size),
                      _filled("steps", self.steps), _filled("warmup", self.warmup))

    @property
    def max_steps(self) -> int:
        """The most steps a configuration measures: ``steps``, or with a minimum window
        (:attr:`min_window_s`) :data:`QUICK_MAX_STEPS` when that is more."""
        steps = self.counts.steps
        return max(steps, QUICK_MAX_STEPS) if self.min_window_s else steps

    @property
    def pipeline_names(self) -> tuple[str, ...]:
        """``pipelines`` as filled in (every registered pipeline of the recipe when it was ``None``)."""
        if self.pipelines is None:
            raise AssertionError("BenchConfig.pipelines was not filled in")
        return self.pipelines

    def fit_quick(self, megapixels: float) -> str | None:
        """Lower ``--quick``'s counts for a ``--data`` folder whose images average ``megapixels``.

        A configuration then decodes at most about :data:`QUICK_MEGAPIXELS` (never below
        :data:`QUICK_FLOOR`): warm-up first, then the batch size, then the measured steps,
        then the number of images. Only counts left to the presets change, and only with
        ``quick`` and ``data``.

        Returns:
            The line that tells the user what was lowered, or ``None`` when nothing was.
        """
        if not (self.quick and self.data) or megapixels <= 0:
            return None
        budget = QUICK_MEGAPIXELS / megapixels  # images per configuration
        num_images, batch_size, steps, warmup = self.counts
        if batch_size * (steps + warmup) <= budget:
            return None
        before = {name: getattr(self, name) for name in self._preset_fields}
        fit = self._preset_fields
        if "warmup" in fit:
            warmup = min(warmup, QUICK_FLOOR["warmup"])
        if "batch_size" in fit:
            planned_steps = steps if "steps" not in fit else QUICK_FLOOR["steps"]
            per_batch = int(budget // (planned_steps + warmup))
            batch_size = max(QUICK_FLOOR["batch_size"], min(batch_size, per_batch))
        if "steps" in fit:
            steps = max(QUICK_FLOOR["steps"], min(steps, int(budget // batch_size) - warmup))
        if "num_images" in fit:
            num_images = min(num_images, max(QUICK_FLOOR["num_images"], 2 * batch_size))
        self.num_images, self.batch_size, self.steps, self.warmup = num_images, batch_size, steps, warmup
        labels = {"num_images": "images", "batch_size": "batch size", "steps": "measured steps",
                  "warmup": "warm-up steps"}
        changed = [f"{label} {before[name]} -> {getattr(self, name)}" for name, label in labels.items()
                   if name in before and before[name] != getattr(self, name)]
        if not changed:
            return None
        return (f"--quick: your images average {megapixels:.1f} MP, so this run uses " + ", ".join(changed) +
                f" (about {QUICK_MEGAPIXELS} MP per configuration; pass --num-images, --batch-size, --steps or "
                "--warmup to choose yourself, or drop --quick)")

    def builtin_spec(self) -> BuiltinSpec:
        """The :class:`~fastprep.bench.dataset.BuiltinSpec` of the built-in data: 800x533 for
        the seed recipe, :data:`BUILTIN_SIZES` ``[builtin_size]`` for the ImageNet recipes."""
        from .dataset import BuiltinSpec

        if self.recipe == "seed":
            return BuiltinSpec()
        width, height = BUILTIN_SIZES[self.builtin_size or "imagenet"]
        return BuiltinSpec(height=height, width=width)

    @property
    def output_bounds(self) -> tuple[tuple[float, float], ...] | None:
        """Per-channel bounds of the pipelines' output (``None``: the YUV default)."""
        return None if self.recipe == "seed" else recipe_bounds(self.recipe)

    @property
    def check_crop(self) -> int | tuple[int, ...]:
        """The output size every batch is checked against: ``crop_size``, or one size per
        view for a multi-view recipe."""
        return view_sizes(self.recipe) or self.crop_size

    def _step_flops(self) -> float:
        """The toy CNN's FLOPs per training step on one batch (on every view of it)."""
        sizes = view_sizes(self.recipe) or (self.crop_size,)
        return sum(train_step_flops(self.counts.batch_size, s) for s in sizes)

    def make_trainer(self, num_classes: int = 10) -> Trainer:
        """A fresh trainer for one configuration (see :func:`~fastprep.bench.trainer.make_trainer`;
        a multi-view recipe's simulated step covers every view)."""
        step_ms = self.step_ms
        if step_ms is None and view_sizes(self.recipe):
            step_ms = max(1.0, round(self._step_flops() / (ASSUMED_GPU_TFLOPS * 1e12) * 1e3))
        return make_trainer(self.device, step_ms, self.counts.batch_size, self.crop_size, num_classes)

    def pipeline_config(self, workers: int, device: torch.device, labelled: bool = False) -> PipelineConfig:
        """The :class:`PipelineConfig` for ``workers`` DataLoader workers feeding ``device``."""
        return PipelineConfig(crop_size=self.crop_size, mask_ratio=self.mask_ratio, batch_size=self.counts.batch_size,
                              num_workers=workers, device=device, seed=self.seed,
                              multiprocessing_context=None if labelled else self.mp_context, labelled=labelled)

    def set_threads(self, trainer: Trainer) -> None:
        """Set torch's threads in this process for ``trainer`` (see :attr:`threads`)."""
        threads = self.threads if self.threads is not None else (1 if trainer.simulated else None)
        if threads is not None:
            torch.set_num_threads(threads)


def trainer_line(cfg: BenchConfig, trainer: Trainer) -> str:
    """One line describing what consumes the batches (for the report header)."""
    if trainer.simulated:
        batch_size = cfg.counts.batch_size
        gflop = cfg._step_flops() / 1e9
        sizes = view_sizes(cfg.recipe)
        shape = (f"{cfg.crop_size}x{cfg.crop_size}" if not sizes else
                 "views " + " + ".join(f"{sizes.count(s)} x {s}x{s}" for s in dict.fromkeys(sizes)))
        how = ("set by --step-ms" if cfg.step_ms is not None else
               f"toy CNN at batch {batch_size}, {shape}: {gflop:.0f} GFLOP per "
               f"training step at an assumed {ASSUMED_GPU_TFLOPS:g} TFLOP/s, a mid-range GPU in fp32")
        cap = batch_size / trainer.step_s if trainer.step_s > 0 else float("inf")
        return (f"Trainer: simulated accelerator, {trainer.step_s * 1e3:.0f} ms/step ({how}); it can take at most "
                f"{cap:.0f} samples/s")
    return f"Trainer: ToyNet on {trainer.device} (CrossEntropy, SGD momentum 0.9)"
