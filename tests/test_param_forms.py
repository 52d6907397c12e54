"""Every accepted parameter form of the compiled torchvision transforms, through the threads
engine, against torchvision's own output.

The oracle is torchvision itself: the same pipeline applied to ``torchvision.io.decode_jpeg``
of each file under ``keyed_default_rng(sample_key(seed, 0, i))``, computed here. No other
fastprep path is the reference (a swapped parameter looks right when both sides share it).

Inputs: JPEGs made in the test from photo-like content of several sizes (odd ones included).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torchvision.io as tvio
from torchvision.transforms import v2

import fastprep.data as D
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like

SEED = 11
N = 6
SIZE = 40


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    for i in range(N):
        h, w = 37 + 9 * i, 71 - 5 * i
        with open(os.path.join(root, f"{i:02d}.jpg"), "wb") as f:
            f.write(encode_jpeg(photo_like(h, w, seed=100 + i), quality=80 + 3 * i))
    return str(root)


def _threads(folder, transform):
    loader = D.make_loader(folder, transform=transform, engine="threads", seed=SEED, batch_size=N,
                           shuffle=False, num_workers=2, device="cpu")
    assert loader.engine == "threads"
    (images, _), = list(loader)
    return images


def _torchvision(folder, transform):
    out = []
    for i, name in enumerate(sorted(os.listdir(folder))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
            image = tvio.decode_jpeg(tvio.read_file(os.path.join(folder, name)), mode=tvio.ImageReadMode.RGB)
        with keyed_default_rng(sample_key(SEED, 0, i)):
            out.append(transform(image))
    want = torch.stack(out)
    return want if want.is_floating_point() else want.float() / 255  # uint8 pipelines: the loader's / 255


def _check(folder, transform):
    got, want = _threads(folder, transform), _torchvision(folder, transform)
    assert got.shape == want.shape and got.dtype == want.dtype
    mismatch = (got != want).sum().item()
    assert mismatch == 0, f"{mismatch} values differ from torchvision"


PADDINGS = [3, [3], (2, 6), [2, 6], (1, 2, 3, 4), [5, 0, 0, 7], [0, 9, 4, 1]]


class TestRandomCropPadding:
    @pytest.mark.parametrize("padding", PADDINGS, ids=repr)
    @pytest.mark.parametrize("fill", [0, 173])
    def test_constant(self, folder, padding, fill):
        _check(folder, v2.Compose([v2.RandomCrop(SIZE, padding=padding, pad_if_needed=True, fill=fill)]))
