"""Shared test data: JPEGs encoded by the tests themselves (Pillow, and libjpeg-turbo's
cjpeg/jpegtran for encodings Pillow cannot write), built by ``fuzz/_jpegs.py``, which the
fuzz seed corpus uses too."""

import os
import shutil
import sys

import numpy as np
import pytest

from fastprep.bench.synthetic import photo_like

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz"))
import _jpegs  # noqa: E402  (fuzz/ holds the builder shared with the seed corpus)
from _jpegs import cmyk_jpeg, pil_jpeg  # noqa: E402,F401  (tests import them from here)


def _need_tool(name):
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not found (apt-get install libjpeg-turbo-progs)"
        if os.environ.get("CI"):
            pytest.fail(msg)  # CI installs it: a missing tool must not silently skip tests
        pytest.skip(msg)
    return path


def cjpeg(rgb, *args, gray: bool = False, scans: str | None = None) -> bytes:
    """:func:`_jpegs.cjpeg`; skips the test when cjpeg is missing (fails it in CI)."""
    return _jpegs.cjpeg(rgb, *args, gray=gray, scans=scans, tool=_need_tool("cjpeg"))


def jpegtran(data, *args) -> bytes:
    """:func:`_jpegs.jpegtran`; skips the test when jpegtran is missing (fails it in CI)."""
    return _jpegs.jpegtran(data, *args, tool=_need_tool("jpegtran"))


# name -> (builder(rgb) -> bytes). Sizes are chosen by the caller.
ENCODINGS = {
    "444": lambda a: pil_jpeg(a, quality=90, subsampling="4:4:4"),
    "422": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:2"),
    "420": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:0"),
    "420-progressive": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:0", progressive=True),
    "422-progressive": lambda a: pil_jpeg(a, quality=85, subsampling="4:2:2", progressive=True),
    "444-progressive": lambda a: pil_jpeg(a, quality=95, subsampling="4:4:4", progressive=True),
    "420-restart": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:0", restart_marker_blocks=3),
    "422-restart-rows": lambda a: pil_jpeg(a, quality=90, subsampling="4:2:2", restart_marker_rows=1),
    "440": lambda a: cjpeg(a, "-quality", "90", "-sample", "1x2,1x1,1x1"),
    "411": lambda a: cjpeg(a, "-quality", "90", "-sample", "4x1,1x1,1x1"),
    "420-arithmetic": lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-sample", "2x2,1x1,1x1"),
    "420-arith-progressive": lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-progressive"),
    "gray": lambda a: pil_jpeg(np.ascontiguousarray(a[..., 1]), quality=90),
    "gray-progressive": lambda a: pil_jpeg(np.ascontiguousarray(a[..., 0]), quality=90, progressive=True),
    "cmyk": cmyk_jpeg,
}


_cache = {}


def make_jpeg(encoding: str, height: int, width: int, seed: int = 0) -> bytes:
    key = (encoding, height, width, seed)
    if key not in _cache:
        _cache[key] = ENCODINGS[encoding](photo_like(height, width, seed))
    return _cache[key]


def make_image_folder(top, files, classes: int) -> str:
    """An ``ImageFolder`` tree in the folder ``top`` (a ``pathlib.Path``): file ``k`` of
    ``files`` (``(encoding, height, width)``, an encoding of :data:`ENCODINGS` or ``"png"``)
    as ``class{k % classes}/img{k:02d}.jpg`` (``.png``); returns ``str(top)``."""
    from PIL import Image

    for k, (encoding, h, w) in enumerate(files):
        folder = top / f"class{k % classes}"
        folder.mkdir(exist_ok=True)
        if encoding == "png":
            Image.fromarray(photo_like(h, w, k)).save(folder / f"img{k:02d}.png")
        else:
            (folder / f"img{k:02d}.jpg").write_bytes(make_jpeg(encoding, h, w, seed=k))
    return str(top)


@pytest.fixture(scope="session")
def photo_420() -> bytes:
    """A 533x800 q90 4:2:0 photo-like JPEG (the benchmark's shape)."""
    return make_jpeg("420", 533, 800, seed=1)
