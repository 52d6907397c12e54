"""Map-style datasets over encoded JPEG files: :class:`JpegDataset`, :class:`JpegFolder`."""

from __future__ import annotations

import functools
import math
import os
import re
import stat
import warnings
from typing import NamedTuple

import torch
from torch.utils.data import Dataset, get_worker_info

from .. import _checks
from .. import io as fio
from .._checks import is_int
from .._seeding import check_seed, sample_rng
from . import fallback as _fb
from ._files import file_kind as _file_kind
from ._files import read_regular_file

__all__ = ["FolderListing", "JpegDataset", "JpegFolder", "SkippedFile", "folder_extensions", "list_folder_keys",
           "substitute_index"]

_MAX_SKIP_SLOTS = 256  # slot 0: main process; slot k: DataLoader worker k - 1
_JPEG_EXTENSIONS = (".jpg", ".jpeg")
#: What JpegFolder lists by default: torchvision ImageFolder's image extensions (JPEG, and
#: formats the full-decode fallback reads).
_DEFAULT_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
#: Other image files a folder may hold: reported when left out, not listed by default.
_OTHER_IMAGE_EXTENSIONS = (".gif", ".pbm", ".heic", ".heif", ".avif", ".jxl")


@functools.lru_cache(maxsize=64)
def _substitute_stride(m: int) -> int:
    """A step near ``0.618 m`` that is coprime with ``m`` (so ``k * step mod m`` is a permutation)."""
    step = max(1, round(m * 0.6180339887498949))
    while math.gcd(step, m) != 1:
        step += 1
    return step


def substitute_index(index: int, attempt: int, size: int) -> int:
    """The ``attempt``-th substitute for sample ``index`` of a dataset of ``size`` samples
    (``on_error="skip"``; see :meth:`JpegDataset.substitute`)."""
    if size < 2:
        return index
    m = size - 1
    offset = (index * 0x85EBCA77) % m
    return (index + 1 + (offset + attempt * _substitute_stride(m)) % m) % size


class SkippedFile(NamedTuple):
    """A sample replaced by a substitute under ``on_error="skip"``
    (:attr:`JpegDataset.skipped_files`)."""

    #: the sample's index in the dataset (the field shadows ``tuple.index``, on purpose)
    index: int  # type: ignore[assignment]
    #: the file's path (a shard sample: ``shard:key``)
    path: str
    #: why it could not be used: the error's message (the decode or read error)
    reason: str

    @classmethod
    def from_error(cls, index: int, path: str, error: BaseException) -> SkippedFile:
        """The record of ``path`` failing with ``error``: the reason is the message of the
        error the file raised (the cause of the ``DecodeError`` naming it), without the
        ``cannot decode 'path' (index i):`` the record says already."""
        cause = error.__cause__ if error.__cause__ is not None else error
        return cls(int(index), str(path), str(cause))


class _Samples(list):
    """A batch's samples as :meth:`JpegDataset.__getitems__` returns them: a list, plus
    which file each came from (``names``: ``(index, path)``, for the collate's errors) and
    the substitutions not counted yet (``skipped``, counted when the batch is delivered)."""

    names: list
    skipped: tuple


def _skip_slot() -> int:
    info = get_worker_info()
    return 0 if info is None else min(info.id + 1, _MAX_SKIP_SLOTS - 1)


class JpegDataset(Dataset):
    """A map-style dataset over JPEG files that hands the transform the *encoded* bytes.

    ``dataset[i] == (transform(read_file(files[i])), targets[i])``: the file is read into a
    uint8 1-D tensor (no PIL, no decode), so the transform's first step is a decoding one
    such as :class:`fastprep.transforms.DecodeRandomCrop`. Without a transform the sample
    is the encoded tensor itself.

    Args:
        files: sequence of paths.
        targets: one int per file; ``None`` gives target 0 for every file.
        transform: callable applied to the encoded uint8 tensor.
        on_error: ``"raise"`` (default): a file that cannot be read or decoded raises
            :class:`fastprep.io.DecodeError` naming the file, chained to the original
            error. ``"skip"``: the sample at a substitute index is returned instead and
            counted in :attr:`skipped`. Substitutes are tried in a fixed order that visits
            every other index exactly once (the same in every process and run, so runs are
            reproducible); if none of the first ``max_skip_attempts`` decodes, the
            :class:`~fastprep.io.DecodeError` of the requested file is raised.
        max_skip_attempts: with ``"skip"``, how many substitutes to try before raising
            (at most ``len(files) - 1`` are tried: each other index once).
        max_pixels: refuse (``DecodeError`` naming the file) any image whose header
            declares more pixels than this, before the transform runs; ``None`` (default)
            leaves the limit to the decode transform (fastprep's default 2**28). Also the
            limit of the full-decode fallback. 0: no limit.
        jpeg_only: ``True``: a file that is not a JPEG raises ``DecodeError`` (or is
            skipped). ``False`` (default): it goes through the full-decode fallback.
        apply_exif_orientation: rotate/flip images as their EXIF orientation says before
            the transform draws its window (as ``torchvision.io.decode_image(...,
            apply_exif_orientation=True)`` does). Off by default, as in torchvision. JPEGs with
            an orientation other than 1 then take the full-decode fallback.
        seed: ``None`` (default): the transform draws from torch's default RNG as it is
            (per DataLoader worker, torchvision-compatible). An int in ``[0, 2**64)``:
            sample-keyed randomness -- the transform of sample ``i`` (fallback included)
            runs under :func:`fastprep.data.sample_rng` ``(seed, epoch, i)`` (torch's
            default CPU generator, Python's ``random`` and NumPy's global RNG seeded by a
            hash of ``(seed, epoch, i)``, their states restored afterwards), so a
            sample's crop and mask depend on neither the worker, the rank, the engine nor
            the batch it lands in. A substitute (``on_error="skip"``) is keyed by its own
            index. The epoch is :attr:`epoch`, set by :meth:`set_epoch`
            (:func:`make_loader`'s loader does it each epoch).

    Sample-keyed mode and workers: the epoch lives in a one-element shared-memory tensor,
    so workers (``fork`` or ``spawn``, persistent or not) read the value the main process
    set before the epoch's iterator was created.

    Non-JPEG files (PNG, WebP, BMP, TIFF, PNM, GIF, possibly behind a ``.jpg`` name --
    recognised by their first bytes, not their name) are decoded whole by Pillow to RGB
    and passed through the torchvision v2 transform that draws the same parameters
    with the same RNG calls as the decode transform (see
    :func:`fastprep.data.fallback.decoded_equivalent`); they are counted in
    :attr:`fallbacks` and a ``UserWarning`` is issued once per process. A transform
    without such an equivalent makes a non-JPEG file a ``DecodeError`` naming it.
    CMYK/YCCK JPEGs need no fallback: fastprep decodes them to RGB.

    What :attr:`skipped` counts: in a :func:`~fastprep.data.make_loader` loader (either
    engine), the samples replaced in the batches *delivered* to the consumer -- a batch
    built ahead of the consumer and never delivered (an epoch broken off, an error or an
    interrupt ending it) counts nothing, so both engines count the same.
    :attr:`skipped_files` names them (the first :attr:`MAX_SKIPPED_FILES`). Used on its own
    (``dataset[i]``, a plain ``DataLoader``), a sample counts when it is replaced.

    Skip counting across processes: the counts are held in a shared-memory int64 tensor
    (:attr:`skip_counts`) with one slot per process -- slot 0 for the main process, slot
    ``k + 1`` for DataLoader worker ``k`` -- so every slot has a single writer and the
    main process reads the workers' counts directly, live, under ``fork`` or ``spawn``
    (torch shares the storage when it pickles the dataset for a spawned worker).
    Counts accumulate over epochs until :meth:`reset_skipped`. A plain
    ``pickle.dumps`` (not torch's multiprocessing pickler) copies the counts instead.
    :attr:`skipped_files` lists the samples counted in this process (a plain ``DataLoader``'s
    workers keep theirs; make_loader's loaders count every skip in this process).
    """

    #: :attr:`skipped_files` keeps the first this many records; :attr:`skipped` counts all.
    MAX_SKIPPED_FILES = 1000

    def __init__(self, files, targets=None, transform=None, on_error: str = "raise", *,
                 max_skip_attempts: int = 100, max_pixels: int | None = None, jpeg_only: bool = False,
                 apply_exif_orientation: bool = False, seed=None) -> None:
        if isinstance(files, (str, os.PathLike)):
            raise TypeError(f"files must be a sequence of paths, got a single path {files!r}; "
                            "use JpegFolder for a directory")
        self.files = [os.fspath(f) for f in files]
        if targets is None:
            self.targets = [0] * len(self.files)
        else:
            self.targets = [int(t) for t in targets]
            if len(self.targets) != len(self.files):
                raise ValueError(f"targets must have one entry per file: got {len(self.targets)} targets "
                                 f"for {len(self.files)} files")
        _checks.on_error(on_error)
        if not is_int(max_skip_attempts) \
                or max_skip_attempts < 1:
            raise ValueError(f"max_skip_attempts must be a positive int, got {max_skip_attempts!r}")
        self.transform = transform
        self.on_error = on_error
        self.max_skip_attempts = int(max_skip_attempts)
        self.max_pixels = _checks.optional_max_pixels(max_pixels)
        self.jpeg_only = bool(jpeg_only)
        self.apply_exif_orientation = bool(apply_exif_orientation)
        self.skip_counts = torch.zeros(_MAX_SKIP_SLOTS, dtype=torch.int64).share_memory_()
        self._skipped_files: list[SkippedFile] = []
        #: set by :func:`~fastprep.data.make_loader`: a batch read through
        #: :meth:`__getitems__` carries its substitutions uncounted, and the loader counts
        #: them when it delivers the batch (see :attr:`skipped`)
        self.count_skips_at_delivery = False
        self.seed = check_seed(seed)
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        #: full-decode fallbacks per process (same slots as :attr:`skip_counts`)
        self.fallback_counts = torch.zeros(_MAX_SKIP_SLOTS, dtype=torch.int64).share_memory_()
        self._fallback: tuple | None = None  # (transform it was built for, its decoded-image equivalent)
        self._warned = False
        #: warn (once per process) when a file takes the full-decode fallback; off in
        #: :class:`~fastprep.data.DataLoader`, where Pillow decoding them is what the dataset does
        self.warn_fallback = True
        #: the errors ``on_error="skip"`` replaces a sample for: a file that cannot be
        #: decoded; :class:`~fastprep.data.DataLoader` adds any exception the user's
        #: transform raises for a sample (the drop-in's documented ``"skip"``)
        self.skip_errors: tuple[type[BaseException], ...] = (fio.DecodeError,)

    def __len__(self) -> int:
        return len(self.files)

    @property
    def skipped(self) -> int:
        """Samples replaced by a substitute so far, summed over the main process and all
        DataLoader workers. One per replaced sample, however many substitutes were tried;
        a sample that raised (no substitute decoded) is not counted. In a
        :func:`~fastprep.data.make_loader` loader: the samples replaced in the batches
        delivered to the consumer."""
        return int(self.skip_counts.sum())

    @property
    def skipped_files(self) -> list[SkippedFile]:
        """The samples counted in :attr:`skipped` in this process, in the order they were
        counted, as ``SkippedFile(index, path, reason)``: the first
        :attr:`MAX_SKIPPED_FILES` of them (memory stays bounded; :attr:`skipped` counts
        every one)."""
        return list(self._skipped_files)

    def reset_skipped(self) -> None:
        """Zero the skip counts and forget :attr:`skipped_files` (call from the main
        process while no workers run)."""
        self.skip_counts.zero_()
        self._skipped_files.clear()

    @property
    def epoch(self) -> int:
        """The epoch the sample keys use (``seed`` mode); 0 until :meth:`set_epoch`."""
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the sample keys, in every worker too (call before creating
        the epoch's DataLoader iterator)."""
        if not is_int(epoch) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self._epoch[0] = int(epoch)

    def _keyed_transform(self, data, path: str, index: int):
        if self.seed is None:
            return self._transform(data, path)
        with sample_rng(self.seed, int(self._epoch[0]), index):
            return self._transform(data, path)

    @property
    def fallbacks(self) -> int:
        """Samples decoded through the full-decode fallback (non-JPEG files, or EXIF-rotated
        JPEGs with ``apply_exif_orientation``), summed over all processes."""
        return int(self.fallback_counts.sum())

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fallback"] = None  # rebuilt on first use; torchvision transforms stay out of pickles
        state["_warned"] = False
        return state

    def read_encoded(self, index: int) -> tuple[torch.Tensor, str]:
        """``(encoded bytes as a uint8 1-D tensor, name)`` of sample ``index``, nothing decoded.

        The name identifies the sample in error messages (here: its path). Subclasses that
        keep samples elsewhere than in one file each (shards, archives) override this; the
        rest of the dataset (transform, keyed randomness, ``on_error``) is shared. Raises
        ``OSError`` (or :class:`fastprep.io.DecodeError`) when the bytes cannot be read.
        """
        path = self.files[index]
        return read_regular_file(path), path

    def read_encoded_batch(self, indices) -> list[tuple[torch.Tensor | Exception, str]]:
        """:meth:`read_encoded` for several samples: per index ``(bytes, name)``, or
        ``(error, "")`` with the ``OSError`` (or :class:`fastprep.io.DecodeError`,
        ``ValueError``) that :meth:`read_encoded` raises for it.

        When :meth:`read_encoded` is this class's (one regular file per sample), the files
        are read in one native call that releases the GIL (``torch.ops.fastprep.read_files``,
        with the same refusal of FIFOs and devices); a subclass's :meth:`read_encoded` is
        called per index.
        """
        indices = list(indices)
        if type(self).read_encoded is not JpegDataset.read_encoded:
            return [self._read_or_error(i) for i in indices]
        paths = [self.files[i] for i in indices]
        native = [j for j, path in enumerate(paths) if "\x00" not in path]  # stat's ValueError: Python's
        datas, codes = torch.ops.fastprep.read_files([paths[j] for j in native])
        out: list = [None] * len(paths)
        for j, data, code in zip(native, datas, codes.tolist()):
            out[j] = (data, paths[j]) if code == 0 else (_read_error(code, paths[j]), "")
        for j, entry in enumerate(out):
            if entry is None:
                out[j] = self._read_or_error(indices[j])
        return out

    def _read_or_error(self, index: int) -> tuple[torch.Tensor | Exception, str]:
        try:
            return self.read_encoded(index)
        except (fio.DecodeError, OSError, ValueError) as e:
            return e, ""

    def _load(self, index: int, read=None):
        """``(sample, target)`` of ``index``; ``read``: its ``(bytes, name)`` or ``(error, "")``
        when they were read already (:meth:`read_encoded_batch`)."""
        path = self.files[index]
        try:
            data, path = self.read_encoded(index) if read is None else read
            if isinstance(data, Exception):
                raise data
            sample = data if self.transform is None else self._keyed_transform(data, path, index)
        except (fio.DecodeError, OSError) as e:
            raise fio.DecodeError(f"cannot decode {path!r} (index {index}): {e}") from e
        except ValueError as e:  # e.g. an image smaller than a crop: name the file too
            raise ValueError(f"{path!r} (index {index}): {e}{_encoded_input_hint(e)}") from e
        except (TypeError, RuntimeError) as e:  # torchvision's transforms given the encoded bytes, torch's errors
            if type(e) not in (TypeError, RuntimeError):  # a subclass may need other arguments
                raise
            raise type(e)(f"{path!r} (index {index}): {e}{_encoded_input_hint(e)}") from e
        return sample, self.targets[index]

    def _transform(self, data: torch.Tensor, path: str):
        reason = self.fallback_reason(data)
        if reason is None:
            return self.transform(data)
        sample = self.decode_fallback(data, reason)
        self.count_fallback(path, reason, stacklevel=5)
        return sample

    def fallback_reason(self, data: torch.Tensor) -> str | None:
        """Whether encoded bytes go to the transform or through the full-decode fallback.

        Args:
            data: a sample's encoded bytes, uint8 1-D.

        Returns:
            ``None``: ``data`` goes to the transform as it is (a JPEG; or bytes of no
            known format, whose decode then raises an error naming them). Otherwise why it
            needs a full decode, as a phrase: ``"a PNG file"``, ``"an EXIF-rotated JPEG"``.

        Raises:
            fastprep.io.DecodeError: not a JPEG and ``jpeg_only``; or a JPEG whose header
                declares more than ``max_pixels`` pixels.
        """
        kind = _fb.image_kind(data[:16].numpy().tobytes())
        if kind == "JPEG":
            if self.apply_exif_orientation and _fb.exif_orientation(data[:1 << 16].numpy().tobytes()) not in (None, 1):
                return "an EXIF-rotated JPEG"
            if self.max_pixels:
                info = fio.jpeg_info(data)
                _check_pixels(info.height, info.width, self.max_pixels)
            return None
        if kind is None:
            return None
        if self.jpeg_only:
            raise fio.DecodeError(f"not a JPEG ({kind} data) and jpeg_only=True")
        return f"a {kind} file"

    def decode_fallback(self, data: torch.Tensor, reason: str):
        """The sample of bytes that need the full-decode fallback (:meth:`fallback_reason`):
        decoded whole by Pillow to RGB, then the transform's decoded-image equivalent.

        It draws from torch's RNG exactly as the transform would on a JPEG of that size.
        Neither counted nor warned about: :meth:`count_fallback` does that.

        Raises:
            fastprep.io.DecodeError: unreadable data, more than ``max_pixels`` pixels, or a
                transform without a decoded-image equivalent.
        """
        fallback = self._fallback
        if fallback is None or fallback[0] is not self.transform:
            fallback = self._fallback = (self.transform, _fb.decoded_equivalent(self.transform))
        equivalent = fallback[1]
        if equivalent is None:
            raise fio.DecodeError(f"{reason} needs a full decode, and {type(self.transform).__name__} has no "
                                  "decoded-image equivalent (use a fastprep decode transform in RGB mode, or "
                                  "convert the file to JPEG)")
        limit = fio.DEFAULT_MAX_PIXELS if self.max_pixels is None else self.max_pixels
        return equivalent(_fb.full_decode(data.numpy().tobytes(), self.apply_exif_orientation, limit))

    def count_fallback(self, name: str, reason: str, stacklevel: int = 2) -> None:
        """Count one sample decoded through the fallback (in this process's slot of
        :attr:`fallback_counts`) and, the first time in this process, warn naming it."""
        self.fallback_counts[_skip_slot()] += 1
        if not self._warned and getattr(self, "warn_fallback", True):
            self._warned = True
            warnings.warn(f"fastprep: {name!r} is {reason}; decoded in full by Pillow instead of fastprep's "
                          "JPEG decode (counted in dataset.fallbacks; jpeg_only=True refuses such files). "
                          "Warned once per process.", UserWarning, stacklevel=stacklevel)

    def count_skip(self, record: SkippedFile | None = None) -> None:
        """Count one sample replaced by a substitute (in this process's slot of
        :attr:`skip_counts`) and keep its ``record`` in :attr:`skipped_files` (up to
        :attr:`MAX_SKIPPED_FILES`)."""
        self.skip_counts[_skip_slot()] += 1
        if record is not None and len(self._skipped_files) < self.MAX_SKIPPED_FILES:
            self._skipped_files.append(SkippedFile(*record))

    def substitute(self, index: int, attempt: int) -> int:
        """The ``attempt``-th substitute for ``index``, ``0 <= attempt < len(self) - 1``
        (``on_error="skip"``).

        Attempts ``0 .. n - 2`` visit every other index exactly once, for any ``n``: the
        order is ``index + 1 + ((offset + attempt * stride) mod (n - 1))`` (mod ``n``) with
        ``stride`` coprime with ``n - 1`` (so the multiples of ``stride`` run through every
        residue) and ``offset`` a fixed hash of ``index`` (so failed neighbours do not all
        try the same substitutes first). The same in every process and every run.
        """
        return substitute_index(index, attempt, len(self.files))

    def __getitem__(self, index: int):
        sample, record = self._sample(index)
        if record is not None:
            self.count_skip(record)  # one sample replaced, however many tries
        return sample

    def __getitems__(self, indices) -> list:
        """``[self[i] for i in indices]``, as a ``DataLoader`` fetches a batch, the list
        also telling which file each sample came from (``.names``: ``(index, path)``,
        which :func:`~fastprep.data.collate_uint8` names in its errors). With
        :attr:`count_skips_at_delivery` the substitutions are not counted here but listed
        in ``.skipped`` (:class:`SkippedFile` records), for the loader to count when it
        delivers the batch."""
        out = _Samples()
        out.names = []
        skipped = []
        indices = list(indices)
        # from object storage: the batch's reads in flight together (one round trip, not one a sample)
        reads = self.read_encoded_batch(indices) if getattr(self, "object_store", None) is not None \
            else [None] * len(indices)
        for index, read in zip(indices, reads):
            sample, record = self._sample(index, read)
            out.append(sample)
            out.names.append((int(index), self.files[index]))
            if record is not None:
                if self.count_skips_at_delivery:
                    skipped.append(record)
                else:
                    self.count_skip(record)
        out.skipped = tuple(skipped)
        return out

    def _sample(self, index: int, read=None) -> tuple[object, SkippedFile | None]:
        """``(sample, None)``, or with ``on_error="skip"`` and a file that fails
        ``(a substitute's sample, the failed file's record)``. ``read``: as :meth:`_load`'s."""
        if self.on_error == "raise":
            return self._load(index, read), None
        try:
            return self._load(index, read), None
        except self.skip_errors as e:
            failure = e
        tries = min(self.max_skip_attempts, len(self.files) - 1)
        for attempt in range(tries):
            try:
                sample = self._load(self.substitute(index, attempt))
            except self.skip_errors:
                continue
            return sample, SkippedFile.from_error(index, self.files[index], failure)
        raise fio.DecodeError(f"on_error='skip': {failure} -- and none of the {tries} substitutes tried "
                              f"could be decoded either") from failure

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(files={len(self.files)}, transform={self.transform!r}, "
                f"on_error={self.on_error!r})")


#: What torchvision's transforms say when given a 1-D tensor (the encoded bytes) as an image.
_IMAGE_EXPECTED = re.compile(r"should have at least two dimensions|must be 2D or higher|"
                             r"not enough values to unpack \(expected [23], got 1\)")

#: What ``transform=`` receives and what to use instead, for the errors of a transform that
#: expected a decoded image (the loader's check and the per-sample error say the same).
ENCODED_INPUT_HELP = ("transform= receives each file's encoded bytes (a uint8 1-D tensor), not a decoded image: "
                      "start it with a fastprep decode transform (fastprep.transforms.DecodeRandomResizedCrop, "
                      "DecodeRandomCrop, DecodeCenterCrop, DecodeResize, DecodeResizeCenterCrop: they decode only "
                      "what the output needs and keep the threads engine), or decode first inside your transform "
                      "with fastprep.io.decode_jpeg(data)")


def _encoded_input_hint(error: Exception) -> str:
    """`` -- ENCODED_INPUT_HELP`` when ``error`` is torchvision refusing a 1-D tensor as an
    image, else ``""``."""
    return f" -- {ENCODED_INPUT_HELP}" if _IMAGE_EXPECTED.search(str(error)) else ""


def _check_pixels(height: int, width: int, limit: int) -> None:
    if limit and height * width > limit:
        raise fio.DecodeError(f"image of {height}x{width} = {height * width} pixels exceeds max_pixels={limit}")


def _has_extension(name: str, extensions) -> bool:
    return name.lower().endswith(extensions)


def _is_regular_file(path: str) -> bool:
    """True for a regular file (after following symlinks); never opens ``path``."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


# torch.ops.fastprep.read_files' codes for a path that is not a regular file
# (csrc/readers/files.h, enum NotRegular), as the file types _file_kind names.
_NOT_REGULAR_MODES = {-1: stat.S_IFDIR, -2: stat.S_IFIFO, -3: stat.S_IFCHR, -4: stat.S_IFBLK, -5: stat.S_IFSOCK}


def _read_error(code: int, path: str) -> OSError:
    """The ``OSError`` :func:`read_regular_file` raises for ``read_files``' ``code``."""
    if code < 0:
        return OSError(f"not a regular file ({_file_kind(_NOT_REGULAR_MODES.get(code, 0))})")
    return OSError(code, os.strerror(code), path)


def folder_extensions(extensions, jpeg_only: bool) -> tuple[str, ...]:
    """The file name endings a folder lists (lower case): ``extensions`` (a string or a
    sequence), or by default torchvision ImageFolder's list (``.jpg .jpeg`` with
    ``jpeg_only``)."""
    if extensions is None:
        extensions = _JPEG_EXTENSIONS if jpeg_only else _DEFAULT_EXTENSIONS
    if isinstance(extensions, str):
        extensions = (extensions,)
    return tuple(e.lower() for e in extensions)


class FolderListing(NamedTuple):
    """:func:`list_folder_keys`' answer."""

    #: the class folder names, sorted
    classes: list
    #: ``(relative name, class index)`` in :class:`JpegFolder`'s order
    samples: list
    #: image files left out by the extensions: ``{extension: count}``
    ignored: dict


def list_folder_keys(names, extensions: tuple[str, ...]) -> FolderListing:
    """:class:`JpegFolder`'s listing of a tree given as the relative names of its files
    (``"cat/a.jpg"``, ``/``-separated; an object store's keys under a prefix).

    The same rules as on disk: classes are the sorted top-level folder names not named
    like an image; per class, files in folders sorted by their path (``sorted(os.walk())``),
    then by name; files beside the class folders are left out; without class folders the
    files at the top are the samples, with target 0. Names ending in ``/`` (folder markers)
    are not files.
    """
    images = tuple(e for e in _DEFAULT_EXTENSIONS + _OTHER_IMAGE_EXTENSIONS if e not in extensions)
    ignored: dict[str, int] = {}

    def keep(name: str) -> bool:
        if _has_extension(name, extensions):
            return True
        if _has_extension(name, images):
            ext = os.path.splitext(name)[1].lower()
            ignored[ext] = ignored.get(ext, 0) + 1
        return False

    names = [n for n in names if n and not n.endswith("/")]
    tops = {n.split("/", 1)[0] for n in names if "/" in n}
    classes = sorted(t for t in tops if not _has_extension(t, extensions + images))
    class_to_idx = {c: i for i, c in enumerate(classes)}
    keyed = []
    for n in names:
        folder, _, base = n.rpartition("/")
        if classes:
            top = n.split("/", 1)[0]
            if folder and top in class_to_idx and keep(base):
                keyed.append((class_to_idx[top], folder, base, n))
        elif not folder and keep(base):
            keyed.append((0, "", base, n))
    keyed.sort()
    return FolderListing(classes, [(n, c) for c, _, _, n in keyed], ignored)


class JpegFolder(JpegDataset):
    """JPEG files in class subfolders, with ``torchvision.datasets.ImageFolder`` conventions.

    ``root/<class>/**/<file>.jpg``: classes are the subfolder names in sorted order,
    ``class_to_idx`` maps them to 0, 1, ..., ``samples`` is the sorted list of
    ``(path, class_index)``; files directly under ``root`` are ignored, as ImageFolder does.
    Only regular files (or symlinks to them) are listed: a FIFO, device or socket with an
    image name is never opened, and a directory with an image name (``x.jpg/``) is neither
    a sample nor a class.

    A *flat* folder (no subfolders, the JPEGs directly under ``root``) is accepted too: every
    sample gets target 0, and ``classes == []``, ``class_to_idx == {}``.

    Args:
        root: the folder.
        transform, on_error: as :class:`JpegDataset`.
        extensions: file name endings listed, compared case-insensitively. Default:
            torchvision ImageFolder's ``.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp``
            (JPEGs, and formats the full-decode fallback reads, see :class:`JpegDataset`);
            with ``jpeg_only=True``, ``.jpg .jpeg``.
        **kwargs: ``max_skip_attempts``, ``max_pixels``, ``jpeg_only``,
            ``apply_exif_orientation``, as :class:`JpegDataset`.

    Image files left out by ``extensions`` (``.png`` with ``extensions=".jpg"``, ``.bmp``,
    ``.tif``, ...) are counted per extension in :attr:`ignored` and reported in one
    ``UserWarning``, never dropped silently.

    Raises:
        FileNotFoundError: no file with one of ``extensions`` was found.
    """

    def __init__(self, root, transform=None, on_error: str = "raise", extensions=None, **kwargs):
        self.root = os.fspath(root)
        self.extensions = folder_extensions(extensions, bool(kwargs.get("jpeg_only")))
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"root is not a directory: {self.root!r}")
        images = tuple(e for e in _DEFAULT_EXTENSIONS + _OTHER_IMAGE_EXTENSIONS if e not in self.extensions)
        #: image files not listed because of ``extensions``: ``{extension: count}``
        self.ignored: dict[str, int] = {}

        def keep(dirpath, name):
            if not _has_extension(name, self.extensions):
                if _has_extension(name, images):
                    ext = os.path.splitext(name)[1].lower()
                    self.ignored[ext] = self.ignored.get(ext, 0) + 1
                return False
            return _is_regular_file(os.path.join(dirpath, name))

        # A directory named like an image (``x.jpg/``) is neither a class nor an image.
        self.classes = sorted(e.name for e in os.scandir(self.root)
                              if e.is_dir() and not _has_extension(e.name, self.extensions + images))
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        samples = []
        if self.classes:
            for c in self.classes:
                # sorted(os.walk(...)): the order ImageFolder uses
                for dirpath, _, filenames in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                    samples += [(os.path.join(dirpath, name), self.class_to_idx[c])
                                for name in sorted(filenames) if keep(dirpath, name)]
        else:
            samples = [(os.path.join(self.root, name), 0) for name in sorted(os.listdir(self.root))
                       if keep(self.root, name)]
        if self.ignored:
            listed = ", ".join(f"{n} {ext}" for ext, n in sorted(self.ignored.items()))
            warnings.warn(f"JpegFolder({self.root!r}) lists files ending in {' '.join(self.extensions)}; "
                          f"ignored image files: {listed} (pass extensions= to include them)", UserWarning,
                          stacklevel=2)
        if not samples:
            raise FileNotFoundError(f"no files ending in {self.extensions} found under {self.root!r}")
        self.samples = samples
        super().__init__([p for p, _ in samples], [t for _, t in samples], transform, on_error, **kwargs)

