"""Shared test data: JPEGs encoded by the tests themselves (Pillow, and libjpeg-turbo's
cjpeg/jpegtran for encodings Pillow cannot write)."""

import io
import os
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from fastprep.bench.synthetic import photo_like


def _need_tool(name):
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not found (apt-get install libjpeg-turbo-progs)"
        if os.environ.get("CI"):
            pytest.fail(msg)  # CI installs it: a missing tool must not silently skip tests
        pytest.skip(msg)
    return path


def pil_jpeg(arr, **kwargs) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", **kwargs)
    return buf.getvalue()


def cjpeg(rgb, *args) -> bytes:
    tool = _need_tool("cjpeg")
    h, w, _ = rgb.shape
    ppm = b"P6\n%d %d\n255\n" % (w, h) + np.ascontiguousarray(rgb).tobytes()
    return subprocess.run([tool, *args], input=ppm, capture_output=True, check=True).stdout


def jpegtran(data, *args) -> bytes:
    tool = _need_tool("jpegtran")
    return subprocess.run([tool, *args], input=data, capture_output=True, check=True).stdout


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
    "cmyk": lambda a: _cmyk(a),
}


def _cmyk(rgb) -> bytes:
    # Real black ink (Pillow's own RGB->CMYK conversion leaves K at 0).
    k = (rgb.min(axis=2) // 2).astype(np.uint8)
    cmyk = np.concatenate([255 - rgb - k[..., None], k[..., None]], axis=2).astype(np.uint8)
    img = Image.frombytes("CMYK", (rgb.shape[1], rgb.shape[0]), np.ascontiguousarray(cmyk).tobytes())
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


_cache = {}


def make_jpeg(encoding: str, height: int, width: int, seed: int = 0) -> bytes:
    key = (encoding, height, width, seed)
    if key not in _cache:
        _cache[key] = ENCODINGS[encoding](photo_like(height, width, seed))
    return _cache[key]


@pytest.fixture(scope="session")
def photo_420() -> bytes:
    """A 533x800 q90 4:2:0 photo-like JPEG (the benchmark's shape)."""
    return make_jpeg("420", 533, 800, seed=1)
