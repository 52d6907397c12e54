"""Unchanged torchvision v2 recipes through ``make_loader(transform=...)``.

* The threads engine runs them natively (``loader.engine == "threads"``), and its batches are
  the processes engine's bit for bit (same seed: every sample draws from its keyed generator).
* Both equal torchvision itself: the same pipeline applied to ``torchvision.io.decode_jpeg`` of
  each file under ``keyed_default_rng(sample_key(seed, epoch, i))``, computed in the test.
* What the native engine cannot reproduce exactly is refused with the reason, and the loader
  then runs the pipeline on processes (``loader.engine_reason``), or raises for
  ``engine="threads"``.

Inputs: JPEGs made in the test from photo-like content of several sizes.
"""

from __future__ import annotations

import os

import pytest
import torch
from torchvision.transforms import v2

import fastprep.data as D
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like

from _torchvision_oracle import torchvision_decode
from fastprep.data.native import NativePipeline, Unsupported
from fastprep.transforms import DecodeRandomResizedCrop, OnDecoded

SEED = 7
N = 12
SIZE = 48
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _tail():
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


RECIPES = {
    "trivialaugment": lambda: v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(),
                                          v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
                                          *_tail(), v2.RandomErasing(0.25)]),
    "randaugment": lambda: v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(),
                                       v2.RandAugment(2, 9), *_tail()]),
    "autoaugment": lambda: v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(),
                                       v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET), *_tail()]),
    "ssl-colour": lambda: v2.Compose([
        v2.RandomResizedCrop(SIZE, scale=(0.2, 1.0)), v2.RandomHorizontalFlip(),
        v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), v2.RandomGrayscale(0.2),
        v2.RandomApply([v2.GaussianBlur(9, sigma=(0.1, 2.0))], p=0.5), v2.RandomSolarize(128, p=0.2), *_tail()]),
    "uint8-eval": lambda: v2.Compose([v2.Resize(SIZE + 8), v2.CenterCrop(SIZE)]),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    for i in range(N):
        h, w = 60 + 7 * i, 90 - 3 * i
        with open(os.path.join(root, f"{i:02d}.jpg"), "wb") as f:
            f.write(encode_jpeg(photo_like(h, w, seed=i), quality=85 + i % 10))
    return str(root)


def _loader(folder, transform, engine, **kw):
    extra = {"multiprocessing_context": "fork"} if engine == "processes" else {}
    return D.make_loader(folder, transform=transform, engine=engine, seed=SEED, batch_size=N, shuffle=False,
                         num_workers=2, device="cpu", **extra, **kw)


def _torchvision(folder, transform):
    out = []
    for i, name in enumerate(sorted(os.listdir(folder))):
        image = torchvision_decode(os.path.join(folder, name))
        with keyed_default_rng(sample_key(SEED, 0, i)):
            out.append(transform(image))
    return torch.stack(out)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_threads_equal_processes_and_torchvision(folder, name):
    transform = RECIPES[name]()
    threads = _loader(folder, transform, "threads")
    assert threads.engine == "threads" and threads.engine_reason is None
    (got, _), = list(threads)
    (procs, _), = list(_loader(folder, transform, "processes"))
    assert torch.equal(got, procs)
    want = _torchvision(folder, transform)
    want = want if want.is_floating_point() else want.float() / 255  # uint8 pipelines: the loader's RGB / 255
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_a_fastprep_decode_transform_with_augmentations_stays_on_threads(folder):
    transform = v2.Compose([DecodeRandomResizedCrop(SIZE, flip_p=0.5), v2.TrivialAugmentWide(),
                            v2.RandomErasing(0.25)])
    threads = _loader(folder, transform, "threads")
    assert threads.engine == "threads"
    (got, _), = list(threads)
    (procs, _), = list(_loader(folder, transform, "processes"))
    assert torch.equal(got, procs)


def test_truncated_file_fails_as_the_whole_decode_does(tmp_path):
    """A v2 pipeline's reference decodes the whole file: a file cut short fails there even when
    the window the threads engine decodes is intact. Both engines then raise the same error, or
    skip the same sample."""
    for i in range(4):
        data = encode_jpeg(photo_like(160, 48, seed=i), quality=90)
        if i == 2:
            data = data[:len(data) * 3 // 4]  # the bottom rows lost, no EOI
        (tmp_path / f"{i}.jpg").write_bytes(data)
    middle = v2.Compose([v2.Resize(48), v2.CenterCrop((16, 48))])  # rows 72-88 of 160: intact in the cut file
    cut = str(tmp_path / "2.jpg")
    import fastprep.io as fio

    with pytest.raises(fio.DecodeError, match="premature end of data"):
        fio.decode_jpeg(fio.read_file(cut))
    assert fio.decode_jpeg_roi(fio.read_file(cut), 72, 0, 16, 48).shape == (3, 16, 48)
    for engine in ("threads", "processes"):
        loader = _loader(str(tmp_path), middle, engine)
        assert loader.engine == engine
        with pytest.raises(fio.DecodeError, match=r"2\.jpg.*premature end of data"):
            list(loader)
    batches = {}
    for engine in ("threads", "processes"):
        loader = _loader(str(tmp_path), middle, engine, on_error="skip")
        (batches[engine], _), = list(loader)
        assert loader.dataset.skipped == 1 and loader.dataset.skipped_files[0][1] == cut
    assert torch.equal(batches["threads"], batches["processes"])


class TestRefusals:
    """Each refusal names the step and why; the loader then runs on processes."""

    CASES = [
        (v2.Compose([v2.ColorJitter(0.4), v2.RandomResizedCrop(SIZE)]),
         "the pipeline starts with ColorJitter: the native engine needs a fixed output size first"),
        (v2.Compose([v2.Resize(SIZE)]), r"Resize\(48\) alone gives every image its own size"),
        (v2.Compose([v2.RandomResizedCrop(SIZE, interpolation=v2.InterpolationMode.LANCZOS)]),
         r"RandomResizedCrop\(interpolation='lanczos'\): only bilinear, bicubic, nearest, nearest-exact resizing "
         "is native"),
        (v2.Compose([v2.RandomResizedCrop(SIZE), v2.Lambda(lambda x: x)]), "Lambda has no native implementation"),
        (v2.Compose([v2.RandomResizedCrop(SIZE), v2.ToDtype(torch.float32, scale=True), v2.ColorJitter(0.2)]),
         "ColorJitter after ToDtype works on float images"),
        (v2.Compose([v2.RandomResizedCrop(SIZE), v2.ToDtype(torch.float16, scale=True)]),
         r"ToDtype\(torch.float16, scale=True\): the native output conversion is ToDtype\(torch.float32"),
        (v2.Compose([v2.RandomResizedCrop(SIZE), v2.Normalize(MEAN, STD)]),
         "Normalize must follow ToDtype"),
        (v2.Compose([v2.RandomCrop(SIZE, padding=4, fill=300)]),
         r"RandomCrop\(fill=300\): natively a uint8 image's fill is in \[0, 256\)"),
        (v2.Compose([v2.Pad(4, padding_mode="reflect"), v2.RandomResizedCrop(SIZE)]),
         "Pad followed by RandomResizedCrop: natively a Pad must be followed by RandomCrop or CenterCrop"),
        (v2.Compose([v2.RandomResizedCrop(SIZE), v2.Grayscale(2)]), "num_output_channels must be 1 or 3"),
        (v2.Compose([v2.CenterCrop(10), v2.RandomApply([v2.GaussianBlur((23, 3))], p=0.5)]),
         r"GaussianBlur: kernel_size \(23, 3\) on 10x10 images: the reflection padding \(kernel_size // 2\) must "
         "be smaller than the image, torchvision raises"),
    ]

    @pytest.mark.parametrize("k", range(len(CASES)))
    def test_message(self, k):
        transform, message = self.CASES[k]
        with pytest.raises(Unsupported, match=message):
            NativePipeline.compile(OnDecoded(transform))

    def test_blur_wider_than_the_image(self, folder):
        """torchvision raises for GaussianBlur(23) on a 10x10 image, so the threads engine refuses it and
        the processes engine gives torchvision's error; one pixel narrower a kernel runs natively.
        fastprep's separable blur (fast mode) reflects any padding and runs on threads."""
        from fastprep.transforms import fast_ops

        too_wide = v2.Compose([v2.CenterCrop(10), v2.GaussianBlur(21)])
        loader = _loader(folder, too_wide, None)
        assert loader.engine == "processes" and "kernel_size (21, 21) on 10x10" in loader.engine_reason
        with pytest.raises(RuntimeError, match=r"^.*\.jpg. \(index \d+\): Argument #4: Padding size should be less"):
            list(loader)
        widest = v2.Compose([v2.CenterCrop(10), v2.GaussianBlur(19)])
        assert _loader(folder, widest, "threads").engine == "threads"
        fast = _loader(folder, fast_ops(too_wide), "threads")
        (got, _), = list(fast)
        (want, _), = list(_loader(folder, fast_ops(too_wide), "processes"))
        assert got.shape == (N, 3, 10, 10) and torch.equal(got, want)

    def test_subclass_refused(self):
        class MyJitter(v2.ColorJitter):
            pass

        with pytest.raises(Unsupported, match="MyJitter subclasses ColorJitter"):
            NativePipeline.compile(OnDecoded(v2.Compose([v2.CenterCrop(SIZE), MyJitter(0.2)])))

    def test_loader_falls_back_with_the_reason(self, folder):
        transform = v2.Compose([v2.RandomResizedCrop(SIZE), v2.Lambda(lambda x: x.flip(-1))])
        loader = _loader(folder, transform, None)
        assert loader.engine == "processes" and "Lambda has no native implementation" in loader.engine_reason
        with pytest.raises(ValueError, match="engine='threads' cannot run this pipeline: Lambda has no native"):
            _loader(folder, transform, "threads")
