"""``--recipe`` rows for training scripts as their users wrote them: an ``ImageFolder`` of PIL
images with the script's own transform, through ``torch.utils.data.DataLoader`` (the
``reference`` row) and through :class:`fastprep.data.DataLoader` (the ``fastprep`` row, one
import changed), on the same dataset.

The recipes (:data:`FOLDER_RECIPES`):

* ``examples-train`` -- pytorch/examples' ImageNet training transform: v1
  ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize``.
* ``dino-pil`` -- DINO's multi-crop class (:class:`DataAugmentationDINO`: 2 global 224 views
  and 8 local 96 views, bicubic, colour jitter, its own blur and solarization classes drawing
  from Python's ``random``), unchanged; a sample is the list of its 10 views.
* ``timm-rand-m9`` -- ``timm.data.create_transform(224, is_training=True,
  auto_augment="rand-m9-mstd0.5", re_prob=0.25, re_mode="pixel", interpolation="random")``;
  only when timm is installed (the row is skipped otherwise).

The bench's files become an ``ImageFolder`` of symbolic links (:func:`imagefolder_copy`, one
class folder per parent folder of the files); each loader reads a ``Subset`` of it in a seeded
random order (cycled to the samples the run needs), ``shuffle=True``, ``drop_last=True``. Before
anything is timed, the ``fastprep`` row checks its contract on a few samples: sample ``i`` of
``fastprep.data.DataLoader(subset, seed=S)`` equals ``with sample_rng(S, 0, i): subset[i]``
bit for bit, targets included (:func:`check_exact`); a mismatch fails the row.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Subset, default_collate

from .pipelines import Parts, PILOpen, Pipeline, PipelineConfig, ToDevice, label_parts, read_bytes

__all__ = ["FOLDER_RECIPES", "DataAugmentationDINO", "FolderRecipe", "GaussianBlur", "Solarization",
           "TorchFolder", "FastprepFolder", "check_exact", "examples_train", "examples_val", "imagefolder_copy",
           "timm_eval", "timm_train"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Samples :func:`check_exact` compares.
EXACT_SAMPLES = 4


# ------------------------------------------------------------------------------------------
# The users' transforms, as written in their repositories
# ------------------------------------------------------------------------------------------


class GaussianBlur:
    """DINO's ``utils.GaussianBlur``: with probability ``p``, Pillow's Gaussian blur of a
    radius drawn uniformly from ``[radius_min, radius_max]`` (Python's ``random``)."""

    def __init__(self, p=0.5, radius_min=0.1, radius_max=2.0):
        self.prob, self.radius_min, self.radius_max = p, radius_min, radius_max

    def __call__(self, img):
        from PIL import ImageFilter

        do_it = random.random() <= self.prob
        if not do_it:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.radius_min, self.radius_max)))


class Solarization:
    """DINO's ``utils.Solarization``: ``ImageOps.solarize`` with probability ``p``."""

    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        from PIL import ImageOps

        if random.random() < self.p:
            return ImageOps.solarize(img)
        return img


class DataAugmentationDINO:
    """DINO's ``main_dino.DataAugmentationDINO``: 2 global 224 views and ``local_crops_number``
    local 96 views of one PIL image, as a list."""

    def __init__(self, global_crops_scale=(0.4, 1.0), local_crops_scale=(0.05, 0.4), local_crops_number=8):
        import torchvision.transforms as transforms

        flip_and_color_jitter = transforms.Compose([
            transforms.RandomHorizontalFlip(p=0.5),
            transforms.RandomApply([transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)],
                                   p=0.8),
            transforms.RandomGrayscale(p=0.2),
        ])
        normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        bicubic = transforms.InterpolationMode.BICUBIC
        self.global_transfo1 = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
            flip_and_color_jitter, GaussianBlur(1.0), normalize])
        self.global_transfo2 = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
            flip_and_color_jitter, GaussianBlur(0.1), Solarization(0.2), normalize])
        self.local_crops_number = local_crops_number
        self.local_transfo = transforms.Compose([
            transforms.RandomResizedCrop(96, scale=local_crops_scale, interpolation=bicubic),
            flip_and_color_jitter, GaussianBlur(p=0.5), normalize])

    def __call__(self, image):
        crops = [self.global_transfo1(image), self.global_transfo2(image)]
        for _ in range(self.local_crops_number):
            crops.append(self.local_transfo(image))
        return crops


def examples_train(size: int = 224):
    """pytorch/examples' ImageNet training transform (v1, on PIL images)."""
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def examples_val(size: int = 224):
    """pytorch/examples' ImageNet validation transform (``Resize(size * 8 // 7)``: 256 for 224)."""
    from torchvision import transforms as T

    return T.Compose([T.Resize(size * 8 // 7), T.CenterCrop(size), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def timm_train(size: int = 224):
    """timm's ``create_transform`` training pipeline of DeiT-style recipes (rand-m9-mstd0.5,
    random erasing 0.25 in ``pixel`` mode, random interpolation). Needs timm."""
    from timm.data import create_transform

    return create_transform(size, is_training=True, auto_augment="rand-m9-mstd0.5", re_prob=0.25, re_mode="pixel",
                            interpolation="random")


def timm_eval(size: int = 224):
    """timm's ``create_transform`` evaluation pipeline. Needs timm."""
    from timm.data import create_transform

    return create_transform(size, is_training=False)


@dataclass(frozen=True)
class FolderRecipe:
    """A ``--recipe`` whose rows read an ``ImageFolder`` with ``make_transform()``."""

    #: the title of its rows (docs, summaries)
    title: str
    #: a fresh transform of a PIL image, as the user's script builds it
    make_transform: Callable[[], object]
    #: output size of each view (one: a single image)
    views: tuple[int, ...] = (224,)
    #: the module it needs beyond torchvision (``None``: none)
    needs: str | None = None
    #: its values stay within ``Normalize``'s image of [0, 1] (timm's pixel random erasing
    #: writes normal noise: not bounded)
    bounded: bool = True


#: The folder recipes: ``{--recipe name: FolderRecipe}``.
FOLDER_RECIPES: dict[str, FolderRecipe] = {
    "examples-train": FolderRecipe("pytorch/examples train (ImageFolder, v1 PIL)", examples_train),
    "dino-pil": FolderRecipe("dino (PIL, unchanged)", DataAugmentationDINO, views=(224, 224) + (96,) * 8),
    "timm-rand-m9": FolderRecipe("timm rand-m9", timm_train, needs="timm", bounded=False),
}


# ------------------------------------------------------------------------------------------
# The data: the bench's files as an ImageFolder
# ------------------------------------------------------------------------------------------


def imagefolder_copy(files: Sequence[str]) -> list[str]:
    """``files`` as an ``ImageFolder`` of symbolic links, cached: ``cache_root() /
    "imagefolder-<sha1 of the file list>"``, one class folder per parent folder name of the
    files (an ImageFolder's own classes stay its classes), link ``k`` named ``{k:06d}.<ext>``.

    Returns:
        The links, one per file, in order (their folder's parent is the ImageFolder root).
    """
    from .dataset import cache_root

    if not files:
        raise ValueError("imagefolder_copy needs at least one file, got none")
    real = [os.path.realpath(f) for f in files]
    root = cache_root() / f"imagefolder-{hashlib.sha1(chr(0).join(real).encode()).hexdigest()[:12]}"
    links = []
    for k, f in enumerate(real):
        ext = os.path.splitext(f)[1] or ".jpg"
        link = root / os.path.basename(os.path.dirname(f)) / f"{k:06d}{ext}"
        if not (os.path.islink(link) and os.readlink(link) == f):
            link.parent.mkdir(parents=True, exist_ok=True)
            tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
            os.symlink(f, tmp)
            os.replace(tmp, link)
        links.append(str(link))
    return links


def _subset(files: Sequence[str], recipe: str, length: int, seed: int):
    """``Subset(ImageFolder(root of files, transform), order)``: a seeded permutation of the
    folder's samples, cycled to ``length``."""
    from torchvision.datasets import ImageFolder

    root = os.path.dirname(os.path.dirname(files[0]))
    dataset = ImageFolder(root, FOLDER_RECIPES[recipe].make_transform())
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    reps = -(-length // len(order))
    return Subset(dataset, (order * reps)[:length])


def _equal(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def check_exact(dataset, workers: int, seed: int = 0, count: int = EXACT_SAMPLES) -> str:
    """Compare the first ``count`` samples of ``fastprep.data.DataLoader(dataset, seed=seed)``
    with ``with sample_rng(seed, 0, i): dataset[i]``, images and targets.

    Returns:
        The line that says so, naming the engine.

    Raises:
        RuntimeError: a sample differs (naming it).
    """
    import fastprep.data as fd

    count = min(count, len(dataset))
    loader = fd.DataLoader(Subset(dataset, range(count)), batch_size=count, num_workers=workers, seed=seed)
    images, targets = next(iter(loader))
    for i in range(count):
        with fd.sample_rng(seed, 0, i):
            want_image, want_target = dataset[i]
        got = [view[i] for view in images] if isinstance(images, list) else images[i]
        if not _equal(want_image, got) or int(targets[i]) != want_target:
            raise RuntimeError(f"sample {i} differs from `with sample_rng({seed}, 0, {i}): dataset[{i}]` "
                               f"(engine {loader.engine})")
    return (f"{count} samples equal `with sample_rng({seed}, 0, i): dataset[i]` bit for bit, targets included "
            f"(engine {loader.engine}{'' if loader.engine_reason is None else ': ' + loader.engine_reason})")


# ------------------------------------------------------------------------------------------
# The rows
# ------------------------------------------------------------------------------------------


class _FolderPipeline(Pipeline):
    """A loader over ``Subset(ImageFolder(...))`` of the recipe's transform."""

    check_key = "PIL"

    def __init__(self, recipe: str):
        self.recipe = recipe

    def unavailable(self):
        needs = FOLDER_RECIPES[self.recipe].needs
        if needs:
            import importlib.util

            if importlib.util.find_spec(needs) is None:
                return f"{needs} not installed (pip install {needs})"
        return None

    def check(self, data):
        PILOpen()(data)

    def prepare_files(self, files, *, progress=True):
        return imagefolder_copy(files)

    def parts(self, cfg):
        # the per-sample work of the reference row (diagnose, --profile)
        parts = Parts(read_bytes, None, default_collate, ToDevice(cfg.device))
        return label_parts(parts, cfg, ["PILOpen", self.recipe],
                           [PILOpen(), FOLDER_RECIPES[self.recipe].make_transform()])

    def _options(self, cfg: PipelineConfig) -> dict:
        return dict(batch_size=cfg.batch_size, shuffle=True, drop_last=True, num_workers=cfg.num_workers,
                    generator=torch.Generator().manual_seed(cfg.seed), multiprocessing_context=cfg.mp_context())

    def loader(self, files, targets, length, cfg):
        if cfg.labelled:
            return Pipeline.loader(self, files, targets, length, cfg)
        return self._loader(_subset(files, self.recipe, length, cfg.seed), cfg)

    def _loader(self, dataset, cfg: PipelineConfig):
        raise NotImplementedError


class TorchFolder(_FolderPipeline):
    """``torch.utils.data.DataLoader`` on the ImageFolder: the script as it is."""

    name = "reference"

    def __init__(self, recipe: str):
        super().__init__(recipe)
        self.summary = (f"torch.utils.data.DataLoader(Subset(ImageFolder(transform=<{FOLDER_RECIPES[recipe].title}>)),"
                        " shuffle=True): PIL decode + the transform per sample in worker processes")

    def _loader(self, dataset, cfg):
        return DataLoader(dataset, **self._options(cfg))


class FastprepFolder(_FolderPipeline):
    """:class:`fastprep.data.DataLoader` on the same ImageFolder: one import changed."""

    name = "fastprep"
    engine = "threads"

    def __init__(self, recipe: str):
        super().__init__(recipe)
        #: the line of :func:`check_exact`, once :meth:`prepare_files` has run
        self.exactness: str | None = None
        self.summary = (f"fastprep.data.DataLoader(Subset(ImageFolder(transform=<{FOLDER_RECIPES[recipe].title}>)), "
                        "shuffle=True, seed=...): the same dataset object, read natively when it can be")

    def prepare_files(self, files, *, progress=True):
        links = super().prepare_files(files, progress=progress)
        subset = _subset(links, self.recipe, len(links), seed=0)
        self.exactness = check_exact(subset, workers=min(2, os.cpu_count() or 1))
        print(f"{self.name} ({self.recipe}): {self.exactness}", flush=True)
        return links

    def _loader(self, dataset, cfg):
        import fastprep.data as fd

        return fd.DataLoader(dataset, seed=cfg.seed, **self._options(cfg))
