"""The JPEG builder shared by the tests (``tests/conftest.py`` imports it) and the fuzz seed
corpus (``fuzz/make_corpus.py``).

Pillow writes baseline and progressive files in 4:4:4/4:2:2/4:2:0, grayscale, restart
markers and CMYK; libjpeg-turbo's ``cjpeg`` (``apt-get install libjpeg-turbo-progs``) writes
what Pillow cannot: 4:4:0, 4:1:1 and other samplings, arithmetic coding, RGB-coded files and
progressive files that follow a scan script. Every builder takes a uint8 ``[H, W, 3]`` RGB
array and returns the file's bytes; the same array and arguments give the same bytes.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile

import numpy as np
from PIL import Image

__all__ = ["cjpeg", "cmyk_jpeg", "jpegtran", "pil_jpeg"]


def pil_jpeg(arr: np.ndarray, **kwargs) -> bytes:
    """``arr`` (``[H, W, 3]`` RGB or ``[H, W]`` gray uint8) encoded by Pillow with ``kwargs``
    (``quality``, ``subsampling``, ``progressive``, ``restart_marker_blocks``...)."""
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", **kwargs)
    return buf.getvalue()


def cmyk_jpeg(rgb: np.ndarray, quality: int = 90, **kwargs) -> bytes:
    """A four-channel CMYK JPEG of ``rgb`` with real black ink (Pillow's own RGB -> CMYK
    conversion leaves K at 0); ``kwargs`` go to Pillow's encoder (restart markers...)."""
    k = (rgb.min(axis=2) // 2).astype(np.uint8)
    cmyk = np.concatenate([255 - rgb - k[..., None], k[..., None]], axis=2).astype(np.uint8)
    img = Image.frombytes("CMYK", (rgb.shape[1], rgb.shape[0]), np.ascontiguousarray(cmyk).tobytes())
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, **kwargs)
    return buf.getvalue()


def _tool(name: str, tool: str | None) -> str:
    path = tool or shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} not found (apt-get install libjpeg-turbo-progs)")
    return path


def cjpeg(rgb: np.ndarray, *args: str, gray: bool = False, scans: str | None = None, tool: str | None = None) -> bytes:
    """``rgb`` encoded by cjpeg with the command-line options ``args``.

    Args:
        rgb: uint8 ``[H, W, 3]``.
        args: cjpeg options, e.g. ``"-quality", "90", "-sample", "1x2,1x1,1x1"``.
        gray: encode the green channel as a one-component grayscale file.
        scans: a progressive scan script (cjpeg ``-scans``), written to a temporary file.
        tool: the cjpeg executable (default: the one on ``PATH``).

    Raises:
        FileNotFoundError: no cjpeg.
        subprocess.CalledProcessError: cjpeg refused the options.
    """
    exe = _tool("cjpeg", tool)
    h, w, _ = rgb.shape
    if gray:
        src = b"P5\n%d %d\n255\n" % (w, h) + np.ascontiguousarray(rgb[..., 1]).tobytes()
    else:
        src = b"P6\n%d %d\n255\n" % (w, h) + np.ascontiguousarray(rgb).tobytes()
    if scans is None:
        return subprocess.run([exe, *args], input=src, capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "scans.txt")
        with open(path, "w") as f:
            f.write(scans)
        return subprocess.run([exe, *args, "-scans", path], input=src, capture_output=True, check=True).stdout


def jpegtran(data: bytes, *args: str, tool: str | None = None) -> bytes:
    """``data`` transformed losslessly by jpegtran with the options ``args``.

    Raises:
        FileNotFoundError: no jpegtran.
        subprocess.CalledProcessError: jpegtran refused the file or the options.
    """
    return subprocess.run([_tool("jpegtran", tool), *args], input=data, capture_output=True, check=True).stdout
