"""WebDataset tar shards written by ``python -m fastprep.pack SRC DST --format wds``, read
with random access: :class:`ShardDataset`, :func:`is_shard_dir`.

A shard directory holds plain tar files (``shard-000000.tar``, ...) in which the members
sharing a key form one sample (``<key>.jpg`` -- or the image's own extension -- and
``<key>.cls``, the class index as decimal text), a manifest (:data:`MANIFEST_NAME`: classes,
shards, sample counts, each shard's pin: :func:`index_digest`) and, per shard, a member
index (``shard-000000.idx.json``: where each sample's image bytes start in the tar and how
long they are). The index turns a
sample into one byte-range read, so a sampler can shuffle globally (no shuffle buffer). A
missing index is rebuilt by scanning the tar headers once and cached next to the shard
when the directory is writable. See docs/pack.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import warnings

import numpy as np

from ._tar import (BLOCK, IMAGE_EXTENSIONS, Storage, TarSamples, TarWalk, check_header, class_index, has_scheme,
                   read_member, split_member_name)
from .objects import ObjectStore, is_object_url
from .options import StorageOptions

__all__ = ["FORMAT", "FORMAT_VERSION", "IMAGE_EXTENSIONS", "MANIFEST_NAME", "ShardDataset", "index_digest",
           "is_shard_dir", "scan_shard", "split_member_name"]

#: The manifest's file name inside a shard directory.
MANIFEST_NAME = "fastprep-shards.json"
#: ``manifest["format"]``; ``FORMAT + "-index"`` for the per-shard index files.
FORMAT = "fastprep-webdataset"
FORMAT_VERSION = 1

_SHARD_NAME = re.compile(r"^[^/\\\x00]+$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_COLUMNS = ("keys", "extensions", "offsets", "sizes", "targets")


def index_digest(index: dict) -> str:
    """The pin of a shard: ``"sha256:"`` and the hex SHA-256 of its member index's columns.

    ``fastprep.pack`` records it per shard in the manifest (``"digest"``), so a reader can
    tell the shard it was given from another one -- from its index, or from a scan of the
    tar when the index is missing -- without reading the shard's data. Hashed, each
    preceded by its length in bytes (8, little-endian): the ``keys`` joined by NUL (UTF-8),
    the ``extensions`` joined by NUL (``null`` as ``/``), then ``offsets``, ``sizes`` and
    ``targets`` as little-endian int64.

    Raises:
        ValueError: an offset, size or target does not fit in an int64.
    """
    digest = hashlib.sha256()

    def add(blob: bytes) -> None:
        digest.update(len(blob).to_bytes(8, "little"))
        digest.update(blob)

    add("\0".join(index["keys"]).encode("utf-8", "surrogatepass"))
    add("\0".join("/" if e is None else e for e in index["extensions"]).encode("utf-8", "surrogatepass"))
    for column in ("offsets", "sizes", "targets"):
        try:
            add(np.asarray(index[column], dtype="<i8").tobytes())
        except (OverflowError, TypeError, ValueError):
            raise ValueError(f"{column} must be ints that fit in an int64") from None
    return "sha256:" + digest.hexdigest()




def is_shard_dir(source, storage: StorageOptions | None = None) -> bool:
    """True when ``source`` is a shard directory: a local folder holding
    :data:`MANIFEST_NAME`, an ``s3://`` URL under which the manifest object exists (one
    request, with ``storage``'s options; a missing bucket raises ``FileNotFoundError``
    naming it), or any other URL with a scheme (``file://``, ...; only shard directories
    are read from those, and :class:`ShardDataset` says so when the manifest is
    missing)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    source = os.fspath(source)
    if isinstance(source, bytes):
        return False
    if is_object_url(source):
        found = ObjectStore(source, storage).get_many([(MANIFEST_NAME, None, None)])[0]
        # a missing object says "object missing: <url>" (a missing bucket says so; the URL may hold "bucket")
        if isinstance(found, FileNotFoundError) and str(found).startswith("object missing:"):
            return False
        if isinstance(found, BaseException):
            raise found
        return True
    return has_scheme(source) or os.path.isfile(os.path.join(source, MANIFEST_NAME))














def scan_shard(fileobj, shard: str) -> dict:
    """Build a shard's member index by reading its tar headers (and its ``.cls`` members).

    Members are grouped into samples by WebDataset's rule (consecutive members sharing a
    key, see :func:`split_member_name`); a sample's image is its first member with one of
    :data:`IMAGE_EXTENSIONS` (``None`` when it has none: reading that sample fails), its
    target the integer in its ``cls`` member.

    Args:
        fileobj: the tar, opened for binary reading (seekable).
        shard: the shard's name, recorded in the index and used in messages.

    Returns:
        The index as written to ``shard-NNNNNN.idx.json`` (see docs/pack.md).

    Raises:
        ValueError: not a tar file, a sample without a ``cls`` member or with one that is
            not an integer, or a key split over non-adjacent members.
    """
    return _scan(fileobj, shard)[0]








def _scan(fileobj, shard: str) -> tuple[dict, int]:
    """:func:`scan_shard`'s index, and where the last member's data ends (its padding
    included): a complete tar has its end-of-archive blocks there."""
    keys: list[str] = []
    exts: list[str | None] = []
    offsets: list[int] = []
    sizes: list[int] = []
    targets: list[int] = []
    seen: set[str] = set()
    walk = TarWalk(fileobj, shard)
    for key, members in walk:
        if key in seen:
            raise ValueError(f"{shard}: the members of sample {key!r} are not adjacent")
        seen.add(key)
        image: tarfile.TarInfo | None = None
        cls: int | None = None
        for m in members:
            ext = m.name[len(key) + 1:].lower()
            if ext in IMAGE_EXTENSIONS and image is None:
                image = m
            elif ext == "cls":
                text = read_member(fileobj, m, 64)
                try:
                    cls = class_index(text)
                except ValueError:
                    raise ValueError(f"{shard}: {m.name!r} is not an integer class index: {text[:20]!r}") from None
        if cls is None:
            raise ValueError(f"{shard}: sample {key!r} has no .cls member")
        keys.append(key)
        exts.append(None if image is None else image.name[len(key) + 1:])
        offsets.append(0 if image is None else image.offset_data)
        sizes.append(0 if image is None else image.size)
        targets.append(cls)
    return {"format": FORMAT + "-index", "version": FORMAT_VERSION, "shard": shard, "keys": keys,
            "extensions": exts, "offsets": offsets, "sizes": sizes, "targets": targets}, walk.end


def _load_manifest(storage: Storage) -> dict:
    path = storage.path(MANIFEST_NAME)
    raw = storage.read_all(MANIFEST_NAME)
    if raw is None:
        raise FileNotFoundError(f"{storage.root!r} is not a shard directory: no {MANIFEST_NAME} "
                                "(written by python -m fastprep.pack SRC DST --format wds)")
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{path!r} is not valid JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path!r} is not a {FORMAT} manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path!r} has format version {manifest.get('version')!r}; this fastprep reads "
                         f"version {FORMAT_VERSION}")
    shards, classes = manifest.get("shards"), manifest.get("classes")
    if not isinstance(shards, list) or not isinstance(classes, list) \
            or not all(isinstance(c, str) for c in classes):
        raise ValueError(f"{path!r}: 'shards' and 'classes' must be lists")
    for entry in shards:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and _SHARD_NAME.match(entry["name"]) and entry["name"] not in (".", "..")
                and isinstance(entry.get("index"), str) and _SHARD_NAME.match(entry["index"])
                and _is_count(entry.get("num_samples")) and _is_count(entry.get("bytes"))):
            raise ValueError(f"{path!r}: bad shard entry {entry!r} (needs a plain file 'name' and 'index', "
                             "'num_samples' and 'bytes' >= 0)")
        if "digest" in entry and not (isinstance(entry["digest"], str) and _DIGEST.match(entry["digest"])):
            raise ValueError(f"{path!r}: shard {entry['name']!r} has digest {entry['digest']!r}; expected "
                             "'sha256:' and 64 lower-case hex digits")
    _check_unique(shards, path)
    if manifest.get("num_samples") != sum(e["num_samples"] for e in shards):
        raise ValueError(f"{path!r}: num_samples={manifest.get('num_samples')!r} but the shards hold "
                         f"{sum(e['num_samples'] for e in shards)} samples")
    return manifest


def _check_unique(shards: list, path: str) -> None:
    """Raise ValueError when a file is named by two shard entries (a shard listed twice, an
    index given for two shards, or a shard that is another's index)."""
    owner: dict[str, tuple[int, str]] = {}
    for i, entry in enumerate(shards):
        for field in ("name", "index"):
            file = entry[field]
            if file in owner:
                j, other = owner[file]
                raise ValueError(f"{path!r}: {file!r} is the {other} of shard entry {j} and the {field} of "
                                 f"shard entry {i}: every shard and index must be listed once")
            owner[file] = (i, field)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _check_index(index, entry: dict, num_classes: int, where: str) -> None:
    """Raise ValueError unless ``index`` is a well-formed index of the manifest's ``entry``."""
    def bad(why):
        return ValueError(f"{where} does not match the manifest: {why}")

    if not isinstance(index, dict) or index.get("format") != FORMAT + "-index" \
            or index.get("version") != FORMAT_VERSION:
        raise bad(f"not a {FORMAT}-index version {FORMAT_VERSION}")
    if index.get("shard") != entry["name"]:
        raise bad(f"it indexes {index.get('shard')!r}, not {entry['name']!r}")
    n = entry["num_samples"]
    if not all(isinstance(index.get(c), list) and len(index[c]) == n for c in _COLUMNS):
        raise bad(f"the manifest lists {n} samples; every column ({', '.join(_COLUMNS)}) must have that many")
    if not all(isinstance(k, str) for k in index["keys"]) \
            or not all(e is None or isinstance(e, str) for e in index["extensions"]):
        raise bad("keys and extensions must be strings")
    for column in ("offsets", "sizes", "targets"):
        if not all(_is_count(v) for v in index[column]):
            raise bad(f"{column} must be ints >= 0")
    limit = entry["bytes"]
    end = BLOCK
    for key, ext, offset, size in zip(index["keys"], index["extensions"], index["offsets"], index["sizes"]):
        if ext is None:
            continue
        # Members follow one another: data starts after a header, past the previous member.
        if offset < end or offset % BLOCK or offset + size > limit:
            raise bad(f"sample {key!r}: image at bytes [{offset}, {offset + size}) is out of order or outside "
                      f"the shard's {limit} bytes")
        end = offset + size + BLOCK
    if num_classes and any(t >= num_classes for t in index["targets"]):
        raise bad(f"a class index is >= the manifest's {num_classes} classes")
    if not num_classes and any(index["targets"]):
        key, target = next((k, t) for k, t in zip(index["keys"], index["targets"]) if t)
        raise bad(f"the manifest lists no classes (an unlabelled, flat folder: every target 0) but sample "
                  f"{key!r} has target {target}")


def _not_pinned_shard(shard_path: str, entry: dict, size: int, index: dict | None, incomplete: str) -> ValueError:
    """The error for a rescanned shard without the manifest's digest: truncated or damaged
    (``incomplete`` says how its scan ended early), or another shard (a complete tar of
    other members: ``index``)."""
    restore = "restore it (or its index), or re-pack"
    if incomplete or index is None:
        state = f"truncated ({size} of {entry['bytes']} bytes)" if size < entry["bytes"] else "damaged"
        return ValueError(f"shard {shard_path!r} is {state} and its index {entry['index']!r} is missing: its "
                          f"samples cannot be located ({incomplete}); {restore}")
    keys = index["keys"]
    found = f"{len(keys)} samples" + (f" ({keys[0]!r} to {keys[-1]!r})" if keys else "")
    return ValueError(f"shard {shard_path!r} is not the shard the manifest pins: it holds {found} in {size} bytes, "
                      f"digest {index_digest(index)}; the manifest records {entry['num_samples']} samples in "
                      f"{entry['bytes']} bytes, digest {entry['digest']} (a shard replaced by another one: {restore})")




class ShardDataset(TarSamples):
    """The samples of a shard directory (``python -m fastprep.pack SRC DST --format wds``),
    read with random access.

    Sample ``i`` is the ``i``-th sample of the shards in order -- the source folder's
    sorted order, so with the same ``seed`` (and the same sampler) the samples equal those
    of ``JpegFolder(SRC)``: the packed bytes decode to the original pixels. Each sample is
    one byte-range read located by the shard's member index; shuffling is global.

    Args:
        root: the shard directory: a local path, an ``s3://`` URL (read with obstore,
            ``pip install 'fastprep[s3]'``: a batch's range reads all in flight at once,
            docs/storage.md) or another fsspec URL (``file://``, ...; needs fsspec and the
            filesystem's package).
        transform, on_error, **kwargs: as :class:`JpegDataset` (``max_skip_attempts``,
            ``max_pixels``, ``jpeg_only``, ``apply_exif_orientation``, ``seed``).
        storage: :class:`~fastprep.data.StorageOptions` for an ``s3://`` root (``None``:
            the defaults).

    Attributes:
        classes, class_to_idx: as :class:`JpegFolder` (from the manifest).
        shards: the shard paths (or URLs), in order.
        files: per sample, ``"<shard file name>:<key>"`` -- the name error messages use.

    Bad data: a sample whose bytes lie past the end of a truncated shard, whose tar header
    is damaged, that has no image member, whose shard was replaced by a FIFO, a directory
    or a device (never opened for reading: no read blocks), or whose image does not decode
    raises :class:`fastprep.io.DecodeError` naming the shard and the key (or is replaced,
    with ``on_error="skip"``). A truncated shard also warns once when the dataset is opened.

    Pins: the manifest of ``fastprep.pack`` records each shard's ``digest``
    (:func:`index_digest`). An index must have it, and a shard whose index is missing is
    scanned and must give it, so a shard replaced by another one is refused at open (or,
    with its index kept and the same size, when a sample is read) instead of being read as
    the other one. A manifest without digests is read as before, with a warning when a
    shard had to be scanned.

    Raises:
        FileNotFoundError: no manifest, or a shard listed in it is missing (its path is named).
        OSError: the manifest, an index or a shard is not a regular file (a FIFO, a
            directory, a device), at open.
        ValueError: the manifest, an index or a shard do not match one another (wrong
            counts, offsets out of order or out of bounds, a shard larger than recorded, a
            shard or index listed twice, targets other than 0 without classes, an index or
            a shard without its pin, a truncated shard without its index, a tar header that
            names another member) -- at open, or when the sample is read.
    """

    def __init__(self, root, transform=None, on_error: str = "raise", storage: StorageOptions | None = None,
                 **kwargs):
        self.root = os.fspath(root)
        self._storage = Storage(self.root, storage)
        manifest = _load_manifest(self._storage)
        self._storage.prefetch(entry["index"] for entry in manifest["shards"])
        self.classes = list(manifest["classes"])
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._shard_names = [entry["name"] for entry in manifest["shards"]]
        self.shards = [self._storage.path(name) for name in self._shard_names]
        names, targets, shard_ids, offsets, sizes, exts = [], [], [], [], [], []
        truncated: list[str] = []
        unpinned: list[str] = []
        for shard_id, entry in enumerate(manifest["shards"]):
            size = self._storage.size(entry["name"])
            if size > entry["bytes"]:
                raise ValueError(f"shard {self.shards[shard_id]!r} has {size} bytes, the manifest records "
                                 f"{entry['bytes']}: the manifest does not match the shards (re-run fastprep.pack)")
            index = self._load_index(entry, size, unpinned)
            lost = 0 if size == entry["bytes"] else sum(
                1 for ext, offset, n in zip(index["extensions"], index["offsets"], index["sizes"])
                if ext is not None and offset + n > size)
            if lost:
                truncated.append(f"{self.shards[shard_id]!r} ({size} of {entry['bytes']} bytes, {lost} of "
                                 f"{entry['num_samples']} samples past the end)")
            names += [f"{entry['name']}:{k}" for k in index["keys"]]
            exts += index["extensions"]
            targets += index["targets"]
            offsets += index["offsets"]
            sizes += index["sizes"]
            shard_ids += [shard_id] * entry["num_samples"]
        if unpinned:
            warnings.warn(f"shards indexed by a scan that nothing could check: {', '.join(unpinned)} (the manifest "
                          "pins no 'digest' for them -- written by an older fastprep.pack, or by hand -- so a shard "
                          "replaced by another one is read as it is; re-pack with python -m fastprep.pack, or add "
                          "each shard's digest: docs/pack.md)", UserWarning, stacklevel=2)
        if truncated:
            warnings.warn(f"truncated shards: {', '.join(truncated)}; those samples fail "
                          "(DecodeError, or skipped with on_error='skip')", UserWarning, stacklevel=2)
        self._locate(self._storage, self._shard_names, shard_ids, offsets, sizes, exts)
        super().__init__(names, targets, transform, on_error, **kwargs)

    def _load_index(self, entry: dict, size: int, unpinned: list[str]) -> dict:
        """The shard's member index, checked against the manifest's entry (its pin too) and
        against the shard (``size`` bytes): its side file, or a scan of the tar (then cached).
        A rescanned shard the manifest does not pin is appended to ``unpinned``."""
        raw = self._storage.read_all(entry["index"])
        if raw is None:
            return self._rescan(entry, size, unpinned)
        where = f"index {self._storage.path(entry['index'])!r}"
        try:
            index = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{where} is not valid JSON: {e}") from None
        _check_index(index, entry, len(self.classes), where)
        pin = entry.get("digest")
        if pin is not None and index_digest(index) != pin:
            raise ValueError(f"{where} is not the index the manifest pins for shard "
                             f"{self._storage.path(entry['name'])!r}: its digest is {index_digest(index)}, the "
                             f"manifest's {pin} (an edited index, or one of other shards: delete it to rebuild it "
                             "from the shard, or re-pack)")
        if size < entry["bytes"]:
            self._check_first_member(entry, index, size)
        return index

    def _rescan(self, entry: dict, size: int, unpinned: list[str]) -> dict:
        """The index of a shard whose index file is missing, from its tar headers; compared
        with the manifest's pin, so that another shard (or a truncated one) is not read as
        this one."""
        shard_path = self._storage.path(entry["name"])
        pin = entry.get("digest")
        try:
            with self._storage.open(entry["name"]) as f:
                index, end = _scan(f, entry["name"])
                f.seek(end)
                complete = f.read(2 * BLOCK) == bytes(2 * BLOCK)  # the end-of-archive blocks are there
        except FileNotFoundError:
            raise FileNotFoundError(f"shard missing: {shard_path!r}") from None
        except ValueError as e:
            if pin is not None:
                raise _not_pinned_shard(shard_path, entry, size, None, str(e)) from e
            raise
        if pin is not None and index_digest(index) != pin:
            raise _not_pinned_shard(shard_path, entry, size, index, "" if complete else
                                    f"its tar ends after {len(index['keys'])} samples")
        if pin is None:
            unpinned.append(repr(shard_path))
        if len(index["keys"]) != entry["num_samples"]:
            raise ValueError(f"shard {shard_path!r} holds {len(index['keys'])} samples, the manifest "
                             f"records {entry['num_samples']}: the manifest does not match the shards")
        _check_index(index, entry, len(self.classes), f"the scan of {shard_path!r}")
        self._storage.write_atomic(entry["index"], json.dumps(index, separators=(",", ":")).encode())
        return index

    def _check_first_member(self, entry: dict, index: dict, size: int) -> None:
        """Raise ValueError when the first image member of a shard shorter than recorded is
        not the one its index names: the shard was replaced by another one, it is not
        truncated. One header read."""
        for key, ext, offset, n in zip(index["keys"], index["extensions"], index["offsets"], index["sizes"]):
            if ext is None:
                continue
            if offset + n > size:
                return  # past the end already: nothing to compare
            why = check_header(bytes(self._storage.read_range(entry["name"], offset - BLOCK, BLOCK)),
                                f"{key}.{ext}", n)
            if why is not None and why != "checksum":  # a damaged header fails when read
                raise ValueError(f"shard {self._storage.path(entry['name'])!r} ({size} of {entry['bytes']} bytes) "
                                 f"is not the shard its index describes: {why} (a shard replaced by another one: "
                                 "restore it, or re-pack)")
            return

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root!r}, samples={len(self.files)}, shards={len(self.shards)}, "
                f"transform={self.transform!r}, on_error={self.on_error!r})")
