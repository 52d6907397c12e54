"""The grouped options of :func:`fastprep.data.make_loader`: how files are decoded
(:class:`DecodeOptions`), what a batch looks like when it arrives (:class:`BatchOutput`),
and the pass-through keywords (:class:`LoaderOptions`).

The flat keywords of earlier releases (``max_pixels=``, ``color=``, ``dtype=``, ...) are
still accepted by ``make_loader`` and fill the same groups; ``docs/loader.md`` lists
every option.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypedDict

import torch

__all__ = ["BatchOutput", "DecodeOptions", "LoaderOptions", "StorageOptions"]


@dataclass(frozen=True)
class DecodeOptions:
    """How each file is decoded: the limits that make bad or hostile files fail cleanly.

    Attributes:
        max_pixels: refuse images with more pixels than this, read from the header before
            anything is decoded (``DecodeError`` naming the file; skipped with
            ``on_error="skip"``). ``None``: fastprep.io's default (2**28); 0: no limit.
        strict: corrupt data that libjpeg decodes past raises instead of warning.
        max_scans: refuse progressive JPEGs with more scans than this (decode bombs);
            ``None``: fastprep.io's default.

    ``strict`` and ``max_scans`` configure the loader's own decode transform (the default
    one or ``recipe=``); with ``transform=``, set them on your decode transform instead.
    """

    max_pixels: int | None = None
    strict: bool = False
    max_scans: int | None = None

    def transform_kwargs(self) -> dict[str, Any]:
        """The keywords for a fastprep decode transform: only those set, so the transform's
        own defaults hold for the rest."""
        kwargs: dict[str, Any] = {}
        if self.max_pixels is not None:
            kwargs["max_pixels"] = self.max_pixels
        if self.strict:
            kwargs["strict"] = True
        if self.max_scans is not None:
            kwargs["max_scans"] = self.max_scans
        return kwargs


@dataclass(frozen=True)
class BatchOutput:
    """What a delivered batch looks like: ``(colour(x) / 255 - mean) / std`` in ``dtype``.

    Attributes:
        color: ``"yuv"`` or ``"rgb"``; ``None``: ``"yuv"`` for the default pipeline (crop +
            mask) and a ``Dataset`` source, ``"rgb"`` with ``transform=`` or a ``recipe``.
        mean, std: per-channel normalisation on the [0, 1] scale, or ``None`` for none
            (with a ``recipe`` and neither given: ImageNet's).
        dtype: ``torch.float32``, ``torch.float16`` or ``torch.bfloat16``.
        channels_last: deliver ``torch.channels_last`` memory format.

    The conversion runs once per batch (:class:`~fastprep.data.BatchConvert`), fused into
    the native batch decode on the CPU with the threads engine.
    """

    color: str | None = None
    mean: float | Iterable[float] | None = None
    std: float | Iterable[float] | None = None
    dtype: torch.dtype = torch.float32
    channels_last: bool = False


@dataclass(frozen=True)
class StorageOptions:
    """How ``s3://`` sources are read (docs/storage.md).

    Attributes:
        max_in_flight: most requests in flight per dataset and process, over all of the
            loader's reader threads and its read-ahead. At a first-byte latency ``L`` (tens
            of ms for object storage) a rate of ``R`` samples/s needs about ``R * L`` of them
            (1,600/s at 25 ms: 40); the default 128 leaves room for bursts and slower requests.
        timeout_s: each request's limit, from connecting to its last byte (also the time
            within which its retries must end).
        retries: how many times a request that failed transiently (5xx, SlowDown, 429, a
            timeout, a reset connection) is tried again, with exponential backoff and
            jitter; after that it fails with an ``OSError`` naming the URL.
        read_ahead: the threads engine issues the epoch's reads in its order ahead of the
            readers (up to ``max_in_flight`` in flight, within the engine's read-ahead byte
            budget), neighbouring range reads coalesced; ``False``: each batch's reads are
            issued when a reader takes the batch.
        window_reads: packed files (``fastprep.pack``) in an ``s3://`` class-folder are
            read by window: a range read of each file's header and interval index, then
            range reads of only the restart intervals its crop window needs
            (docs/storage.md); files that are not packed, and crops the restart-interval
            decode would not splice, are read whole (the rest of the object). ``"auto"``
            (default): per file, by window where its listed size is at least
            ``window_min_bytes`` and whole (one GET) where it is smaller, so a folder of
            small files reads as with ``False``; ``True``: every file by window; ``False``:
            every file whole. The threads engine only (the processes engine reads whole
            files); read ahead with ``read_ahead``.
        window_min_bytes: with ``window_reads="auto"``, the smallest file read by window.
            A window read is two rounds of requests (the header, then the intervals) where
            a whole read is one; it pays where the bytes a crop leaves out outweigh a request
            (docs/storage.md, "Window reads by default").
        client: which client sends the GET requests. ``"native"``: fastprep's own
            (``torch.ops.fastprep.http_get``: one epoll loop per call, pooled keep-alive
            connections, signed here; about a tenth of obstore's CPU per request), for AWS S3
            itself and S3-compatible endpoints (``AWS_ENDPOINT_URL``), over ``http://``, or
            ``https://`` in a build with OpenSSL, with the environment's keys or botocore's
            credential chain; ``"obstore"``: obstore for every request; ``"auto"``
            (default): native where it can read the endpoint, else obstore. Listings always
            go through obstore (docs/storage.md, "Choice of client").
        window_gap: with ``window_reads``, a window's byte ranges at most this many bytes
            apart are one request (the intervals of consecutive MCU rows are separated by
            the rest of each row): larger moves more bytes in fewer requests.
    """

    max_in_flight: int = 128
    timeout_s: float = 30.0
    retries: int = 5
    read_ahead: bool = True
    window_reads: bool | str = "auto"
    window_gap: int = 64 << 10
    window_min_bytes: int = 256 << 10
    client: str = "auto"

    def __post_init__(self):
        if not isinstance(self.max_in_flight, int) or isinstance(self.max_in_flight, bool) \
                or not 1 <= self.max_in_flight <= 4096:
            raise ValueError(f"max_in_flight must be an int in [1, 4096], got {self.max_in_flight!r}")
        if not isinstance(self.timeout_s, (int, float)) or isinstance(self.timeout_s, bool) \
                or not 0 < self.timeout_s <= 3600:
            raise ValueError(f"timeout_s must be a number in (0, 3600], got {self.timeout_s!r}")
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or not 0 <= self.retries <= 100:
            raise ValueError(f"retries must be an int in [0, 100], got {self.retries!r}")
        if not isinstance(self.read_ahead, bool):
            raise TypeError(f"read_ahead must be a bool, got {self.read_ahead!r}")
        if not isinstance(self.window_reads, bool) and self.window_reads != "auto":
            raise TypeError(f"window_reads must be True, False or 'auto', got {self.window_reads!r}")
        if not isinstance(self.window_min_bytes, int) or isinstance(self.window_min_bytes, bool) \
                or self.window_min_bytes < 0:
            raise ValueError(f"window_min_bytes must be an int >= 0, got {self.window_min_bytes!r}")
        if self.client not in ("auto", "native", "obstore"):
            raise ValueError(f"client must be 'auto', 'native' or 'obstore', got {self.client!r}")
        if not isinstance(self.window_gap, int) or isinstance(self.window_gap, bool) or self.window_gap < 0:
            raise ValueError(f"window_gap must be an int >= 0, got {self.window_gap!r}")


class LoaderOptions(TypedDict, total=False):
    """The keywords :func:`~fastprep.data.make_loader` passes on (see ``docs/loader.md``)."""

    # to the DataLoader (processes engine) or its equivalent in the threads engine
    drop_last: bool
    sampler: Any
    generator: torch.Generator | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool
    multiprocessing_context: Any
    worker_init_fn: Callable[[int], None] | None
    spawn_via_forkserver: bool
    # the order: a block shuffle (EpochSampler's shuffle_block)
    shuffle_block: int
    # to the dataset: what a folder lists and which files take the full-decode fallback
    extensions: str | Iterable[str] | None
    jpeg_only: bool
    apply_exif_orientation: bool
    # how s3:// sources are read
    storage: StorageOptions | None
    # the flat forms of DecodeOptions and BatchOutput
    max_pixels: int | None
    strict: bool
    max_scans: int | None
    color: str | None
    mean: float | Iterable[float] | None
    std: float | Iterable[float] | None
    dtype: torch.dtype
    channels_last: bool


_DECODE_FIELDS = tuple(f.name for f in fields(DecodeOptions))
_OUTPUT_FIELDS = tuple(f.name for f in fields(BatchOutput))


def split_options(decode: DecodeOptions | None, output: BatchOutput | None,
                  options: Mapping[str, Any]) -> tuple[DecodeOptions, BatchOutput, dict[str, Any]]:
    """``(decode, output, the pass-through rest)`` from ``make_loader``'s keywords.

    Raises:
        TypeError: a keyword ``make_loader`` does not take, or a group of the wrong type.
        ValueError: a group given both as an object and as flat keywords.
    """
    unknown = sorted(set(options) - set(LoaderOptions.__annotations__))
    if unknown:
        raise TypeError(f"make_loader() got unexpected keyword argument(s): {', '.join(unknown)}")
    decode = _group(DecodeOptions, "decode", decode, _DECODE_FIELDS, options)
    output = _group(BatchOutput, "output", output, _OUTPUT_FIELDS, options)
    rest = {k: v for k, v in options.items() if k not in _DECODE_FIELDS + _OUTPUT_FIELDS}
    return decode, output, rest


def _group(cls, name: str, given, names: tuple[str, ...], options: Mapping[str, Any]):
    flat = {k: options[k] for k in names if k in options}
    if given is None:
        return cls(**flat)
    if not isinstance(given, cls):
        raise TypeError(f"{name} must be a {cls.__name__} or None, got {type(given).__name__}")
    if flat:
        raise ValueError(f"pass {', '.join(flat)} inside {name}={cls.__name__}(...) or as keywords, not both")
    return given
