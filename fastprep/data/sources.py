"""Which map-style datasets :class:`fastprep.data.DataLoader` can read as files: a dataset's
*file source* (:func:`file_source`).

A dataset whose ``__getitem__`` is ``(transform(Image.open(path).convert("RGB")), target)``
for a known ``path`` and ``target`` -- torchvision's ``ImageFolder`` / ``DatasetFolder`` with
their default loader, and ``Subset`` (``random_split``'s parts) and ``ConcatDataset`` of such
datasets -- is described by its files, targets and one transform; the loader can then read
the files itself and run the transform on its native engine when the transform compiles. A
dataset of your own declares the same with one method (the *fastprep source protocol*)::

    class MyDataset(torch.utils.data.Dataset):
        def __getitem__(self, i):
            return self.transform(Image.open(self.files[i]).convert("RGB")), self.targets[i]

        def __fastprep_source__(self):
            return self.files, self.targets, self.transform

It returns ``(files, targets, transform)``: ``files`` a sequence of paths, ``targets`` one int
per file, ``transform`` the callable ``__getitem__`` applies to the PIL image (or ``None``),
with ``dataset[i] == (transform(Image.open(files[i]).convert("RGB")), targets[i])`` -- a
promise the loader takes at its word. Anything else runs its own ``__getitem__``.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from torch.utils.data import ConcatDataset, Subset

__all__ = ["PROTOCOL", "FileSource", "NoFileSource", "file_source"]

#: the method a dataset defines to declare its files, targets and transform
PROTOCOL = "__fastprep_source__"


class NoFileSource(Exception):
    """The dataset is not read as files; the message says why."""


class FileSource(NamedTuple):
    """What a dataset's sample ``i`` is made of: ``(transform(PIL RGB image of files[i]),
    targets[i])``."""

    files: list[str]
    targets: list[int]
    transform: Any


def _folder_source(dataset) -> FileSource | None:
    """An ``ImageFolder``/``DatasetFolder`` with torchvision's own ``__getitem__`` and PIL loader."""
    try:
        from torchvision import get_image_backend
        from torchvision.datasets import DatasetFolder
        from torchvision.datasets.folder import default_loader, pil_loader
    except ImportError:  # pragma: no cover - torchvision is a dependency
        return None
    if not isinstance(dataset, DatasetFolder):
        return None
    if type(dataset).__getitem__ is not DatasetFolder.__getitem__:
        raise NoFileSource(f"{type(dataset).__name__} overrides __getitem__ (your code)")
    loader = getattr(dataset, "loader", None)
    pil = loader is pil_loader or (loader is default_loader and get_image_backend() == "PIL")
    if not pil:
        raise NoFileSource(f"{type(dataset).__name__}'s loader is {getattr(loader, '__name__', loader)!r}, not "
                           "torchvision's PIL loader (default_loader/pil_loader)")
    if dataset.target_transform is not None:
        raise NoFileSource(f"{type(dataset).__name__} has a target_transform (your code, applied per sample)")
    return FileSource([os.fspath(p) for p, _ in dataset.samples], [int(t) for _, t in dataset.samples],
                      dataset.transform)


def _declared_source(dataset) -> FileSource:
    """The source a dataset declares with :data:`PROTOCOL`."""
    declared = getattr(dataset, PROTOCOL)()
    if not isinstance(declared, (tuple, list)) or len(declared) != 3:
        raise TypeError(f"{type(dataset).__name__}.{PROTOCOL}() must return (files, targets, transform), "
                        f"got {declared!r:.200}")
    files, targets, transform = declared
    if isinstance(files, (str, os.PathLike)):
        raise TypeError(f"{type(dataset).__name__}.{PROTOCOL}(): files must be a sequence of paths, got a "
                        f"single path {files!r}")
    files, targets = [os.fspath(f) for f in files], [int(t) for t in targets]
    if len(files) != len(targets):
        raise ValueError(f"{type(dataset).__name__}.{PROTOCOL}() returned {len(files)} files and "
                         f"{len(targets)} targets")
    if transform is not None and not callable(transform):
        raise TypeError(f"{type(dataset).__name__}.{PROTOCOL}(): transform must be callable or None, got "
                        f"{type(transform).__name__}")
    return FileSource(files, targets, transform)


def file_source(dataset) -> FileSource:
    """The files, targets and transform of ``dataset``'s samples (see the module's docstring).

    Raises:
        NoFileSource: the dataset runs its own ``__getitem__``; the message says why.
        TypeError, ValueError: a ``__fastprep_source__`` that breaks the protocol.
    """
    if callable(getattr(dataset, PROTOCOL, None)):
        return _declared_source(dataset)
    folder = _folder_source(dataset)
    if folder is not None:
        return folder
    if isinstance(dataset, Subset):
        if type(dataset).__getitem__ is not Subset.__getitem__:
            raise NoFileSource(f"{type(dataset).__name__} overrides __getitem__ (your code)")
        inner = file_source(dataset.dataset)
        indices = [int(i) for i in dataset.indices]
        return FileSource([inner.files[i] for i in indices], [inner.targets[i] for i in indices], inner.transform)
    if isinstance(dataset, ConcatDataset):
        if type(dataset).__getitem__ is not ConcatDataset.__getitem__:
            raise NoFileSource(f"{type(dataset).__name__} overrides __getitem__ (your code)")
        parts = [file_source(d) for d in dataset.datasets]
        if any(p.transform is not parts[0].transform for p in parts[1:]):
            raise NoFileSource("the ConcatDataset's parts have different transforms (one native pipeline runs "
                               "one transform)")
        return FileSource([f for p in parts for f in p.files], [t for p in parts for t in p.targets],
                          parts[0].transform if parts else None)
    raise NoFileSource(f"a {type(dataset).__name__} runs its own __getitem__ (an ImageFolder/DatasetFolder with "
                       f"torchvision's PIL loader, Subset/random_split/ConcatDataset of them, or a dataset with "
                       f"{PROTOCOL}() is read as files)")
