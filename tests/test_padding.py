"""Padded crops through the threads engine, against torchvision's own output.

Every padding form (an int, ``[a]``, ``(a, b)``, four values; lists and tuples), every mode
(constant, edge, reflect, symmetric), fills (a number, a float, a per-channel tuple, v2's
dicts), ``pad_if_needed``, v1 and v2 ``RandomCrop``, and ``Pad`` (v1 and v2) before
``RandomCrop``/``CenterCrop``. The oracle is torchvision itself: the pipeline on
``torchvision.io.decode_jpeg`` of each file under ``keyed_default_rng(sample_key(seed, 0, i))``.

The folder holds images larger and smaller than the crop, one as large, a 1-pixel-wide one
and a very wide, short one: reflect padding of a side not longer than the padding (and
symmetric padding longer than the side) makes torchvision raise; the threads engine must
raise torchvision's error for those files and give torchvision's pixels for the others.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torchvision.io as tvio
import torchvision.transforms as v1
from torchvision import tv_tensors
from torchvision.transforms import v2

import fastprep.data as D
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like

from _torchvision_oracle import torchvision_decode
from fastprep.data.native import NativePipeline, Unsupported
from fastprep.transforms import OnDecoded

SEED = 5
CROP = 24
#: (height, width): larger, as large, shorter, 1 pixel wide, very wide and short, smaller
SIZES = [(40, 53), (24, 24), (19, 30), (30, 1), (5, 160), (11, 13)]
FORMS = [3, [2], (1, 4), [0, 3, 5, 1], (2, 1, 0, 4)]
MODES = ["constant", "edge", "reflect", "symmetric"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("padding")
    out = []
    for i, (h, w) in enumerate(SIZES):
        path = os.path.join(root, f"{i:02d}.jpg")
        with open(path, "wb") as f:
            f.write(encode_jpeg(photo_like(h, w, seed=300 + i), quality=90))
        out.append(path)
    return out


def _torchvision(paths, transform):
    """Per file, torchvision's output (float, / 255 as the loader's) or the exception it raises."""
    out = []
    for i, path in enumerate(paths):
        image = torchvision_decode(path)
        try:
            with keyed_default_rng(sample_key(SEED, 0, i)):
                out.append(transform(image).float() / 255)
        except Exception as e:  # noqa: BLE001 -- torchvision's own error, compared below
            out.append(e)
    return out


def _loader(paths, transform):
    loader = D.make_loader(list(paths), transform=transform, engine="threads", seed=SEED, batch_size=len(paths),
                           shuffle=False, num_workers=2, device="cpu")
    assert loader.engine == "threads"
    return loader


def _check(paths, transform) -> int:
    """Compare the threads engine with torchvision on the files torchvision takes, and check
    that it raises torchvision's error on the first file torchvision refuses; returns the
    number of files compared pixel for pixel."""
    results = _torchvision(paths, transform)
    good = [p for p, r in zip(paths, results) if isinstance(r, torch.Tensor)]
    if good:
        want = torch.stack([r for r in _torchvision(good, transform)])
        (got, _), = list(_loader(good, transform))
        assert got.shape == want.shape
        mismatch = (got != want).sum().item()
        assert mismatch == 0, f"{mismatch} values differ from torchvision"
    refused = [(p, r) for p, r in zip(paths, results) if not isinstance(r, torch.Tensor)]
    if refused:
        path, error = refused[0]
        with pytest.raises(Exception) as info:
            list(_loader([path], transform))
        got = info.value
        assert isinstance(got, type(error)) or isinstance(got.__cause__, type(error)), (got, error)
        assert str(error).split("\n")[0] in str(got)
    return len(good)


def _fill(k: int, is_v2: bool):
    """A fill form for case ``k``: numbers for v1 (tensors take no other); for v2 a number, a
    float, a per-channel tuple or list, or a dict."""
    if not is_v2:
        return [0, 201, 17.9][k % 3]
    return [0, 201, 17.9, (10, 200, 30), [255, 0, 128.5], {tv_tensors.Image: 9, "others": (1, 2, 3)}][k % 6]


CASES = [(cls, padding, mode) for cls in (v2.RandomCrop, v1.RandomCrop) for padding in FORMS for mode in MODES]


class TestRandomCrop:
    @pytest.mark.parametrize("k", range(len(CASES)))
    def test_forms_and_modes(self, paths, k):
        cls, padding, mode = CASES[k]
        fill = _fill(k, cls is v2.RandomCrop) if mode == "constant" else 7
        transform = v2.Compose([cls(CROP, padding=padding, pad_if_needed=k % 2 == 0, fill=fill, padding_mode=mode)])
        assert _check(paths, transform) >= 1

    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("cls", [v2.RandomCrop, v1.RandomCrop], ids=["v2", "v1"])
    def test_pad_if_needed_alone(self, paths, cls, mode):
        """No padding of its own: the short images are padded to the crop by ``mode``."""
        compared = _check(paths, v2.Compose([cls(CROP, pad_if_needed=True, padding_mode=mode)]))
        assert compared >= 2

    def test_reflect_compares_pixels(self, paths):
        """The CIFAR recipe on the images reflect can pad (every mode's pixels are compared)."""
        transform = v2.Compose([v1.RandomCrop(CROP, padding=4, padding_mode="reflect")])
        assert _check(paths[:3], transform) == 3


class TestFills:
    def test_dict_picks_the_image_type(self, paths):
        """After ToImage the image is a ``tv_tensors.Image``: its dict entry; without, ``"others"``;
        with neither, zeros."""
        table = {tv_tensors.Image: (5, 6, 7), "others": 250}
        _check(paths, v2.Compose([v2.ToImage(), v2.RandomCrop(CROP, padding=3, pad_if_needed=True, fill=table)]))
        _check(paths, v2.Compose([v2.RandomCrop(CROP, padding=3, pad_if_needed=True, fill=dict(table))]))
        _check(paths, v2.Compose([v2.RandomCrop(CROP, padding=3, pad_if_needed=True, fill={tv_tensors.Mask: 9})]))

    @pytest.mark.parametrize("fill", [300, -1, (1, 2)], ids=repr)
    def test_refused(self, fill):
        """torchvision raises (or wraps around) for these on uint8 images: the processes engine runs
        torchvision itself."""
        with pytest.raises(Unsupported, match="fill"):
            NativePipeline.compile(OnDecoded(v2.Compose([v2.RandomCrop(CROP, padding=2, fill=fill)])))


class TestPad:
    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("pad", [v1.Pad, v2.Pad], ids=["v1", "v2"])
    def test_pad_then_crop(self, paths, pad, mode):
        """``Pad`` then a crop with its own padding: two stages, the crop's constant fill around
        the first's pixels."""
        _check(paths, v2.Compose([pad((2, 5), fill=40, padding_mode=mode),
                                  v1.RandomCrop(CROP, padding=1, pad_if_needed=True, fill=90)]))
        _check(paths, v2.Compose([pad([1, 0, 3, 2], fill=40, padding_mode=mode),
                                  v2.RandomCrop(CROP, pad_if_needed=True, padding_mode="edge")]))

    @pytest.mark.parametrize("mode", MODES)
    def test_pad_then_center_crop(self, paths, mode):
        """The centre crop pads with zeros around the Pad's pixels where it is larger."""
        fill = (9, 99, 199) if mode == "constant" else 9  # v2 raises for a sequence with other modes
        _check(paths, v2.Compose([v2.Pad(3, fill=fill, padding_mode=mode), v2.CenterCrop(CROP + 4)]))

    def test_v1_compose(self, paths):
        """A v1 pipeline (v1 Compose) on the decoded tensor."""
        _check(paths, v1.Compose([v1.Pad(4, padding_mode="reflect"), v1.RandomCrop(CROP)]))
        assert _check(paths, v1.Compose([v1.CenterCrop(CROP)])) == len(paths)  # zeros around small images

    def test_pad_alone_refused(self):
        with pytest.raises(Unsupported, match="Pad alone"):
            NativePipeline.compile(OnDecoded(v2.Compose([v2.Pad(4)])))


class TestSpan:
    def test_span_is_the_maps_extent(self):
        """The decode window (``axis_span``, O(stages)) is the first and last image pixel that the
        per-pixel map reads, on random stacks of stages (written out pixel by pixel here)."""
        import random

        from fastprep.transforms._plan import PadStage, axis_span, pad_error, padded_size

        def reads(length, stages, axis, start, count):
            out = []
            for t in range(start, start + count):
                sizes = [length]
                for st in stages:
                    sizes.append(sizes[-1] + st.ltrb[1 - axis] + st.ltrb[3 - axis])
                u = t
                for k in range(len(stages) - 1, -1, -1):
                    st, n = stages[k], sizes[k]
                    u -= st.ltrb[1 - axis]
                    if st.mode == "constant" and not 0 <= u < n:
                        break
                    u = {"edge": min(max(u, 0), n - 1), "reflect": -u if u < 0 else min(u, 2 * (n - 1) - u),
                         "symmetric": -u - 1 if u < 0 else min(u, 2 * n - 1 - u)}.get(st.mode, u)
                else:
                    out.append(u)
            return (min(out), max(out)) if out else None

        rng = random.Random(0)
        checked = 0
        for _ in range(3000):
            h, w = rng.randint(1, 9), rng.randint(1, 9)
            stages = tuple(PadStage(rng.choice(MODES), tuple(rng.randint(0, 5) for _ in range(4)))
                           for _ in range(rng.randint(1, 4)))
            if pad_error(h, w, stages):
                continue
            axis = rng.randint(0, 1)
            n, length = padded_size(h, w, stages)[axis], (h, w)[axis]
            start = rng.randint(0, n - 1)
            count = rng.randint(1, n - start)
            assert axis_span(length, stages, axis, start, count) == reads(length, stages, axis, start, count)
            checked += 1
        assert checked > 1000


class TestMultiView:
    def test_views_share_the_decode(self, paths):
        """Padded views among others: the batch op decodes the union of the views' windows once
        and reads each padded view by index from it; torchvision: ``[view(image) for view in views]``."""
        from fastprep.transforms import MultiView

        views = [v2.Compose([v2.RandomCrop(CROP, padding=4, padding_mode="reflect")]),
                 v2.Compose([v1.RandomCrop(16, padding=(3, 1), pad_if_needed=True, padding_mode="symmetric")]),
                 v2.Compose([v2.Pad(2, fill=(1, 2, 3)), v2.RandomCrop(20, padding=1, fill=250)])]
        good = paths[:3]
        loader = D.make_loader(good, transform=MultiView(views), engine="threads", seed=SEED, batch_size=len(good),
                               shuffle=False, num_workers=2, device="cpu")
        assert loader.engine == "threads"
        (got, _), = list(loader)
        for i, path in enumerate(good):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                image = tvio.decode_jpeg(tvio.read_file(path), mode=tvio.ImageReadMode.RGB)
            with keyed_default_rng(sample_key(SEED, 0, i)):
                want = [view(image).float() / 255 for view in views]
            for v in range(len(views)):
                assert torch.equal(got[v][i], want[v]), (i, v)
