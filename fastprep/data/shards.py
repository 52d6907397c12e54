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
import io
import json
import os
import re
import stat
import tarfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ._files import NotRegularFileError, file_kind, open_regular
from .datasets import JpegDataset
from .objects import ObjectStore, ReadAhead, is_object_url
from .options import StorageOptions

__all__ = ["FORMAT", "FORMAT_VERSION", "IMAGE_EXTENSIONS", "MANIFEST_NAME", "ShardDataset", "index_digest",
           "is_shard_dir", "scan_shard", "split_member_name"]

#: The manifest's file name inside a shard directory.
MANIFEST_NAME = "fastprep-shards.json"
#: ``manifest["format"]``; ``FORMAT + "-index"`` for the per-shard index files.
FORMAT = "fastprep-webdataset"
FORMAT_VERSION = 1
#: Member extensions (lower case) taken as a sample's image: JpegFolder's default list.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp")

_BLOCK = 512
_REGULAR_TYPES = (b"0", b"\0", b"7")
_SHARD_NAME = re.compile(r"^[^/\\\x00]+$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_COLUMNS = ("keys", "extensions", "offsets", "sizes", "targets")


def split_member_name(name: str) -> tuple[str | None, str | None]:
    """``(key, extension)`` of a tar member name by WebDataset's rule: the key ends at the
    first dot of the basename, the extension is everything after it (``"a/b.c.jpg"`` ->
    ``("a/b", "c.jpg")``). ``(None, None)`` for a name whose basename has no dot or starts
    with one (WebDataset skips such members)."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:
        return None, None
    return name[:dot], name[dot + 1:]


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


def _has_scheme(path: str) -> bool:
    return "://" in path


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
    return _has_scheme(source) or os.path.isfile(os.path.join(source, MANIFEST_NAME))


class _Storage:
    """Reads the files of a shard directory (or a folder of tars) by name: a local folder
    (``os``), an ``s3://`` URL (:class:`~fastprep.data.objects.ObjectStore`) or another URL
    (fsspec).

    Local files -- a plain path, or a ``file://`` URL (fsspec's local filesystem) -- are
    opened only when they are regular files (``fastprep.data._files.open_regular``): a FIFO
    or a device in place of a shard, an index or the manifest is an ``OSError`` naming the
    path, never a read that blocks.

    The fsspec filesystem is created lazily in each process (after a fork or in a spawned
    worker) and never pickled.
    """

    def __init__(self, root: str, storage: StorageOptions | None = None, noun: str = "shard",
                 listing: dict[str, tuple[int, str]] | None = None):
        self.root = root
        self.remote = _has_scheme(root)
        #: what messages call the files read (a missing one is "<noun> missing: <path>")
        self.noun = noun
        #: the object store of an s3:// directory (None otherwise)
        self.objects = ObjectStore(root, storage) if is_object_url(root) else None
        # s3://: {name: (size, version tag)} from one listing (given, or made on first use)
        self._listing = listing
        self._cache: dict[str, bytes | None] = {}  # s3://: prefetched small files, read once
        # (pid, filesystem, root path inside it, whether that filesystem is the local one)
        self._fs: tuple[int, Any, str, bool] | None = None

    def __getstate__(self):
        return {"root": self.root, "remote": self.remote, "noun": self.noun, "objects": self.objects,
                "_listing": self._listing, "_cache": {}, "_fs": None}

    def prefetch(self, names) -> None:
        """s3://: fetch these (small) files concurrently, for :meth:`read_all` to take once."""
        if self.objects is None:
            return
        names = list(names)
        for name, data in zip(names, self.objects.get_many([(n, None, None) for n in names])):
            if isinstance(data, FileNotFoundError):
                self._cache[name] = None
            elif not isinstance(data, BaseException):
                self._cache[name] = bytes(data)

    def path(self, name: str) -> str:
        """The full path or URL of ``name`` (for messages)."""
        if self.objects is not None:
            return self.objects.url_of(name)
        return self.root.rstrip("/") + "/" + name if self.remote else os.path.join(self.root, name)

    def _fs_path(self, name: str):
        if self._fs is None or self._fs[0] != os.getpid():
            try:
                import fsspec
                from fsspec.implementations.local import LocalFileSystem
            except ImportError as e:
                raise ImportError(f"reading shards from {self.root!r} needs fsspec (pip install fsspec)") from e
            fs, root = fsspec.core.url_to_fs(self.root)
            self._fs = (os.getpid(), fs, root.rstrip("/"), isinstance(fs, LocalFileSystem))
        _, fs, root, _ = self._fs
        return fs, f"{root}/{name}"

    def _local(self, name: str) -> str | None:
        """The ``os`` path of ``name`` when it is a local file; ``None`` for a remote one."""
        if not self.remote:
            return os.path.join(self.root, name)
        _, path = self._fs_path(name)
        return path if self._fs is not None and self._fs[3] else None

    def _open_fd(self, local: str, name: str) -> int:
        try:
            return open_regular(local)
        except NotRegularFileError as e:
            raise NotRegularFileError(f"{self.path(name)!r} is {e}") from None

    def _listed(self) -> dict[str, tuple[int, str]]:
        """s3://: ``{name: (size, version tag)}`` of the objects under the root, from one
        listing (:meth:`ObjectStore.list_versions`)."""
        assert self.objects is not None
        if self._listing is None:
            self._listing = {name: (size, tag) for name, size, tag in self.objects.list_versions()}
        return self._listing

    def size(self, name: str) -> int:
        """Size in bytes of a regular file; ``FileNotFoundError`` naming its path when missing."""
        return self.stamp(name)["size"]

    def stamp(self, name: str) -> dict:
        """What tells this version of the file from a changed one: ``{"size", "mtime_ns"}``
        of a local file, ``{"size", "version"}`` of an ``s3://`` object (its listed ETag, or
        its last-modified time where the server lists no ETag), ``{"size"}`` otherwise.
        ``FileNotFoundError`` naming its path when missing; ``NotRegularFileError`` for a
        local path that is not a regular file."""
        if self.objects is not None:
            listed = self._listed()
            if name not in listed:
                raise FileNotFoundError(f"{self.noun} missing: {self.path(name)!r}")
            size, tag = listed[name]
            return {"size": size, "version": tag}
        try:
            local = self._local(name)
            if local is not None:
                st = os.stat(local)
                if not stat.S_ISREG(st.st_mode):
                    raise NotRegularFileError(f"{self.path(name)!r} is not a regular file ({file_kind(st.st_mode)})")
                return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
            fs, path = self._fs_path(name)
            return {"size": int(fs.info(path)["size"])}
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.noun} missing: {self.path(name)!r}") from None

    def read_all(self, name: str) -> bytes | None:
        """The file's bytes; ``None`` when it does not exist."""
        if self.objects is not None:
            if name in self._cache:
                return self._cache.pop(name)
            try:
                return bytes(self.objects.read_all(name))
            except FileNotFoundError:
                return None
        try:
            local = self._local(name)
            if local is not None:
                with os.fdopen(self._open_fd(local, name), "rb") as f:
                    return f.read()
            fs, path = self._fs_path(name)
            return fs.cat_file(path)
        except FileNotFoundError:
            return None

    def read_range(self, name: str, start: int, length: int) -> bytearray:
        """``length`` bytes from ``start`` (fewer only where the file ends first)."""
        if self.objects is not None:
            return self.objects.read_range(name, start, length)
        local = self._local(name)
        if local is None:
            fs, path = self._fs_path(name)
            return bytearray(fs.cat_file(path, start=start, end=start + length))
        buf = bytearray(length)
        view = memoryview(buf)
        fd = self._open_fd(local, name)
        try:
            got = 0
            while got < length:
                n = os.preadv(fd, [view[got:]], start + got)
                if n <= 0:
                    break
                got += n
        finally:
            view.release()
            os.close(fd)
        del buf[got:]
        return buf

    def open(self, name: str):
        """The file opened for binary reading, seekable. An ``s3://`` object is read in
        chunks of range reads as the reader moves through it (:class:`_RangeFile`)."""
        if self.objects is not None:
            return _RangeFile(self.objects, name, self.size(name))
        local = self._local(name)
        if local is not None:
            return os.fdopen(self._open_fd(local, name), "rb")
        fs, path = self._fs_path(name)
        return fs.open(path, "rb")

    def write_atomic(self, name: str, data: bytes) -> bool:
        """Write a local file via a temporary name; False where that is not possible."""
        return not self.remote and _write_atomic(self.path(name), data)


def _write_atomic(path: str, data: bytes) -> bool:
    """Write ``path`` via a temporary name in its folder and a rename (a reader never sees
    a partial file); False when that fails (a folder that is not writable, ...)."""
    tmp = f"{path}.{os.getpid()}.{id(data):x}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


class _RangeFile(io.RawIOBase):
    """An object read as a seekable file, in chunks of range reads (:data:`CHUNK` bytes,
    :data:`AHEAD` of them in flight at once): a tar's headers are scanned without a copy of
    the whole object in memory. Chunks behind the one read last but one are dropped."""

    CHUNK = 4 << 20
    AHEAD = 4

    def __init__(self, objects: ObjectStore, name: str, size: int):
        super().__init__()
        self._objects, self._name, self._size = objects, name, size
        self._pos = 0
        self._chunks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        if base + offset < 0:
            raise OSError(f"seek to {base + offset} in {self._objects.url_of(self._name)!r}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        want = max(0, min(len(view), self._size - self._pos))
        got = 0
        while got < want:
            k, start = divmod(self._pos + got, self.CHUNK)
            piece = self._chunk(k)[start:start + want - got]
            if not piece:  # the object is shorter than listed
                break
            view[got:got + len(piece)] = piece
            got += len(piece)
        self._pos += got
        return got

    def _chunk(self, k: int) -> bytes:
        if k not in self._chunks:
            last = (self._size - 1) // self.CHUNK
            wanted = [j for j in range(k, min(k + self.AHEAD, last + 1)) if j not in self._chunks]
            requests = [(self._name, j * self.CHUNK, min(self.CHUNK, self._size - j * self.CHUNK)) for j in wanted]
            for j, data in zip(wanted, self._objects.get_many(requests)):
                if isinstance(data, BaseException):
                    raise data
                self._chunks[j] = bytes(data)
            for j in [j for j in self._chunks if j < k - 1]:
                del self._chunks[j]
        return self._chunks[k]


def _utf8_path(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in path


def _octal(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):  # base-256 (GNU) for large values
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].strip(b" \0")
    return int(text, 8) if text else 0


def _check_header(header: bytes, member: str, size: int) -> str | None:
    """Why the 512-byte tar header before a member's data does not describe ``member`` of
    ``size`` bytes, or ``None`` when it does. A bad checksum returns ``"checksum"``."""
    try:
        stored = _octal(header[148:156])
    except ValueError:
        return "checksum"
    unsigned = sum(header[:148]) + 256 + sum(header[156:])
    # the signed sum (old tar writers) only where the unsigned one does not match: it is the
    # unsigned one less 256 for every byte above 127
    if stored != unsigned and stored != unsigned - 256 * sum(b > 127 for b in header[:148] + header[156:]):
        return "checksum"
    if header[156:157] not in _REGULAR_TYPES:
        return f"not a regular file member (type {header[156:157]!r})"
    try:
        header_size = _octal(header[124:136])
    except ValueError:
        return "unreadable size field"
    if header_size != size:
        return f"the tar header gives {header_size} bytes, the index {size}"
    name = header[:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar" and header[345:346] != b"\0":
        name = header[345:500].split(b"\0", 1)[0] + b"/" + name
    encoded = member.encode("utf-8", "surrogateescape")
    # Long or non-ASCII names live in a PAX/GNU header before this one; the ustar field is then
    # a truncated or lossy copy, so only short ASCII names are compared.
    if len(encoded) <= 100 and member.isascii() and name != encoded:
        return f"the tar header names {name.decode('utf-8', 'replace')!r}, the index {member!r}"
    return None


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


class _TarWalk:
    """The regular members of a tar, read from its headers (``tarfile``, which seeks over
    the data), grouped into samples as WebDataset groups them: consecutive members whose
    names give the same key. Iterating yields ``(key, members)`` per sample (``members``:
    the ``tarfile.TarInfo`` of each, in tar order; a member's extension is its name after
    ``key + "."``).

    Args:
        fileobj: the tar, opened for binary reading (seekable).
        tar: the tar's name, in messages.
        split: ``(key, extension)`` of a member name, ``(None, None)`` for a member that
            belongs to no sample (:func:`split_member_name`).
        skip: names of members left out before they are split (``None``: none).

    Iterating raises ``ValueError`` naming ``tar`` when it is not a tar file, or when a
    header ``tarfile`` cannot read follows the samples yielded so far (a header it takes
    for the end of the archive ends the walk without one: the caller checks what lies at
    :attr:`end`).
    """

    def __init__(self, fileobj, tar: str, split: Callable[[str], tuple[str | None, str | None]] | None = None,
                 skip: Callable[[str], bool] | None = None):
        self.fileobj, self.tar = fileobj, tar
        self.split = split_member_name if split is None else split
        self.skip = skip
        #: where the data of the last member read ends, padded to a block (0: none read)
        self.end = 0
        #: where it ends, unpadded
        self.data_end = 0
        #: the name of the last member read
        self.last: str | None = None
        #: samples yielded so far
        self.samples = 0

    def __iter__(self) -> Iterator[tuple[str, list[tarfile.TarInfo]]]:
        try:
            tar = tarfile.open(fileobj=self.fileobj, mode="r:")
        except tarfile.TarError as e:
            raise ValueError(f"{self.tar}: not a readable tar file ({e})") from e
        current: str | None = None
        members: list[tarfile.TarInfo] = []
        with tar:
            try:
                for m in tar:
                    self.data_end = m.offset_data + m.size
                    self.end = m.offset_data + -(-m.size // _BLOCK) * _BLOCK
                    self.last = m.name
                    if not m.isfile() or (self.skip is not None and self.skip(m.name)):
                        continue
                    key, ext = self.split(m.name)
                    if key is None or ext is None:
                        continue
                    if key != current:
                        if current is not None:
                            self.samples += 1
                            yield current, members
                        current, members = key, []
                    members.append(m)
            except tarfile.TarError as e:
                raise ValueError(f"{self.tar}: unreadable tar headers after {self.samples} samples ({e})") from e
        if current is not None:
            self.samples += 1
            yield current, members


def _read_member(fileobj, member: tarfile.TarInfo, limit: int) -> bytes:
    """The first ``limit`` bytes of ``member``'s data."""
    fileobj.seek(member.offset_data)
    return fileobj.read(min(member.size, limit))


def _class_index(text: bytes) -> int:
    """The integer in a ``cls`` member (decimal ASCII, surrounding whitespace allowed);
    ``ValueError`` when there is none."""
    try:
        return int(text.decode("ascii").strip())
    except UnicodeDecodeError:
        raise ValueError("not ASCII") from None


def _scan(fileobj, shard: str) -> tuple[dict, int]:
    """:func:`scan_shard`'s index, and where the last member's data ends (its padding
    included): a complete tar has its end-of-archive blocks there."""
    keys: list[str] = []
    exts: list[str | None] = []
    offsets: list[int] = []
    sizes: list[int] = []
    targets: list[int] = []
    seen: set[str] = set()
    walk = _TarWalk(fileobj, shard)
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
                text = _read_member(fileobj, m, 64)
                try:
                    cls = _class_index(text)
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


def _load_manifest(storage: _Storage) -> dict:
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
    end = _BLOCK
    for key, ext, offset, size in zip(index["keys"], index["extensions"], index["offsets"], index["sizes"]):
        if ext is None:
            continue
        # Members follow one another: data starts after a header, past the previous member.
        if offset < end or offset % _BLOCK or offset + size > limit:
            raise bad(f"sample {key!r}: image at bytes [{offset}, {offset + size}) is out of order or outside "
                      f"the shard's {limit} bytes")
        end = offset + size + _BLOCK
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


class _TarSamples(JpegDataset):
    """Samples that are members of tar files, located by an index (:class:`ShardDataset`,
    :class:`~fastprep.data.TarDataset`): each is one range read of the member's tar header
    and data, the header checked against the index; a batch of local members is one native
    call, a batch on ``s3://`` has its reads in flight at once.

    A subclass builds its index, then calls :meth:`_locate`; ``files[i]`` must be
    ``"<name of its tar>:<key>"``.
    """

    _storage: _Storage

    def _locate(self, storage: _Storage, names: list[str], shard_ids, offsets, sizes,
                extensions: list[str | None]) -> None:
        """Set where the samples are: the tars (``names`` in ``storage``) and per sample the
        tar's number, the image member's data offset and size and its extension (``None``:
        the sample has no image; reading it fails)."""
        self._storage = storage
        self._shard_names = list(names)
        self.shards = [storage.path(name) for name in self._shard_names]
        self._shard_ids = np.asarray(shard_ids, dtype=np.int32)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._extensions = extensions
        # where the key starts in files[i]: after "<tar name>:"
        self._key_starts = [len(name) + 1 for name in self._shard_names]
        # Tars the native reader can name (a path torch passes as UTF-8 without a NUL).
        self._native_shard = [_utf8_path(path) for path in self.shards]

    @property
    def object_store(self) -> ObjectStore | None:
        """The :class:`~fastprep.data.ObjectStore` of ``s3://`` tars, else ``None``."""
        return self._storage.objects

    def _member_name(self, index: int) -> str:
        """The name of sample ``index``'s image member: its key, a dot and the extension."""
        key = self.files[index][self._key_starts[self._shard_ids[index]]:]
        return f"{key}.{self._extensions[index]}"

    def read_encoded(self, index: int) -> tuple[torch.Tensor, str]:
        """``(image bytes as a uint8 1-D tensor, "<tar name>:<key>")`` of sample ``index``:
        one range read covering the member's tar header (checked against the index) and data.

        Raises:
            OSError: the shard cannot be read, ends before the member (truncated), its
                header is damaged, or the sample has no image member.
            ValueError: the tar header there describes another member (a stale index).
        """
        shard_id, start, length = self._member_range(index)
        return self._checked_member(index, self._storage.read_range(self._shard_names[shard_id], start, length))

    def _member_range(self, index: int) -> tuple[int, int, int]:
        """``(shard id, start, length)`` of the bytes :meth:`read_encoded` reads: the
        member's tar header and data. Raises ``OSError`` for a sample without an image."""
        if self._extensions[index] is None:
            raise OSError(f"sample has no image member (none of .{', .'.join(IMAGE_EXTENSIONS)})")
        offset, size = int(self._offsets[index]), int(self._sizes[index])
        return int(self._shard_ids[index]), offset - _BLOCK, size + _BLOCK

    def _checked_member(self, index: int, data: bytearray) -> tuple[torch.Tensor, str]:
        """:meth:`read_encoded`'s answer from the bytes of :meth:`_member_range`, the tar
        header checked against the index."""
        name = self.files[index]
        shard_id = int(self._shard_ids[index])
        member = self._member_name(index)
        offset, size = int(self._offsets[index]), int(self._sizes[index])
        noun = self._storage.noun
        if len(data) < size + _BLOCK:
            raise OSError(f"{noun} {self.shards[shard_id]!r} ends before the end of member {member!r} (truncated; "
                          f"needs {offset + size} bytes)")
        why = _check_header(bytes(data[:_BLOCK]), member, size)
        if why == "checksum":
            raise OSError(f"damaged tar header (bad checksum) before member {member!r} in {self.shards[shard_id]!r}")
        if why is not None:
            raise ValueError(f"the index does not match {noun} {self.shards[shard_id]!r}: {why}")
        return torch.frombuffer(data, dtype=torch.uint8, offset=_BLOCK) if size else \
            torch.empty(0, dtype=torch.uint8), name

    def read_encoded_batch(self, indices) -> list[tuple[torch.Tensor | Exception, str]]:
        """:meth:`read_encoded` for several samples, as :meth:`JpegDataset.read_encoded_batch`.

        On local tars the members are read and their tar headers checked in one native
        call that releases the GIL (``torch.ops.fastprep.read_tar_members``, each tar
        opened once per call); a sample it does not accept, and every sample of a remote
        (fsspec) directory, goes through :meth:`read_encoded`, which names the error. On
        ``s3://`` the batch's range reads are all in flight at once.
        """
        indices = list(indices)
        if type(self).read_encoded is not _TarSamples.read_encoded:
            return [self._read_or_error(i) for i in indices]
        if self._storage.objects is not None:
            return self._read_objects(indices)
        if self._storage.remote:
            return [self._read_or_error(i) for i in indices]
        native = [j for j, i in enumerate(indices) if self._extensions[i] is not None
                  and self._native_shard[self._shard_ids[i]]]
        shards, offsets, sizes, members = [], [], [], []
        for j in native:
            i = indices[j]
            shard_id = int(self._shard_ids[i])
            member = self._member_name(i)
            shards.append(self.shards[shard_id])
            offsets.append(int(self._offsets[i]))
            sizes.append(int(self._sizes[i]))
            members.append(member if member.isascii() else "")  # the name check is for short ASCII names
        datas, codes = torch.ops.fastprep.read_tar_members(shards, offsets, sizes, members)
        out: list = [None] * len(indices)
        for j, data, code in zip(native, datas, codes.tolist()):
            if code == 0:
                out[j] = (data, self.files[indices[j]])
        return [entry if entry is not None else self._read_or_error(i) for entry, i in zip(out, indices)]

    def _read_objects(self, indices: list[int]) -> list[tuple[torch.Tensor | Exception, str]]:
        """:meth:`read_encoded_batch` on ``s3://``: one range read per sample,
        all in flight at once; the headers checked as :meth:`read_encoded` does."""
        out: list = [None] * len(indices)
        wanted, requests = [], []
        for j, i in enumerate(indices):
            try:
                shard_id, start, length = self._member_range(i)
            except OSError as e:
                out[j] = (e, "")
                continue
            wanted.append(j)
            requests.append((self._shard_names[shard_id], start, length))
        assert self._storage.objects is not None
        for j, data in zip(wanted, self._storage.objects.get_many(requests)):
            if isinstance(data, BaseException):
                out[j] = (data, "")
                continue
            try:
                out[j] = self._checked_member(indices[j], data)
            except (OSError, ValueError) as e:
                out[j] = (e, "")
        return out

    def read_ahead(self, indices, *, budget_bytes: int, group: int) -> ReadAhead | None:
        """On ``s3://``, the epoch's range reads in order of ``indices``,
        issued ahead and coalesced where neighbours in the order are close in a tar
        (:class:`~fastprep.data.objects.ReadAhead`; its ``read_batch(positions)`` answers as
        :meth:`read_encoded_batch`); else ``None``."""
        objects = self._storage.objects
        if objects is None or type(self).read_encoded is not _TarSamples.read_encoded \
                or not objects.options.read_ahead:
            return None
        indices = list(indices)
        requests: list = []
        for i in indices:
            try:
                shard_id, start, length = self._member_range(i)
                requests.append((self._shard_names[shard_id], start, length, length))
            except OSError as e:
                requests.append(e)

        def convert(k: int, data) -> tuple[torch.Tensor | Exception, str]:
            if isinstance(data, Exception):
                return data, ""
            try:
                return self._checked_member(indices[k], data)
            except (OSError, ValueError) as e:
                return e, ""

        return ReadAhead(objects, requests, convert, budget_bytes=budget_bytes,
                         ahead=4 * objects.options.max_in_flight, group=group)


class ShardDataset(_TarSamples):
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
        self._storage = _Storage(self.root, storage)
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
                complete = f.read(2 * _BLOCK) == bytes(2 * _BLOCK)  # the end-of-archive blocks are there
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
            why = _check_header(bytes(self._storage.read_range(entry["name"], offset - _BLOCK, _BLOCK)),
                                f"{key}.{ext}", n)
            if why is not None and why != "checksum":  # a damaged header fails when read
                raise ValueError(f"shard {self._storage.path(entry['name'])!r} ({size} of {entry['bytes']} bytes) "
                                 f"is not the shard its index describes: {why} (a shard replaced by another one: "
                                 "restore it, or re-pack)")
            return

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root!r}, samples={len(self.files)}, shards={len(self.shards)}, "
                f"transform={self.transform!r}, on_error={self.on_error!r})")
