"""WebDataset tar shards written by ``python -m fastprep.pack SRC DST --format wds``, read
with random access: :class:`ShardDataset`, :func:`is_shard_dir`.

A shard directory holds plain tar files (``shard-000000.tar``, ...) in which the members
sharing a key form one sample (``<key>.jpg`` -- or the image's own extension -- and
``<key>.cls``, the class index as decimal text), a manifest (:data:`MANIFEST_NAME`: classes,
shards, sample counts) and, per shard, a member index (``shard-000000.idx.json``: where
each sample's image bytes start in the tar and how long they are). The index turns a
sample into one byte-range read, so a sampler can shuffle globally (no shuffle buffer). A
missing index is rebuilt by scanning the tar headers once and cached next to the shard
when the directory is writable. See docs/pack.md.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tarfile
import warnings
from typing import Any

import numpy as np
import torch

from .datasets import JpegDataset

__all__ = ["FORMAT", "FORMAT_VERSION", "IMAGE_EXTENSIONS", "MANIFEST_NAME", "ShardDataset", "is_shard_dir",
           "scan_shard", "split_member_name"]

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


def _has_scheme(path: str) -> bool:
    return "://" in path


def is_shard_dir(source) -> bool:
    """True when ``source`` is a shard directory: a local folder holding
    :data:`MANIFEST_NAME`, or any URL with a scheme (``file://``, ``s3://``, ...; only shard
    directories are read from URLs, and :class:`ShardDataset` says so when the manifest
    is missing)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    source = os.fspath(source)
    if isinstance(source, bytes):
        return False
    return _has_scheme(source) or os.path.isfile(os.path.join(source, MANIFEST_NAME))


class _Storage:
    """Reads the files of a shard directory by name: a local folder (``os``) or a URL (fsspec).

    The fsspec filesystem is created lazily in each process (after a fork or in a spawned
    worker) and never pickled.
    """

    def __init__(self, root: str):
        self.root = root
        self.remote = _has_scheme(root)
        self._fs: tuple[int, Any, str] | None = None  # (pid, filesystem, root path inside it)

    def __getstate__(self):
        return {"root": self.root, "remote": self.remote, "_fs": None}

    def path(self, name: str) -> str:
        """The full path or URL of ``name`` (for messages)."""
        return self.root.rstrip("/") + "/" + name if self.remote else os.path.join(self.root, name)

    def _fs_path(self, name: str):
        if self._fs is None or self._fs[0] != os.getpid():
            try:
                import fsspec
            except ImportError as e:
                raise ImportError(f"reading shards from {self.root!r} needs fsspec (pip install fsspec)") from e
            fs, root = fsspec.core.url_to_fs(self.root)
            self._fs = (os.getpid(), fs, root.rstrip("/"))
        _, fs, root = self._fs
        return fs, f"{root}/{name}"

    def size(self, name: str) -> int:
        """Size in bytes of a regular file; ``FileNotFoundError`` naming its path when missing."""
        try:
            if not self.remote:
                st = os.stat(self.path(name))
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(f"{self.path(name)!r} is not a regular file")
                return st.st_size
            fs, path = self._fs_path(name)
            return int(fs.info(path)["size"])
        except FileNotFoundError:
            raise FileNotFoundError(f"shard missing: {self.path(name)!r}") from None

    def read_all(self, name: str) -> bytes | None:
        """The file's bytes; ``None`` when it does not exist."""
        try:
            if not self.remote:
                with open(self.path(name), "rb") as f:
                    return f.read()
            fs, path = self._fs_path(name)
            return fs.cat_file(path)
        except FileNotFoundError:
            return None

    def read_range(self, name: str, start: int, length: int) -> bytearray:
        """``length`` bytes from ``start`` (fewer only where the file ends first)."""
        if self.remote:
            fs, path = self._fs_path(name)
            return bytearray(fs.cat_file(path, start=start, end=start + length))
        buf = bytearray(length)
        view = memoryview(buf)
        fd = os.open(self.path(name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
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
        if not self.remote:
            return open(self.path(name), "rb")
        fs, path = self._fs_path(name)
        return fs.open(path, "rb")

    def write_atomic(self, name: str, data: bytes) -> bool:
        """Write a local file via a temporary name; False where that is not possible."""
        if self.remote:
            return False
        path = self.path(name)
        tmp = f"{path}.{os.getpid()}.tmp"
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
    if stored not in (sum(header[:148]) + 256 + sum(header[156:]),
                      sum(b - 256 if b > 127 else b for b in header[:148]) + 256
                      + sum(b - 256 if b > 127 else b for b in header[156:])):
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
    keys: list[str] = []
    exts: list[str] = []
    offsets: list[int] = []
    sizes: list[int] = []
    targets: list[int] = []
    seen: set[str] = set()
    current: str | None = None
    image: tuple[str, int, int] | None = None
    cls: int | None = None

    def flush():
        if current is None:
            return
        if current in seen:
            raise ValueError(f"{shard}: the members of sample {current!r} are not adjacent")
        if cls is None:
            raise ValueError(f"{shard}: sample {current!r} has no .cls member")
        seen.add(current)
        keys.append(current)
        exts.append(None if image is None else image[0])
        offsets.append(0 if image is None else image[1])
        sizes.append(0 if image is None else image[2])
        targets.append(cls)

    try:
        tar = tarfile.open(fileobj=fileobj, mode="r:")
    except tarfile.TarError as e:
        raise ValueError(f"{shard}: not a readable tar file ({e})") from e
    with tar:
        try:
            for m in tar:
                if not m.isfile():
                    continue
                key, ext = split_member_name(m.name)
                if key is None or ext is None:
                    continue
                if key != current:
                    flush()
                    current, image, cls = key, None, None
                if ext.lower() in IMAGE_EXTENSIONS and image is None:
                    image = (ext, m.offset_data, m.size)
                elif ext.lower() == "cls":
                    fileobj.seek(m.offset_data)
                    text = fileobj.read(min(m.size, 64))
                    try:
                        cls = int(text.decode("ascii").strip())
                    except (UnicodeDecodeError, ValueError):
                        raise ValueError(f"{shard}: {m.name!r} is not an integer class index: {text[:20]!r}") \
                            from None
        except tarfile.TarError as e:
            raise ValueError(f"{shard}: unreadable tar headers after {len(keys)} samples ({e})") from e
        flush()
    return {"format": FORMAT + "-index", "version": FORMAT_VERSION, "shard": shard, "keys": keys,
            "extensions": exts, "offsets": offsets, "sizes": sizes, "targets": targets}


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
    if manifest.get("num_samples") != sum(e["num_samples"] for e in shards):
        raise ValueError(f"{path!r}: num_samples={manifest.get('num_samples')!r} but the shards hold "
                         f"{sum(e['num_samples'] for e in shards)} samples")
    return manifest


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
    columns = ("keys", "extensions", "offsets", "sizes", "targets")
    if not all(isinstance(index.get(c), list) and len(index[c]) == n for c in columns):
        raise bad(f"the manifest lists {n} samples; every column ({', '.join(columns)}) must have that many")
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


class ShardDataset(JpegDataset):
    """The samples of a shard directory (``python -m fastprep.pack SRC DST --format wds``),
    read with random access.

    Sample ``i`` is the ``i``-th sample of the shards in order -- the source folder's
    sorted order, so with the same ``seed`` (and the same sampler) the samples equal those
    of ``JpegFolder(SRC)``: the packed bytes decode to the original pixels. Each sample is
    one byte-range read located by the shard's member index; shuffling is global.

    Args:
        root: the shard directory: a local path or an fsspec URL (``file://``, ``s3://``,
            ...; needs fsspec and the filesystem's package).
        transform, on_error, **kwargs: as :class:`JpegDataset` (``max_skip_attempts``,
            ``max_pixels``, ``jpeg_only``, ``apply_exif_orientation``, ``seed``).

    Attributes:
        classes, class_to_idx: as :class:`JpegFolder` (from the manifest).
        shards: the shard paths (or URLs), in order.
        files: per sample, ``"<shard file name>:<key>"`` -- the name error messages use.

    Bad data: a sample whose bytes lie past the end of a truncated shard, whose tar header
    is damaged, that has no image member, or whose image does not decode raises
    :class:`fastprep.io.DecodeError` naming the shard and the key (or is replaced, with
    ``on_error="skip"``). A truncated shard also warns once when the dataset is opened.

    Raises:
        FileNotFoundError: no manifest, or a shard listed in it is missing (its path is named).
        ValueError: the manifest, an index or a shard do not match one another (wrong
            counts, offsets out of order or out of bounds, a shard larger than recorded, a
            tar header that names another member) -- at open, or when the sample is read.
    """

    def __init__(self, root, transform=None, on_error: str = "raise", **kwargs):
        self.root = os.fspath(root)
        self._storage = _Storage(self.root)
        manifest = _load_manifest(self._storage)
        self.classes = list(manifest["classes"])
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._shard_names = [entry["name"] for entry in manifest["shards"]]
        self.shards = [self._storage.path(name) for name in self._shard_names]
        names, targets, shard_ids, offsets, sizes, exts = [], [], [], [], [], []
        truncated = []
        for shard_id, entry in enumerate(manifest["shards"]):
            size = self._storage.size(entry["name"])
            if size > entry["bytes"]:
                raise ValueError(f"shard {self.shards[shard_id]!r} has {size} bytes, the manifest records "
                                 f"{entry['bytes']}: the manifest does not match the shards (re-run fastprep.pack)")
            if size < entry["bytes"]:
                truncated.append(f"{self.shards[shard_id]!r} ({size} of {entry['bytes']} bytes)")
            index = self._load_index(entry, len(self.classes))
            names += [f"{entry['name']}:{k}" for k in index["keys"]]
            exts += index["extensions"]
            targets += index["targets"]
            offsets += index["offsets"]
            sizes += index["sizes"]
            shard_ids += [shard_id] * entry["num_samples"]
        if truncated:
            warnings.warn(f"truncated shards: {', '.join(truncated)}; their samples past the end fail "
                          "(DecodeError, or skipped with on_error='skip')", UserWarning, stacklevel=2)
        self._shard_ids = np.asarray(shard_ids, dtype=np.int32)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._extensions = exts
        # Shards the native reader can name (a path torch passes as UTF-8 without a NUL).
        self._native_shard = [_utf8_path(path) for path in self.shards]
        super().__init__(names, targets, transform, on_error, **kwargs)

    def _load_index(self, entry: dict, num_classes: int) -> dict:
        """The shard's member index: its side file, or a scan of the tar (then cached)."""
        where = f"index {self._storage.path(entry['index'])!r}"
        raw = self._storage.read_all(entry["index"])
        if raw is not None:
            try:
                index = json.loads(raw)
            except ValueError as e:
                raise ValueError(f"{where} is not valid JSON: {e}") from None
        else:
            shard_path = self._storage.path(entry["name"])
            try:
                with self._storage.open(entry["name"]) as f:
                    index = scan_shard(f, entry["name"])
            except FileNotFoundError:
                raise FileNotFoundError(f"shard missing: {shard_path!r}") from None
            if len(index["keys"]) != entry["num_samples"]:
                raise ValueError(f"shard {shard_path!r} holds {len(index['keys'])} samples, the manifest "
                                 f"records {entry['num_samples']}: the manifest does not match the shards")
            where = f"the scan of {shard_path!r}"
            self._storage.write_atomic(entry["index"], json.dumps(index, separators=(",", ":")).encode())
        _check_index(index, entry, num_classes, where)
        return index

    def read_encoded(self, index: int) -> tuple[torch.Tensor, str]:
        """``(image bytes as a uint8 1-D tensor, "<shard>:<key>")`` of sample ``index``: one
        range read covering the member's tar header (checked against the index) and data.

        Raises:
            OSError: the shard cannot be read, ends before the member (truncated), its
                header is damaged, or the sample has no image member.
            ValueError: the tar header there describes another member (a stale index).
        """
        name = self.files[index]
        ext = self._extensions[index]
        if ext is None:
            raise OSError(f"sample has no image member (none of .{', .'.join(IMAGE_EXTENSIONS)})")
        shard_id = int(self._shard_ids[index])
        member = f"{name.split(':', 1)[1]}.{ext}"
        offset, size = int(self._offsets[index]), int(self._sizes[index])
        data = self._storage.read_range(self._shard_names[shard_id], offset - _BLOCK, size + _BLOCK)
        if len(data) < size + _BLOCK:
            raise OSError(f"shard {self.shards[shard_id]!r} ends before the end of member {member!r} (truncated; "
                          f"needs {offset + size} bytes)")
        why = _check_header(bytes(data[:_BLOCK]), member, size)
        if why == "checksum":
            raise OSError(f"damaged tar header (bad checksum) before member {member!r} in {self.shards[shard_id]!r}")
        if why is not None:
            raise ValueError(f"the index does not match shard {self.shards[shard_id]!r}: {why}")
        return torch.frombuffer(data, dtype=torch.uint8, offset=_BLOCK) if size else \
            torch.empty(0, dtype=torch.uint8), name

    def read_encoded_batch(self, indices) -> list[tuple[torch.Tensor | Exception, str]]:
        """:meth:`read_encoded` for several samples, as :meth:`JpegDataset.read_encoded_batch`.

        On local shards the members are read and their tar headers checked in one native
        call that releases the GIL (``torch.ops.fastprep.read_tar_members``, each shard
        opened once per call); a sample it does not accept, and every sample of a remote
        (fsspec) directory, goes through :meth:`read_encoded`, which names the error.
        """
        indices = list(indices)
        if self._storage.remote or type(self).read_encoded is not ShardDataset.read_encoded:
            return [self._read_or_error(i) for i in indices]
        native = [j for j, i in enumerate(indices) if self._extensions[i] is not None
                  and self._native_shard[self._shard_ids[i]]]
        shards, offsets, sizes, members = [], [], [], []
        for j in native:
            i = indices[j]
            shard_id = int(self._shard_ids[i])
            member = f"{self.files[i].split(':', 1)[1]}.{self._extensions[i]}"
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

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root!r}, samples={len(self.files)}, shards={len(self.shards)}, "
                f"transform={self.transform!r}, on_error={self.on_error!r})")
