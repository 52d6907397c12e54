"""Reading and decoding JPEG files.

Everything here works on encoded bytes held in memory: a uint8 1-D CPU tensor, ``bytes``,
``bytearray``, ``memoryview`` or a numpy uint8 array. Writable buffers are used without a
copy; read-only ones (``bytes``, read-only memoryviews/arrays) are copied once into a tensor
(a few microseconds for a typical photo, well under 1 % of a decode).

Decoding uses the system libjpeg-turbo through ``torch.ops.fastprep.*``. The ops release the
GIL and keep no global state, so any number of threads may decode at once.

Errors: undecodable data raises :class:`DecodeError` carrying libjpeg's message; bad
arguments raise ``ValueError``/``TypeError``. Corrupt entropy data that libjpeg can decode
past (it reports a warning) gives a :class:`DecodeWarning` and a possibly damaged image, or
raises :class:`DecodeError` with ``strict=True``. A truncated file raises when the requested
window needs bytes past the end (for progressive and multi-scan files every window needs
every scan, so any truncation raises). Nothing is ever printed to stderr.
"""

from __future__ import annotations

import enum
import operator
import os
import warnings
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch

from . import _C, _ops

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MAX_SCANS",
    "DecodeError",
    "DecodeWarning",
    "ImageReadMode",
    "JpegInfo",
    "decode_jpeg",
    "decode_jpeg_roi",
    "jpeg_info",
    "read_file",
    "scaled_size",
    "transcode_jpeg",
]

#: Images with more pixels than this are refused before any pixel memory is allocated
#: (a 20-byte header can declare 65500x65500). Pass ``max_pixels=0`` to lift the limit.
DEFAULT_MAX_PIXELS = 1 << 28

#: Files with more scans than this are refused as each scan starts, before its data is
#: decoded (every scan costs a pass over the whole coefficient buffer, and a few bytes of
#: "EOB runs" can make a scan of millions of blocks). Encoders write 1 (baseline) to about
#: 10-20 (libjpeg's progressive script: 10 for colour, 6 for gray; mozjpeg and jpegli
#: similar); libjpeg-turbo's own fuzzers allow 100. Pass ``max_scans=0`` to lift the limit.
DEFAULT_MAX_SCANS = 64

#: Type of the ``scale`` argument: ``None`` (full size), ``(num, 8)`` or ``num`` (eighths).
Scale = Union[None, int, tuple]

_ERROR_PREFIX = "fastprep.DecodeError: "
_INT64_MAX = (1 << 63) - 1

Buffer = Union[torch.Tensor, bytes, bytearray, memoryview, np.ndarray]


class DecodeError(RuntimeError):
    """The data is not a decodable JPEG (the message is libjpeg's or fastprep's reason)."""


class DecodeWarning(UserWarning):
    """libjpeg decoded past corrupt data; the image may be damaged (``strict=True`` raises)."""


class ImageReadMode(enum.IntEnum):
    """Output channels of a decode. Values mirror torchvision's ``ImageReadMode`` where
    they overlap.

    * ``UNCHANGED``: as stored: 1 channel for grayscale, 3 (RGB) for YCbCr/RGB files,
      4 (CMYK as stored, Adobe files inverted) for CMYK/YCCK files.
    * ``GRAY``: 1 channel (luma).
    * ``RGB``: 3 channels; grayscale is expanded, CMYK/YCCK converted.
    * ``YCbCr``: 3 channels of JFIF YCbCr (BT.601 full range) straight from the decoder,
      skipping the YCbCr->RGB->YCbCr round trip. Grayscale files give Cb = Cr = 128.
      It differs from decoding to RGB then converting by rounding and by RGB clamping.
    """

    UNCHANGED = _ops.MODE_UNCHANGED
    GRAY = _ops.MODE_GRAY
    RGB = _ops.MODE_RGB
    YCbCr = _ops.MODE_YCBCR


_COLOR_SPACES = {0: "UNKNOWN", 1: "GRAY", 2: "RGB", 3: "YCbCr", 4: "CMYK", 5: "YCCK"}
_SUBSAMPLING = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0", (4, 1): "4:1:1",
                (4, 2): "4:1:0"}


@dataclass(frozen=True)
class JpegInfo:
    """Header facts of a JPEG, read without entropy decoding.

    Attributes:
        height, width: image size in pixels.
        num_components: components stored in the file (1, 3 or 4).
        color_space: ``"GRAY"``, ``"YCbCr"``, ``"RGB"``, ``"CMYK"``, ``"YCCK"`` or ``"UNKNOWN"``.
        subsampling: chroma subsampling such as ``"4:2:0"``; ``None`` for one component,
            ``"other"`` for unusual factor combinations.
        progressive: progressive (multi-scan) coding.
        arithmetic: arithmetic rather than Huffman entropy coding.
        sampling_factors: ``(h, v)`` sampling factors of each component.
        restart_interval: MCUs per restart interval (the DRI marker); 0 when the file has
            none.
        restart_roi: :func:`decode_jpeg_roi` may decode only the restart intervals a
            window needs: the file is sequential with one scan and its restart interval
            tiles the MCU rows (whole rows per interval, or whole intervals per row).
            Whether the markers are consistent is checked at decode time (a file whose
            markers do not match falls back to the full sequential decode).
    """

    height: int
    width: int
    num_components: int
    color_space: str
    subsampling: str | None
    progressive: bool
    arithmetic: bool
    sampling_factors: tuple
    restart_interval: int = 0
    restart_roi: bool = False

    def scaled_size(self, scale: Scale) -> tuple[int, int]:
        """``(height, width)`` of a decode at DCT scale ``scale``; see :func:`scaled_size`."""
        return scaled_size(self.height, self.width, scale)


def _as_tensor(data: Buffer) -> torch.Tensor:
    """Encoded bytes as a contiguous uint8 1-D CPU tensor, without a copy when possible."""
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8:
            raise TypeError(f"data tensor must be uint8, got {data.dtype}")
        if data.dim() != 1:
            raise ValueError(f"data tensor must be 1-D, got shape {tuple(data.shape)}")
        if data.device.type != "cpu":
            raise ValueError(f"data tensor must be on the CPU, got {data.device}")
        return data.contiguous()
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"data array must be uint8, got {data.dtype}")
        if data.ndim != 1:
            raise ValueError(f"data array must be 1-D, got shape {data.shape}")
        if data.flags.writeable and data.flags.c_contiguous:
            return torch.from_numpy(data)
        return torch.from_numpy(np.array(data, copy=True))
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        if not view.c_contiguous:
            raise ValueError(f"data memoryview must be C-contiguous, got strides {view.strides}")
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if view.nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        if view.readonly:
            out = torch.empty(view.nbytes, dtype=torch.uint8)
            out.numpy()[:] = np.frombuffer(view, dtype=np.uint8)
            return out
        return torch.frombuffer(view, dtype=torch.uint8)
    if isinstance(data, (str, os.PathLike)):
        raise TypeError("data must be encoded bytes, got a path; use fastprep.io.read_file(path) first")
    raise TypeError(
        f"data must be a uint8 tensor, bytes, bytearray, memoryview or numpy uint8 array, got {type(data).__name__}"
    )


def _mode(mode) -> int:
    if isinstance(mode, ImageReadMode):
        return int(mode)
    if isinstance(mode, str):
        key = mode.upper()
        for m in ImageReadMode:
            if m.name.upper() == key:
                return int(m)
        raise ValueError(f"mode must be one of UNCHANGED, GRAY, RGB, YCbCr, got {mode!r}")
    name = getattr(mode, "name", None)  # torchvision.io.ImageReadMode and similar enums
    if isinstance(name, str) and name in ImageReadMode.__members__:
        return int(ImageReadMode[name])
    raise ValueError(f"mode must be one of UNCHANGED, GRAY, RGB, YCbCr, got {mode!r}")


def _int(name: str, value) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if not -_INT64_MAX <= value <= _INT64_MAX:
        raise ValueError(f"{name} is out of range, got {value}")
    return value


def _max_pixels(max_pixels) -> int:
    max_pixels = _int("max_pixels", max_pixels)
    if max_pixels < 0:
        raise ValueError(f"max_pixels must be >= 0 (0 = no limit), got {max_pixels}")
    return max_pixels


def _scale_num(scale) -> int:
    """``scale`` as the numerator over 8: None -> 8, (num, 8) or num -> num, (1, 2) -> 4."""
    if scale is None:
        return 8
    if isinstance(scale, tuple):
        if len(scale) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in scale):
            raise ValueError(f"scale must be None, an int num or a (num, 8) tuple of ints, got {scale!r}")
        num, denom = scale
        if denom <= 0 or (8 * num) % denom or not 1 <= 8 * num // denom <= 8:
            raise ValueError(f"scale must be num/8 with 1 <= num <= 8, such as (1, 8), (3, 8) or (1, 2); got {scale!r}")
        return 8 * num // denom
    if isinstance(scale, bool):
        raise TypeError(f"scale must be None, an int num or a (num, 8) tuple, got {scale!r}")
    try:
        num = operator.index(scale)
    except TypeError:
        raise TypeError(f"scale must be None, an int num or a (num, 8) tuple, got {type(scale).__name__} "
                        f"{scale!r}") from None
    if not 1 <= num <= 8:
        raise ValueError(f"scale as an int is num in num/8 and must be in [1, 8], got {num}")
    return num


def scaled_size(height: int, width: int, scale: Scale) -> tuple[int, int]:
    """Size of a decode at DCT scale ``scale``: exactly libjpeg's output size.

    Args:
        height, width: the image's size in pixels (as in :class:`JpegInfo`).
        scale: ``None`` (8/8), ``(num, 8)`` with ``1 <= num <= 8``, an equal fraction such
            as ``(1, 2)``, or the int ``num``.

    Returns:
        ``(ceil(height * num / 8), ceil(width * num / 8))``.
    """
    num = _scale_num(scale)
    height, width = _int("height", height), _int("width", width)
    if height < 0 or width < 0:
        raise ValueError(f"height and width must be >= 0, got {height}x{width}")
    return (height * num + 7) // 8, (width * num + 7) // 8


def _max_scans(max_scans) -> int:
    max_scans = _int("max_scans", max_scans)
    if max_scans < 0:
        raise ValueError(f"max_scans must be >= 0 (0 = no limit), got {max_scans}")
    return max_scans


def _run(op, *args):
    try:
        out = op(*args)
    except RuntimeError as e:
        msg = str(e)
        at = msg.find(_ERROR_PREFIX)
        if at < 0:
            raise
        raise DecodeError(msg[at + len(_ERROR_PREFIX):].split("\n", 1)[0].strip()) from None
    warning = _C.take_warning()
    if warning is not None:
        warnings.warn(warning, DecodeWarning, stacklevel=3)
    return out


def read_file(path: str | os.PathLike) -> torch.Tensor:
    """Read a file's bytes into a uint8 1-D tensor (no decoding)."""
    return torch.from_numpy(np.fromfile(os.fspath(path), dtype=np.uint8))


def jpeg_info(data: Buffer) -> JpegInfo:
    """Parse a JPEG's headers (no entropy decoding).

    Raises:
        DecodeError: the headers are missing or invalid.
    """
    header = _ops.JpegHeader._make(_run(torch.ops.fastprep.jpeg_info, _as_tensor(data)).tolist())
    ncomp = header.components
    factors = header.sampling_factors()
    subsampling = None
    if ncomp >= 3:
        (h0, v0), (h1, v1) = factors[0], factors[1]
        key = (h0 // h1, v0 // v1) if h1 and v1 and h0 % h1 == 0 and v0 % v1 == 0 else None
        subsampling = _SUBSAMPLING.get(key, "other") if key is not None and factors[1] == factors[2] else "other"
    return JpegInfo(
        height=header.height, width=header.width, num_components=ncomp,
        color_space=_COLOR_SPACES.get(header.color_space, "UNKNOWN"), subsampling=subsampling,
        progressive=bool(header.progressive), arithmetic=bool(header.arithmetic), sampling_factors=factors,
        restart_interval=header.restart_interval, restart_roi=bool(header.restart_roi),
    )


def decode_jpeg(data: Buffer, mode: str | ImageReadMode = "RGB", *, max_pixels: int = DEFAULT_MAX_PIXELS,
                strict: bool = False, max_scans: int = DEFAULT_MAX_SCANS, scale: Scale = None,
                channels_last: bool = False) -> torch.Tensor:
    """Decode a whole JPEG image, optionally at reduced size (DCT scaling).

    Args:
        data: encoded JPEG bytes.
        mode: output channels, an :class:`ImageReadMode` or its name (default ``"RGB"``).
        max_pixels: refuse images with more pixels than this (0: no limit); counts the
            pixels of the stored image, whatever ``scale``.
        strict: raise :class:`DecodeError` on any libjpeg warning (corrupt data) instead of
            warning and returning a possibly damaged image.
        max_scans: refuse files with more scans than this (0: no limit), before decoding
            the first scan over the limit. A scan that only repeats coefficient bits that
            earlier scans carried is refused whatever the limit.
        scale: decode at ``num/8`` of the size inside the inverse DCT, for much less work
            than a full decode plus a resize: ``None`` (full size), ``(num, 8)`` with
            ``1 <= num <= 8``, an equal fraction such as ``(1, 2)``, or the int ``num``.
            The output is :func:`scaled_size` (libjpeg's rounding up).
        channels_last: return the ``[C, H, W]`` tensor in interleaved ``[H, W, C]`` memory
            (``torch.channels_last`` for 3 and 4 channels), libjpeg's own scanline layout,
            which the decoder then copies instead of splitting into planes. Same values;
            torch's uint8 resize and most image consumers read this layout fastest.

    Returns:
        uint8 tensor ``[C, H, W]``; ``(H, W) = scaled_size(height, width, scale)``. Contiguous,
        or with ``channels_last`` a permuted view of a contiguous ``[H, W, C]`` tensor.
    """
    return _run(torch.ops.fastprep.decode_jpeg, _as_tensor(data), _mode(mode), _max_pixels(max_pixels),
                bool(strict), _scale_num(scale), _max_scans(max_scans), bool(channels_last))


def decode_jpeg_roi(data: Buffer, top: int, left: int, height: int, width: int,
                    mode: str | ImageReadMode = "RGB", *, max_pixels: int = DEFAULT_MAX_PIXELS,
                    strict: bool = False, max_scans: int = DEFAULT_MAX_SCANS, scale: Scale = None,
                    channels_last: bool = False) -> torch.Tensor:
    """Decode only a window of a JPEG image, optionally at reduced size (DCT scaling).

    The result is bit-identical to ``decode_jpeg(data, mode, scale=scale)[:, top:top+height,
    left:left+width]`` from the same libjpeg-turbo, for every window, scale, chroma
    subsampling and progressive files, at a fraction of the cost: columns outside the
    window are not inverse-transformed, upsampled or colour-converted, rows above it are
    only entropy-decoded, and rows below it are not read at all.

    Files with restart intervals that tile the MCU rows (see :attr:`JpegInfo.restart_roi`;
    :func:`transcode_jpeg` and ``python -m fastprep.pack`` make such files losslessly)
    are faster still: only the restart intervals that cover the window (plus one pixel of
    context) are entropy-decoded, so the cost follows the window rather than the image.
    The markers are validated first (number, order, end of scan) and any inconsistency,
    or any libjpeg warning in the needed intervals, falls back to the path above, with
    its errors and warnings. Corruption confined to intervals the window does not need
    is not looked at, so it may go unnoticed (a full decode would warn).

    Args:
        data: encoded JPEG bytes.
        top, left: window origin in pixels of the scaled image, ``>= 0``.
        height, width: window size, ``>= 1``; the window must lie inside the scaled image,
            whose size is :func:`scaled_size` ``(info.height, info.width, scale)``.
        mode, max_pixels, strict, max_scans, scale, channels_last: as in :func:`decode_jpeg`.

    Returns:
        uint8 tensor ``[C, height, width]``, contiguous (planar), or with ``channels_last``
        a permuted view of a contiguous ``[height, width, C]`` tensor.

    Raises:
        DecodeError: undecodable data, truncated data that the window needs, or a file
            over ``max_pixels``/``max_scans`` (every scan is decoded whatever the window).
        ValueError: a window that is empty or does not fit in the (scaled) image.
    """
    return _run(torch.ops.fastprep.decode_jpeg_roi, _as_tensor(data), _int("top", top), _int("left", left),
                _int("height", height), _int("width", width), _mode(mode), _max_pixels(max_pixels),
                bool(strict), _scale_num(scale), _max_scans(max_scans), bool(channels_last))


def transcode_jpeg(data: Buffer, *, restart_interval: int | str = "auto", optimize: bool = True,
                   keep_metadata: bool = True, max_pixels: int = DEFAULT_MAX_PIXELS,
                   interval_index: bool = True) -> bytes:
    """Re-encode a JPEG losslessly so that :func:`decode_jpeg_roi` can skip what a window
    does not need.

    The DCT coefficients, quantization tables and sampling factors are copied untouched
    (libjpeg's ``jpeg_read_coefficients`` -> ``jpeg_write_coefficients``), so every decoder
    gives exactly the original's pixels. The output is one sequential Huffman scan
    (progressive and arithmetic-coded inputs become sequential Huffman) with restart
    markers that tile the MCU rows.

    Args:
        data: encoded JPEG bytes.
        restart_interval: MCUs per restart interval. ``"auto"`` (default): the divisor of
            the MCUs per row whose interval is closest to 64 pixels wide (up to 128), so
            the intervals tile the rows and the columns beside a window are skipped; when
            no divisor gives at least 32 pixels (e.g. a prime number of MCUs per row), one
            interval per MCU row (only the rows above a window are skipped). Measured on
            photo-like images: 32-80 pixel intervals decode a 256x256 window equally
            fast, and sizes change by about -1 % to +3 % (see docs/pack.md). ``0``
            writes no markers.
        optimize: compute optimal Huffman tables (smaller files, slower transcoding).
        keep_metadata: copy the APPn (EXIF, ICC, XMP...) and COM markers.
        max_pixels: refuse images with more pixels than this (0: no limit).
        interval_index: record where every restart interval starts, in an APP9 segment
            that other decoders skip (a few bytes per interval; see docs/pack.md), so
            :func:`decode_jpeg_roi` reads only the intervals a window needs instead of
            scanning the whole file for markers. Written when the intervals tile the MCU
            rows; a source's own index is never copied.

    Returns:
        The new JPEG file as ``bytes``.

    Raises:
        DecodeError: the data is not a JPEG libjpeg can read without warnings (corrupt or
            truncated data is refused rather than re-encoded as if it were clean), it holds
            DCT coefficients outside what 8-bit data gives (corrupt, though decodable: a
            sequential Huffman scan may not be able to code them), or it is a valid
            progressive file whose scans leave some coefficient bits unsent
            (message ``"cannot be transcoded losslessly: incomplete progressive scans
            (...)"``): decoders estimate those (libjpeg's block smoothing), a sequential
            copy would decode to other pixels.
        ValueError, TypeError: bad arguments.
    """
    if isinstance(restart_interval, str):
        if restart_interval != "auto":
            raise ValueError(f"restart_interval must be 'auto' or an int >= 0, got {restart_interval!r}")
        interval = -1
    else:
        interval = _int("restart_interval", restart_interval)
        if not 0 <= interval <= 65535:
            raise ValueError(f"restart_interval must be in [0, 65535] MCUs or 'auto', got {interval}")
    out = _run(torch.ops.fastprep.transcode_jpeg, _as_tensor(data), interval, bool(optimize),
               bool(keep_metadata), _max_pixels(max_pixels), bool(interval_index))
    return out.numpy().tobytes()
