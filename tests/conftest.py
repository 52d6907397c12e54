"""Shared test data: JPEGs encoded by the tests themselves (Pillow, and libjpeg-turbo's
cjpeg/jpegtran for encodings Pillow cannot write), built by ``fuzz/_jpegs.py``, which the
fuzz seed corpus uses too."""

import contextlib
import os
import shutil
import socket
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


def png_bytes(height: int, width: int, seed: int = 0) -> bytes:
    """A photo-like RGB PNG (Pillow)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(photo_like(height, width, seed)).save(buf, "PNG")
    return buf.getvalue()


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


# -- an S3 API on localhost (moto's server), for the s3:// tests --------------------------

S3_SECRET = "fastprep-test-secret-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_s3_endpoint(monkeypatch, endpoint: str) -> None:
    """Point the AWS_* variables at ``endpoint`` (test credentials), no others set."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_REGION", "us-east-1")


@contextlib.contextmanager
def moto_s3(bucket: str):
    """moto's S3 server on a free localhost port with ``bucket`` created: yields
    ``(endpoint, boto3 client)``; skips the test without moto[server] or boto3."""
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key=S3_SECRET)
        client.create_bucket(Bucket=bucket)
        yield endpoint, client
    finally:
        server.stop()
