"""The full-decode path for files fastprep's JPEG decode does not take.

fastprep's decode transforms read a JPEG header, draw their parameters from its size and
decode only what they need. Some files of real datasets are PNG (or another format) behind
a ``.jpg``/``.JPEG`` name, and an EXIF orientation, when asked for, changes the geometry
before any window is drawn. For those, the dataset decodes the whole image with Pillow
(torchvision's image decoders are deprecated from 0.29) and applies the torchvision v2 transform that draws the
same parameters with the same torch RNG calls as the decode transform (each decode
transform documents that equivalence), so a sample differs from a JPEG sample only in
where its pixels were decoded.
"""

from __future__ import annotations

import io as _io
import re
import struct
import warnings

import numpy as np
import torch
from torchvision.transforms import v2

from .. import io as fio
from .. import transforms as T

__all__ = ["decoded_equivalent", "exif_orientation", "image_kind"]

_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"P4", "PNM"),
    (b"P5", "PNM"),
    (b"P6", "PNM"),
)


def image_kind(head: bytes) -> str | None:
    """The format named by a file's first bytes: ``"JPEG"``, ``"PNG"``, ``"GIF"``, ``"BMP"``,
    ``"TIFF"``, ``"PNM"``, ``"WEBP"``, or ``None`` when none matches."""
    for sig, kind in _SIGNATURES:
        if head.startswith(sig):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    return None


def exif_orientation(data: bytes) -> int | None:
    """The EXIF orientation tag (1-8) of a JPEG, from its APP1 segment; ``None`` if absent
    or unreadable. Reads the marker segments before the first scan only."""
    pos, n = 2, len(data)
    while pos + 4 <= n and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        if marker == 0xDA:  # start of scan: no more header segments
            return None
        length = (data[pos + 2] << 8) | data[pos + 3]
        if length < 2:
            return None
        if marker == 0xE1 and data[pos + 4:pos + 10] == b"Exif\x00\x00":
            return _tiff_orientation(data[pos + 10:pos + 2 + length])
        pos += 2 + length
    return None


def _tiff_orientation(tiff: bytes) -> int | None:
    try:
        order = {b"II": "<", b"MM": ">"}[tiff[:2]]
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for k in range(count):
            tag, typ, _, value = struct.unpack_from(order + "HHI4s", tiff, ifd + 2 + 12 * k)
            if tag == 0x0112 and typ == 3:  # Orientation, SHORT
                (v,) = struct.unpack_from(order + "H", value)
                return v if 1 <= v <= 8 else None
    except (KeyError, struct.error):
        return None
    return None


def _mode_ok(transform) -> bool:
    return str(getattr(transform, "mode", "RGB")).upper() in ("RGB", "IMAGEREADMODE.RGB")


def decoded_equivalent(transform):
    """A callable on a decoded uint8 ``[3, H, W]`` RGB image that draws the same parameters
    with the same torch RNG calls as ``transform`` does on an encoded JPEG of that size,
    or ``None`` when there is none (an unknown transform, or a decode mode other than RGB).

    Known: :class:`~fastprep.transforms.DecodeRandomCrop` (``v2.RandomCrop``),
    ``DecodeCenterCrop`` (``v2.CenterCrop``), ``DecodeRandomResizedCrop``
    (``v2.RandomResizedCrop`` then ``v2.RandomHorizontalFlip``), ``DecodeResize``
    (``v2.Resize``), ``DecodeResizeCenterCrop`` (``v2.Resize`` then ``v2.CenterCrop``),
    a Compose whose first step is one of those, and :func:`fastprep.data.default_transform`.
    """
    hook = getattr(transform, "decoded_equivalent", None)
    if callable(hook):
        return hook()
    if isinstance(transform, (v2.Compose, T.Compose)) and transform.transforms:
        first = decoded_equivalent(transform.transforms[0])
        return None if first is None else v2.Compose([first, *transform.transforms[1:]])
    if not _mode_ok(transform):
        return None
    if isinstance(transform, T.DecodeRandomCrop):
        return v2.RandomCrop(transform.size, padding=transform.padding, pad_if_needed=transform.pad_if_needed,
                             fill=transform.fill)
    if isinstance(transform, T.DecodeCenterCrop):
        return v2.CenterCrop(transform.size)
    if isinstance(transform, T.DecodeRandomResizedCrop):
        crop = v2.RandomResizedCrop(transform.size, scale=transform.scale, ratio=transform.ratio,
                                    antialias=transform.antialias, interpolation=_mode(transform))
        return crop if not transform.flip_p else v2.Compose([crop, v2.RandomHorizontalFlip(transform.flip_p)])
    if isinstance(transform, T.DecodeResizeCenterCrop):
        return v2.Compose([v2.Resize(transform.resize_size, max_size=transform.max_size, antialias=transform.antialias,
                                     interpolation=_mode(transform)),
                           v2.CenterCrop(transform.crop_size)])
    if isinstance(transform, T.DecodeResize):
        return v2.Resize(transform.size, max_size=transform.max_size, antialias=transform.antialias,
                         interpolation=_mode(transform))
    return None


def _mode(transform: T.DecodeResize | T.DecodeResizeCenterCrop | T.DecodeRandomResizedCrop) -> v2.InterpolationMode:
    """The v2 interpolation mode of a resizing decode transform."""
    return v2.InterpolationMode(transform.interpolation)


#: An object's default repr (``<_io.BytesIO object at 0x7f...>``): never in an error message.
_OBJECT_ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def full_decode(data: bytes, apply_exif_orientation: bool, max_pixels: int) -> torch.Tensor:
    """uint8 ``[3, H, W]`` RGB of any format Pillow reads, after checking the header's size
    against ``max_pixels`` (0: no limit).

    Raises:
        fastprep.io.DecodeError: unreadable or truncated data, or too many pixels.
    """
    import PIL.Image
    import PIL.ImageOps

    with warnings.catch_warnings():
        # fastprep's own max_pixels applies, not Pillow's global bomb threshold
        warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
        try:
            with PIL.Image.open(_io.BytesIO(data)) as im:
                if max_pixels and im.width * im.height > max_pixels:
                    raise fio.DecodeError(f"image of {im.height}x{im.width} = {im.width * im.height} pixels "
                                          f"exceeds max_pixels={max_pixels}")
                if apply_exif_orientation:
                    im = PIL.ImageOps.exif_transpose(im)
                arr = np.asarray(im.convert("RGB"))
        except PIL.Image.DecompressionBombError as e:
            raise fio.DecodeError(f"{e} (max_pixels={max_pixels})") from e
        except PIL.UnidentifiedImageError:
            # Pillow's message names its file object by its address (``<_io.BytesIO object at
            # 0x...>``), different in every process: say what the data is instead.
            kind = image_kind(data[:16])
            what = f"starts like a {kind} file, but Pillow cannot read it" if kind else "is no image Pillow reads"
            raise fio.DecodeError(f"the data {what}") from None
        except (OSError, ValueError, SyntaxError) as e:  # Pillow's errors for bad data
            raise fio.DecodeError(f"cannot decode: {_OBJECT_ADDRESS.sub('the data', str(e))}") from e
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
