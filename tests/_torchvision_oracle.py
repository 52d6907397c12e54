"""The oracle of the threads-engine tests: torchvision itself.

Each file decoded by ``torchvision.io.decode_jpeg`` (RGB), the pipeline applied under the
sample's keyed generator (``keyed_default_rng(sample_key(seed, epoch, i))``, what a seeded
loader gives sample ``i``), compared with one threads-engine batch of the same folder. No
fastprep path is the reference.
"""

from __future__ import annotations

import os
import warnings

import torch
import torchvision.io as tvio

import fastprep.data as D
from fastprep._seeding import keyed_default_rng, sample_key


def torchvision_decode(path: str) -> torch.Tensor:
    """torchvision's RGB decode of the file at ``path``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
        return tvio.decode_jpeg(tvio.read_file(path), mode=tvio.ImageReadMode.RGB)


def torchvision_batch(folder: str, transform, seed: int) -> torch.Tensor:
    """The pipeline on torchvision's decode of each file of ``folder`` (sorted), under sample
    ``i``'s keyed generator in epoch 0, stacked; uint8 outputs as the loader delivers them
    (float ``/ 255``)."""
    out = []
    for i, name in enumerate(sorted(os.listdir(folder))):
        image = torchvision_decode(os.path.join(folder, name))
        with keyed_default_rng(sample_key(seed, 0, i)):
            out.append(transform(image))
    want = torch.stack(out)
    return want if want.is_floating_point() else want.float() / 255


def threads_batch(folder: str, transform, seed: int, batch_size: int) -> torch.Tensor:
    """One batch of ``make_loader(folder, transform=...)`` on the threads engine (asserted)."""
    loader = D.make_loader(folder, transform=transform, engine="threads", seed=seed, batch_size=batch_size,
                           shuffle=False, num_workers=2, device="cpu")
    assert loader.engine == "threads", loader.engine_reason
    (images, _), = list(loader)
    return images


def assert_threads_equal_torchvision(folder: str, transform, seed: int, batch_size: int) -> None:
    got, want = threads_batch(folder, transform, seed, batch_size), torchvision_batch(folder, transform, seed)
    assert got.shape == want.shape and got.dtype == want.dtype
    mismatch = (got != want).sum().item()
    assert mismatch == 0, f"{mismatch} values differ from torchvision"
