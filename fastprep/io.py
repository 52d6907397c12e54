"""Reading and decoding JPEG files.

Everything here works on encoded bytes held in memory: a uint8 1-D CPU tensor, ``bytes``,
``bytearray``, ``memoryview``, ``mmap.mmap`` or a numpy uint8 array (``numpy.memmap``
too). All of them are read in place, read-only ones included: no call copies the file, so a
window's cost does not grow with the file's size whatever the input type, and nothing is
ever written into the caller's buffer. Only non-contiguous input (a strided tensor, array
or memoryview) is copied once into contiguous memory.

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
import os
import warnings
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from . import _C, _checks
from ._ops import MODE_GRAY, MODE_RGB, MODE_UNCHANGED, MODE_YCBCR, JpegHeader

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
Scale = None | int | tuple

_ERROR_PREFIX = "fastprep.DecodeError: "

Buffer = _checks.Buffer


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

    UNCHANGED = MODE_UNCHANGED
    GRAY = MODE_GRAY
    RGB = MODE_RGB
    YCbCr = MODE_YCBCR


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


# The checks live in fastprep._checks; these aliases keep the old private names working for
# code that has not moved to it yet.
_as_tensor = _checks.encoded_tensor
_int = _checks.as_int
_max_pixels = _checks.max_pixels
_max_scans = _checks.max_scans
_scale_num = _checks.dct_scale_num


def _mode(mode: str | ImageReadMode) -> int:
    """The op's value of a decode mode (see :func:`fastprep._checks.mode_name`)."""
    return int(ImageReadMode[_checks.mode_name(mode)])


def scaled_size(height: int, width: int, scale: Scale) -> tuple[int, int]:
    """Size of a decode at DCT scale ``scale``: exactly libjpeg's output size.

    Args:
        height, width: the image's size in pixels (as in :class:`JpegInfo`).
        scale: ``None`` (8/8), ``(num, 8)`` with ``1 <= num <= 8``, an equal fraction such
            as ``(1, 2)``, or the int ``num``.

    Returns:
        ``(ceil(height * num / 8), ceil(width * num / 8))``.
    """
    num = _checks.dct_scale_num(scale)
    height, width = _checks.as_int("height", height), _checks.as_int("width", width)
    if height < 0 or width < 0:
        raise ValueError(f"height and width must be >= 0, got {height}x{width}")
    return (height * num + 7) // 8, (width * num + 7) // 8


def _call_op(op: Callable[..., Any], *args: Any) -> Any:
    """``op(*args)``, with libjpeg's errors as :class:`DecodeError` and its warnings as
    :class:`DecodeWarning`."""
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
    header = JpegHeader._make(_call_op(torch.ops.fastprep.jpeg_info, _checks.encoded_view(data)).tolist())
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
                channels_last: bool = True) -> torch.Tensor:
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
        channels_last: (default) return the ``[C, H, W]`` tensor in interleaved
            ``[H, W, C]`` memory (``torch.channels_last`` for 3 and 4 channels): libjpeg's
            own scanline layout, which the decoder writes straight into the output, as
            ``torchvision.io.decode_jpeg`` does. ``False`` splits the rows into planes (a
            contiguous ``[C, H, W]`` tensor) at the cost of one more pass over the pixels.
            Same values either way; torch's uint8 resize reads the interleaved layout fastest.

    Returns:
        uint8 tensor ``[C, H, W]``; ``(H, W) = scaled_size(height, width, scale)``. By default
        a permuted view of a contiguous ``[H, W, C]`` tensor (strides ``(1, W*C, C)``, the
        layout torchvision's decode returns; call ``.contiguous()`` where planar memory is
        needed); with ``channels_last=False`` contiguous (planar).
    """
    return _call_op(torch.ops.fastprep.decode_jpeg, _checks.encoded_view(data), _mode(mode),
                    _checks.max_pixels(max_pixels), bool(strict), _checks.dct_scale_num(scale),
                    _checks.max_scans(max_scans), bool(channels_last))


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
    The markers are checked first: with the file's interval index, every restart marker
    from the start of the scan to the end of the window's last interval, at the offset the
    index gives (two bytes each, but a memory read per interval: on large files with short
    intervals that costs up to a pass over the file's bytes above the window, docs/pack.md);
    without one, every marker of the scan (number, order, end of scan). Any
    inconsistency, or any libjpeg warning in the needed intervals, falls back to the path
    above, with its errors and warnings: a damaged marker before the window gives the
    full decode's pixels and its :class:`DecodeWarning`.

    What the fast path does not look at may go unnoticed where a full decode would warn:
    damaged entropy-coded bytes in intervals the window does not need and markers after
    the window (neither changes the window's pixels in a full decode), and, in a file with
    an interval index, a *new* marker that damage created in the entropy-coded data outside
    the window (a byte turned into ``0xFF`` followed by a non-zero byte, or a stuffed
    ``0xFF 0x00`` whose ``0x00`` changed): only reading every byte finds it. The window is
    then the decode of its own intervals where the index locates them, i.e. the pixels
    the file held there before the damage, while a full decode resynchronizes at the new
    marker and, when it comes before the window, may put other pixels there.
    With ``strict=True`` the index is not trusted alone: the whole scan is searched for
    markers as in a file without an index (one pass over the file's bytes, so the cost
    grows with the file: docs/pack.md), and anything out of place sends the decode to the
    path above, which raises when it meets it before the window's last rows. So a strict
    ROI decode that returns equals the full decode sliced (which may warn about damage
    below the window), and one that raises has a full decode that raises with strict too.

    Args:
        data: encoded JPEG bytes.
        top, left: window origin in pixels of the scaled image, ``>= 0``.
        height, width: window size, ``>= 1``; the window must lie inside the scaled image,
            whose size is :func:`scaled_size` ``(info.height, info.width, scale)``.
        mode, max_pixels, strict, max_scans, scale: as in :func:`decode_jpeg`.
        channels_last: return the window in interleaved ``[H, W, C]`` memory (as
            :func:`decode_jpeg` does by default); default ``False``: planar.

    Returns:
        uint8 tensor ``[C, height, width]``, contiguous (planar), or with ``channels_last``
        a permuted view of a contiguous ``[height, width, C]`` tensor.

    Raises:
        DecodeError: undecodable data, truncated data that the window needs, or a file
            over ``max_pixels``/``max_scans`` (every scan is decoded whatever the window).
        ValueError: a window that is empty or does not fit in the (scaled) image.
    """
    return _call_op(torch.ops.fastprep.decode_jpeg_roi, _checks.encoded_view(data), _checks.as_int("top", top),
                    _checks.as_int("left", left), _checks.as_int("height", height), _checks.as_int("width", width),
                    _mode(mode), _checks.max_pixels(max_pixels), bool(strict),
                    _checks.dct_scale_num(scale), _checks.max_scans(max_scans), bool(channels_last))


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
        restart_interval: MCUs per restart interval. ``"auto"`` (default): intervals that
            tile the MCU rows (so the columns beside a window are skipped), chosen from the
            image's size and ``data``'s size: the widest divisor of the MCUs per row that
            keeps a 224 px window's decode within about 30 % of its minimum (wider where
            the data has few bytes per pixel), widened further, up to whole MCU rows, where
            markers would cost more than about 3 % of the file -- unless that pushes the
            window past about 1.5x its minimum and narrower intervals stay within about
            7 % (sparse files; MCU counts per row with no divisor in range, such as a
            prime) (docs/pack.md, "The restart interval"; on 26 real photos: +1.9 % median
            size, 1.22x the decode of a 240x240 cut for a 224x224 window). ``0`` writes
            no markers.
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
            sequential Huffman scan may not be able to code them), it has a progressive
            scan that ``decode_jpeg`` refuses as a decode bomb (one that adds no coefficient
            bit, such as a scan sent twice), or it is a valid
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
        interval = _checks.as_int("restart_interval", restart_interval)
        if not 0 <= interval <= 65535:
            raise ValueError(f"restart_interval must be in [0, 65535] MCUs or 'auto', got {interval}")
    out = _call_op(torch.ops.fastprep.transcode_jpeg, _checks.encoded_view(data), interval, bool(optimize),
                   bool(keep_metadata), _checks.max_pixels(max_pixels), bool(interval_index))
    return out.numpy().tobytes()
