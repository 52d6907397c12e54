"""``--recipe``: the standard torchvision recipes, benchmarked.

Two kinds of recipe:

* ``imagenet-train`` / ``imagenet-eval``: plain crop (+ flip) recipes, where fastprep runs its
  own decode transform (window-only, DCT-scaled decode); pipelines below.
* The augmentation recipes of :data:`AUGMENT_RECIPES` (``trivialaugment``, ``randaugment``,
  ``ssl-colour``): one unchanged torchvision v2 pipeline per recipe, run as it is by every
  row (see :class:`TorchvisionAugment` and :class:`FastprepAugment`). Adding one is one
  entry in that dict: a name and a factory returning the v2 pipeline.

For ``imagenet-train`` and ``imagenet-eval``:

Each recipe has four pipelines, registered in :data:`RECIPE_PIPELINES` (the ``seed`` recipe
is :data:`fastprep.bench.pipelines.PIPELINES`):

* ``reference`` -- torchvision v2 as a typical ImageNet script writes it: the whole file
  decoded by ``torchvision.io.decode_jpeg``, then ``RandomResizedCrop(224)`` +
  ``RandomHorizontalFlip()`` (train) or ``Resize(256)`` + ``CenterCrop(224)`` (eval) on
  uint8, ``default_collate`` of uint8, and ``ToDtype(float32, scale=True)`` +
  ``Normalize(ImageNet mean, std)`` on the batch on the device.
* ``fastprep`` -- :func:`fastprep.data.make_loader` with the recipe's decode transform
  (``DecodeRandomResizedCrop(224, flip_p=0.5)`` or ``DecodeResizeCenterCrop(256, 224)``:
  only the window is decoded, DCT-scaled) on its default ``threads`` engine: one native
  call per batch, RGB + normalisation fused into its write on the CPU.
* ``fastprep-processes`` -- the same on the ``processes`` engine (DataLoader workers, uint8
  collate, one batch conversion afterwards).
* ``fastprep-packed`` -- ``fastprep`` on copies of the files made once (before timing, not
  counted) by :func:`fastprep.pack.pack_folder` (see
  :func:`~fastprep.bench.dataset.packed_copy`): the same pixels (so the same batches), but
  restart markers let the window decode (full-size or DCT-scaled) entropy-decode only the
  intervals the window needs.

All deliver float32 ``[N, 3, 224, 224]`` RGB normalised with ImageNet's mean and std.

For an augmentation recipe, the same four names, each running the recipe's v2 pipeline
object (ending in ``ToDtype(float32, scale=True)`` + ``Normalize``, so no batch conversion):

* ``reference`` -- a ``DataLoader`` with ``--workers`` worker processes: per sample
  ``torchvision.io.decode_jpeg`` (RGB) then the pipeline; float32 ``default_collate``.
* ``fastprep`` -- ``make_loader`` with ``transform=`` the pipeline (the loader decodes) on the
  threads engine, which compiles the pipeline into native steps with torchvision's bits.
  A pipeline it cannot compile runs on the processes engine instead, as ``make_loader``
  does by default: the row is marked and the reason printed.
* ``fastprep-processes`` -- the same on the processes engine.
* ``fastprep-packed`` -- ``fastprep`` on the packed copies.

The multi-view recipes of :data:`MULTIVIEW_RECIPES` (``dino``, ``simclr``) have the same rows
with a list of v2 views in place of the pipeline: ``reference`` runs ``[view(image) for view
in views]`` on one ``decode_jpeg`` per file (:class:`ViewList`), fastprep's rows
``make_loader(transform=MultiView(views))``; their batches are one tensor per view. They add
``fastprep-fast``: ``fastprep`` on ``fast_ops(MultiView(views))`` (the separable blur).

The folder recipes of :data:`~fastprep.bench.unchanged.FOLDER_RECIPES` (``examples-train``,
``dino-pil``, ``timm-rand-m9``) are training scripts as their users wrote them: an
``ImageFolder`` of PIL images with the script's transform, through
``torch.utils.data.DataLoader`` (``reference``) and ``fastprep.data.DataLoader``
(``fastprep``); see :mod:`fastprep.bench.unchanged`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import default_collate

from .pipelines import Fastprep, Parts, Pipeline, ToDevice, engine_options, label_parts, read_tensor
from .unchanged import FOLDER_RECIPES, FastprepFolder, TorchFolder

__all__ = ["AUGMENT_RECIPES", "MULTIVIEW_RECIPES", "RECIPES", "RECIPE_CROP", "RECIPE_PIPELINES", "ViewList",
           "normalized_bounds", "recipe_bounds", "recipe_transform", "view_sizes"]

#: Output size of the ImageNet recipes.
RECIPE_CROP = 224


def _imagenet_stats():
    from fastprep.data.loader import IMAGENET_MEAN, IMAGENET_STD

    return IMAGENET_MEAN, IMAGENET_STD


def _float_tail() -> list:
    """``ToDtype(float32, scale=True)`` + ``Normalize(ImageNet mean, std)``."""
    from torchvision.transforms import v2

    mean, std = _imagenet_stats()
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))]


def _trivialaugment():
    from torchvision.transforms import v2

    # bilinear, as torchvision's classification reference scripts use
    return v2.Compose([v2.RandomResizedCrop(RECIPE_CROP), v2.RandomHorizontalFlip(),
                       v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR), *_float_tail(),
                       v2.RandomErasing(0.25)])


def _randaugment():
    from torchvision.transforms import v2

    # DeiT's: RandAugment with 2 ops at magnitude 9, then random erasing
    return v2.Compose([v2.RandomResizedCrop(RECIPE_CROP), v2.RandomHorizontalFlip(),
                       v2.RandAugment(2, 9, interpolation=v2.InterpolationMode.BILINEAR), *_float_tail(),
                       v2.RandomErasing(0.25)])


def _ssl_colour():
    from torchvision.transforms import v2

    # BYOL's second view (SimCLR's colour distortion, with blur and solarisation)
    return v2.Compose([v2.RandomResizedCrop(RECIPE_CROP, scale=(0.08, 1)), v2.RandomHorizontalFlip(),
                       v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), v2.RandomGrayscale(0.2),
                       v2.RandomApply([v2.GaussianBlur(23, sigma=(0.1, 2.0))], p=0.1),
                       v2.RandomSolarize(128, p=0.2), *_float_tail()])


def _ssl_view(size: int, scale: tuple[float, float], jitter: tuple[float, ...], blur_p: float,
              solarize_p: float = 0.0) -> Any:
    """One view of the self-supervised recipes: crop, flip, colour distortion, blur,
    solarisation (``p=0``: left out), ToDtype, Normalize."""
    from torchvision.transforms import v2

    steps = [v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip(),
             v2.RandomApply([v2.ColorJitter(*jitter)], p=0.8), v2.RandomGrayscale(0.2)]
    if blur_p:
        blur = v2.GaussianBlur(23, sigma=(0.1, 2.0))
        steps.append(blur if blur_p == 1 else v2.RandomApply([blur], p=blur_p))
    if solarize_p:
        steps.append(v2.RandomSolarize(128, p=solarize_p))
    return v2.Compose([*steps, *_float_tail()])


def _dino():
    # DINO's multi-crop: two global views (blur always; blur 0.1 + solarisation 0.2) and
    # eight local 96 px views (blur 0.5). DINO resizes bicubically; bilinear here (the
    # native engine's resize, as the other recipes use).
    jitter = (0.4, 0.4, 0.2, 0.1)
    return ([_ssl_view(RECIPE_CROP, (0.4, 1.0), jitter, 1.0),
             _ssl_view(RECIPE_CROP, (0.4, 1.0), jitter, 0.1, solarize_p=0.2)]
            + [_ssl_view(96, (0.05, 0.4), jitter, 0.5)] * 8)


def _simclr():
    # SimCLR on ImageNet: two views of one pipeline (colour strength 1.0, blur with p=0.5);
    # the same object twice, each repetition drawing its own parameters.
    return [_ssl_view(RECIPE_CROP, (0.08, 1.0), (0.8, 0.8, 0.8, 0.2), 0.5)] * 2


#: The augmentation recipes: ``{--recipe name: factory}``, the factory returning a fresh
#: torchvision v2 pipeline on a decoded uint8 RGB image that delivers float32
#: ``[3, RECIPE_CROP, RECIPE_CROP]`` normalised with ImageNet's mean and std. Every row of
#: the recipe runs that pipeline unchanged; adding a recipe is adding an entry here.
AUGMENT_RECIPES: dict[str, Callable[[], Any]] = {
    "trivialaugment": _trivialaugment,
    "randaugment": _randaugment,
    "ssl-colour": _ssl_colour,
}

#: The multi-view recipes: ``{--recipe name: factory}``, the factory returning a fresh list
#: of v2 view pipelines, each as an augmentation recipe's (normalised float32) but of its
#: own size. A sample is the list of its views (``fastprep.transforms.MultiView`` for
#: fastprep's rows), a batch one ``[N, 3, s, s]`` tensor per view; each view is checked.
MULTIVIEW_RECIPES: dict[str, Callable[[], list]] = {
    "dino": _dino,
    "simclr": _simclr,
}

#: ``--recipe`` choices; ``seed`` is the bench's own pipelines.
RECIPES = ("seed", "imagenet-train", "imagenet-eval", *AUGMENT_RECIPES, *MULTIVIEW_RECIPES, *FOLDER_RECIPES)


def view_sizes(recipe: str) -> tuple[int, ...] | None:
    """The output size of each view of a multi-view recipe (``None`` for the others)."""
    if recipe in FOLDER_RECIPES:
        views = FOLDER_RECIPES[recipe].views
        return views if len(views) > 1 else None
    if recipe not in MULTIVIEW_RECIPES:
        return None
    return tuple(view.transforms[0].size[0] for view in MULTIVIEW_RECIPES[recipe]())


def recipe_transform(recipe: str) -> Any:
    """A fresh per-sample transform of an augmentation or multi-view recipe, on a decoded
    image: the v2 pipeline, or a :class:`ViewList` of the views."""
    if recipe in MULTIVIEW_RECIPES:
        return ViewList(MULTIVIEW_RECIPES[recipe]())
    return AUGMENT_RECIPES[recipe]()


class ViewList(torch.nn.Module):
    """``[view(image) for view in views]``: the multi-view sample as torchvision users write
    it (the reference rows run this; fastprep's rows use ``MultiView`` of the same views)."""

    def __init__(self, views: list):
        super().__init__()
        self.views = views

    def forward(self, image):
        return [view(image) for view in self.views]


def normalized_bounds(tolerance: float = 1e-4) -> tuple[tuple[float, float], ...]:
    """``(lo, hi)`` per channel (R, G, B) of ``(x / 255 - mean) / std`` for x in [0, 255]."""
    mean, std = _imagenet_stats()
    return tuple(((0 - m) / s - tolerance, (1 - m) / s + tolerance) for m, s in zip(mean, std))


def recipe_bounds(recipe: str) -> tuple[tuple[float, float], ...]:
    """``(lo, hi)`` per channel that the batches of ``recipe`` (not ``seed``) may take:
    :func:`normalized_bounds`, or any finite value for a recipe that writes noise (timm's
    pixel-mode random erasing draws from a normal distribution)."""
    if recipe in FOLDER_RECIPES and not FOLDER_RECIPES[recipe].bounded:
        return ((-float("inf"), float("inf")),) * 3
    return normalized_bounds()


class _TorchvisionBatch(torch.nn.Module):
    """uint8 batch -> float32 in [0, 1] -> Normalize(ImageNet), with torchvision v2."""

    def __init__(self):
        super().__init__()
        from torchvision.transforms import v2

        mean, std = _imagenet_stats()
        self.t = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])

    def forward(self, images):
        return self.t(images)


class _DecodeJpeg(torch.nn.Module):
    """Encoded bytes (uint8 1-D tensor) -> RGB uint8 ``[3, H, W]`` by ``torchvision.io.decode_jpeg``."""

    def forward(self, data):
        import warnings

        from torchvision.io import ImageReadMode, decode_jpeg

        # torchvision >= 0.29 warns that its decoders are deprecated (in favour of
        # torchcodec); decode_jpeg is still what ImageNet scripts call. Idempotent:
        # filterwarnings replaces an identical filter instead of adding one.
        warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                                category=DeprecationWarning)
        return decode_jpeg(data, mode=ImageReadMode.RGB)


class TorchvisionRecipe(Pipeline):
    name = "reference"
    check_key = "torchvision"

    def __init__(self, recipe: str):
        self.recipe = recipe
        self.summary = ("torchvision v2: decode_jpeg + " + ("RandomResizedCrop(224) + RandomHorizontalFlip"
                        if recipe == "imagenet-train" else "Resize(256) + CenterCrop(224)")
                        + ", uint8 default_collate, ToDtype + Normalize on the batch")

    def unavailable(self):
        try:
            import torchvision.transforms.v2  # noqa: F401
        except ImportError as e:
            return f"needs torchvision >= 0.16 ({e})"
        return None

    def check(self, data):
        _DecodeJpeg()(torch.frombuffer(bytearray(data), dtype=torch.uint8))

    def parts(self, cfg):
        from torchvision.transforms import v2

        if self.recipe == "imagenet-train":
            steps = [_DecodeJpeg(), v2.RandomResizedCrop(RECIPE_CROP, antialias=True), v2.RandomHorizontalFlip()]
            names = ["decode_jpeg", "RandomResizedCrop", "RandomHorizontalFlip"]
        else:
            steps = [_DecodeJpeg(), v2.Resize(256, antialias=True), v2.CenterCrop(RECIPE_CROP)]
            names = ["decode_jpeg", "Resize", "CenterCrop"]
        parts = Parts(read_tensor, None, default_collate, ToDevice(cfg.device), _TorchvisionBatch())
        return label_parts(parts, cfg, names, steps)


class FastprepRecipe(Fastprep):
    name = "fastprep"
    #: Not inherited from :class:`Fastprep`: its Ray loader runs the seed recipe's crop + mask
    #: and YUV output, not this recipe's transform and normalisation.
    ray_capable = False

    def __init__(self, recipe: str, engine: str = "threads"):
        self.recipe = recipe
        self.engine = engine
        if engine != "threads":
            self.name = f"fastprep-{engine}"
        how = ("one native call per batch, RGB + Normalize fused into its write" if engine == "threads" else
               "in DataLoader workers, uint8 collate, RGB + Normalize fused per batch")
        self.summary = (f"fastprep.data.make_loader(recipe={recipe!r}, engine={engine!r}): window-only DCT-scaled "
                        f"decode + resize, {how}")

    def _steps(self):
        from fastprep.data.loader import RECIPES as LOADER_RECIPES

        return [LOADER_RECIPES[self.recipe]({})]

    def parts(self, cfg):
        from fastprep import data as D

        mean, std = _imagenet_stats()
        parts = Parts(read_tensor, None, D.collate_uint8, ToDevice(cfg.device), D.BatchConvert("rgb", mean, std),
                      prefetch=True)
        return label_parts(parts, cfg, [type(self._steps()[0]).__name__], self._steps())

    def loader_from(self, dataset, parts, cfg):
        if cfg.labelled:
            return Pipeline.loader_from(self, dataset, parts, cfg)
        from fastprep import data as D

        mean, std = _imagenet_stats()
        engine = self.engine if isinstance(dataset, D.JpegDataset) else "processes"  # see Fastprep.loader_from
        return D.make_loader(dataset, batch_size=cfg.batch_size, num_workers=cfg.num_workers, device=cfg.device,
                             shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(cfg.seed),
                             color="rgb", mean=mean, std=std, **engine_options(engine, cfg))

    def loader(self, files, targets, length, cfg):
        if cfg.labelled:
            return Pipeline.loader(self, files, targets, length, cfg)
        from fastprep import data as D

        reps = -(-length // len(files))
        dataset = D.JpegDataset((list(files) * reps)[:length], (list(targets) * reps)[:length],
                                transform=self._steps()[0])
        return self.loader_from(dataset, None, cfg)


class FastprepPackedRecipe(FastprepRecipe):
    name = "fastprep-packed"

    def __init__(self, recipe: str):
        super().__init__(recipe)
        self.summary = (f"as fastprep (recipe={recipe!r}), on copies made by fastprep.pack (restart markers: a "
                        "window decode skips the intervals outside the window)")

    def prepare_files(self, files, *, progress=True):
        from .dataset import packed_copy

        return packed_copy(list(files), progress=progress)


def _augment_steps(recipe: str, labelled: bool) -> tuple[list, list[str]]:
    """The recipe's v2 pipeline as steps and their names: the pipeline itself, or with
    ``labelled`` (``--profile``) its transforms one by one, each under its own label."""
    pipeline = recipe_transform(recipe)
    if labelled and recipe in AUGMENT_RECIPES:
        return list(pipeline.transforms), [type(t).__name__ for t in pipeline.transforms]
    return [pipeline], [recipe]


class TorchvisionAugment(TorchvisionRecipe):
    """An augmentation recipe's v2 pipeline in DataLoader workers, on ``decode_jpeg``'s image."""

    def __init__(self, recipe: str):
        self.recipe = recipe
        self.summary = (f"torchvision DataLoader: decode_jpeg + the {recipe} v2 pipeline per sample (ending in "
                        "ToDtype + Normalize), float32 default_collate")

    def parts(self, cfg):
        steps, names = _augment_steps(self.recipe, cfg.labelled)
        parts = Parts(read_tensor, None, default_collate, ToDevice(cfg.device))
        return label_parts(parts, cfg, ["decode_jpeg", *names], [_DecodeJpeg(), *steps])


class FastprepAugment(Pipeline):
    """``make_loader(transform=<the recipe's v2 pipeline>)`` on ``engine`` (``packed``: on the
    packed copies of the files)."""

    #: make_loader's engine this row asks for
    engine = "threads"
    ray_capable = False

    def __init__(self, recipe: str, engine: str = "threads", packed: bool = False, fast: bool = False):
        self.recipe, self.engine, self.packed, self.fast = recipe, engine, packed, fast
        self.name = ("fastprep-packed" if packed else "fastprep-fast" if fast else
                     "fastprep" if engine == "threads" else f"fastprep-{engine}")
        how = ("compiled to native steps, one native call per batch" if engine == "threads" else
               "in DataLoader workers, float32 collate")
        what = (f"MultiView(<the {recipe} v2 views>)" if recipe in MULTIVIEW_RECIPES else f"<the {recipe} v2 pipeline>")
        if fast:
            what = f"fast_ops({what})"
        self.summary = (f"fastprep.data.make_loader(transform={what}, engine={engine!r}): {how}"
                        + (", on copies made by fastprep.pack" if packed else "")
                        + (" (fast mode: separable GaussianBlur, not torchvision's bits)" if fast else ""))

    def _transform(self):
        """What ``make_loader(transform=...)`` gets: ``OnDecoded(pipeline)`` (what the loader
        wraps an image pipeline in), or ``MultiView(views)`` (``fast_ops`` of it in fast mode)."""
        from fastprep.transforms import MultiView, OnDecoded, fast_ops

        if self.recipe not in MULTIVIEW_RECIPES:
            return OnDecoded(AUGMENT_RECIPES[self.recipe]())
        views = MultiView(MULTIVIEW_RECIPES[self.recipe]())
        return fast_ops(views) if self.fast else views

    def prepare_files(self, files, *, progress=True):
        if not self.packed:
            return list(files)
        from .dataset import packed_copy

        return packed_copy(list(files), progress=progress)

    def parts(self, cfg):
        # the per-sample work as the processes engine does it (diagnose, --profile)
        from fastprep.io import decode_jpeg
        from fastprep.transforms import fast_ops

        if cfg.labelled:  # the decode and each transform under its own label
            steps, names = _augment_steps(self.recipe, cfg.labelled)
            steps, names = [decode_jpeg, *(fast_ops(t) if self.fast else t for t in steps)], ["decode_jpeg", *names]
        else:
            steps = [self._transform()]
            names = [f"{type(steps[0]).__name__}({self.recipe})"]
        parts = Parts(read_tensor, None, default_collate, ToDevice(cfg.device), prefetch=True)
        return label_parts(parts, cfg, names, steps)

    def loader_from(self, dataset, parts, cfg):
        from fastprep import data as D

        if cfg.labelled or not isinstance(dataset, D.JpegDataset):
            # diagnose's cached samples are float32 tensors, not files: a plain DataLoader
            return Pipeline.loader_from(self, dataset, parts, cfg)
        options = dict(batch_size=cfg.batch_size, num_workers=cfg.num_workers, device=cfg.device, shuffle=True,
                       drop_last=True, generator=torch.Generator().manual_seed(cfg.seed))
        if self.engine != "threads":
            return D.make_loader(dataset, **options, **engine_options(self.engine, cfg))
        try:
            return D.make_loader(dataset, **options, engine="threads")
        except ValueError as e:  # no native form: run it on processes, as make_loader's default would
            loader = D.make_loader(dataset, **options, **engine_options("processes", cfg))
            loader.engine_reason = str(e)
            return loader

    def loader(self, files, targets, length, cfg):
        if cfg.labelled:
            return Pipeline.loader(self, files, targets, length, cfg)
        from fastprep import data as D

        reps = -(-length // len(files))
        # what make_loader(files, transform=pipeline, seed=...) builds, with the bench's targets
        dataset = D.JpegDataset((list(files) * reps)[:length], (list(targets) * reps)[:length],
                                transform=self._transform(), seed=cfg.seed)
        return self.loader_from(dataset, None, cfg)


def _recipe_pipelines(recipe: str) -> dict[str, Pipeline]:
    if recipe in FOLDER_RECIPES:
        return {"reference": TorchFolder(recipe), "fastprep": FastprepFolder(recipe)}
    if recipe in MULTIVIEW_RECIPES:
        return {"reference": TorchvisionAugment(recipe), "fastprep": FastprepAugment(recipe),
                "fastprep-fast": FastprepAugment(recipe, fast=True),
                "fastprep-processes": FastprepAugment(recipe, engine="processes"),
                "fastprep-packed": FastprepAugment(recipe, packed=True)}
    if recipe in AUGMENT_RECIPES:
        return {"reference": TorchvisionAugment(recipe), "fastprep": FastprepAugment(recipe),
                "fastprep-processes": FastprepAugment(recipe, engine="processes"),
                "fastprep-packed": FastprepAugment(recipe, packed=True)}
    return {"reference": TorchvisionRecipe(recipe), "fastprep": FastprepRecipe(recipe),
            "fastprep-processes": FastprepRecipe(recipe, engine="processes"),
            "fastprep-packed": FastprepPackedRecipe(recipe)}


#: ``{recipe: {name: pipeline}}`` for every recipe but ``seed``.
RECIPE_PIPELINES = {r: _recipe_pipelines(r) for r in RECIPES if r != "seed"}


def pipeline_registry(recipe: str = "seed") -> dict:
    """The ``{name: pipeline}`` registry of ``recipe`` (``seed``: every registered pipeline)."""
    from .pipelines import PIPELINES

    if recipe == "seed":
        return PIPELINES
    try:
        return RECIPE_PIPELINES[recipe]
    except KeyError:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, got {recipe!r}") from None


def get_recipe_pipeline(name: str, recipe: str = "seed") -> Pipeline:
    """The pipeline ``name`` of ``recipe``."""
    registry = pipeline_registry(recipe)
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown pipeline {name!r} for recipe {recipe}; choose from {', '.join(registry)}") from None
