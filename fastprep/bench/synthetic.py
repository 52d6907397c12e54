"""Deterministic photo-like test images.

White noise is a poor stand-in for photos: its entropy data is several times larger than a
photo's at the same quality, so it decodes unrealistically slowly. These images mix what
photos have: smooth gradients (sky, walls), hard-edged shapes (objects), fine texture
(foliage, fabric) in parts of the frame, and mild sensor noise.
"""

from __future__ import annotations

import io

import numpy as np


def photo_like(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image.

    Returns:
        uint8 array ``[height, width, 3]``.
    """
    if height < 1 or width < 1:
        raise ValueError(f"height and width must be >= 1, got {height}x{width}")
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    yy /= max(height - 1, 1)
    xx /= max(width - 1, 1)
    img = np.empty((height, width, 3), np.float32)
    base = rng.uniform(40, 200, 3)
    for c in range(3):
        gx, gy = rng.uniform(-80, 80, 2)
        img[..., c] = base[c] + gx * xx + gy * yy
    # Low-frequency shading.
    for _ in range(3):
        fx, fy, ph = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.3)
        img += (rng.uniform(5, 25) * np.sin(2 * np.pi * (fx * xx + fy * yy) + ph))[..., None]
    # Hard-edged objects: ellipses and rectangles with their own colour and shading.
    for _ in range(int(rng.integers(6, 12))):
        cy, cx = rng.uniform(0, 1, 2)
        ry, rx = rng.uniform(0.04, 0.3, 2)
        color = rng.uniform(0, 255, 3)
        ellipse = rng.random() < 0.5
        # Only the bounding box of the shape is computed (the frame-wide formulas cost most
        # of a 12-megapixel image's time): the rows and columns where the y (x) term alone
        # passes. For the ellipse that is a superset of its pixels, also in floating point
        # (a sum of non-negative terms is at least each of them), and every pixel in the box
        # is computed exactly as on the whole frame, so the image is the same.
        if ellipse:
            rows = np.flatnonzero(((yy[:, 0] - cy) / ry) ** 2 <= 1)
            cols = np.flatnonzero(((xx[0] - cx) / rx) ** 2 <= 1)
        else:
            rows = np.flatnonzero(np.abs(yy[:, 0] - cy) <= ry)
            cols = np.flatnonzero(np.abs(xx[0] - cx) <= rx)
        if not len(rows) or not len(cols):
            continue
        box = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
        by, bx = yy[box], xx[box]
        if ellipse:
            inside = ((by - cy) / ry) ** 2 + ((bx - cx) / rx) ** 2 <= 1
        else:
            inside = (np.abs(by - cy) <= ry) & (np.abs(bx - cx) <= rx)
        shade = 1 + 0.3 * (by - cy) / max(ry, 1e-3)
        img[box][inside] = (color[None, :] * np.clip(shade[inside], 0.5, 1.5)[:, None])
    # Texture in a few regions (foliage/fabric), band-limited by a small box blur.
    tex = rng.normal(0, 1, (height, width)).astype(np.float32)
    k = 2
    pad = np.pad(tex, k, mode="edge")
    blur = np.zeros_like(tex)
    for dy in range(-k, k + 1):
        for dx in range(-k, k + 1):
            blur += pad[k + dy:k + dy + height, k + dx:k + dx + width]
    blur /= (2 * k + 1) ** 2
    region = np.zeros((height, width), np.float32)
    for _ in range(3):
        cy, cx = rng.uniform(0, 1, 2)
        r = rng.uniform(0.15, 0.35)
        region = np.maximum(region, np.clip(1.5 - np.hypot(yy - cy, xx - cx) / r, 0, 1))
    img += (60 * blur * region)[..., None]
    img += rng.normal(0, 2.0, img.shape).astype(np.float32)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


def encode_jpeg(rgb: np.ndarray, quality: int = 90, subsampling: str = "4:2:0", **kwargs) -> bytes:
    """Encode an RGB (or 2-D gray) uint8 array with Pillow."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=quality, subsampling=subsampling, **kwargs)
    return buf.getvalue()
