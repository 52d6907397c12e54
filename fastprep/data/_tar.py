"""The tar reading shared by :class:`~fastprep.data.ShardDataset` (fastprep's own packs) and
:class:`~fastprep.data.TarDataset` (WebDataset tars written by other tools): the storage a
folder of tars is read from (:class:`Storage`), a walk over a tar's headers grouping members
into samples as WebDataset does (:class:`TarWalk`, :func:`split_member_name`), the checks of
a member's header before its bytes are trusted (:func:`check_header`), and the dataset base
that reads one sample as one byte range (:class:`TarSamples`).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ._files import NotRegularFileError, file_kind, open_regular
from .datasets import JpegDataset
from .objects import ObjectStore, ReadAhead, is_object_url
from .options import StorageOptions

#: Member extensions (lower case) taken as a sample's image: JpegFolder's default list.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp")

#: A tar block: headers and padded member data come in these.
BLOCK = 512
#: Header type flags of a regular file (old, POSIX, contiguous).
_REGULAR_TYPES = (b"0", b"\0", b"7")


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


def has_scheme(path: str) -> bool:
    return "://" in path


class Storage:
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
        self.remote = has_scheme(root)
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
        chunks of range reads as the reader moves through it (:class:`RangeFile`)."""
        if self.objects is not None:
            return RangeFile(self.objects, name, self.size(name))
        local = self._local(name)
        if local is not None:
            return os.fdopen(self._open_fd(local, name), "rb")
        fs, path = self._fs_path(name)
        return fs.open(path, "rb")

    def write_atomic(self, name: str, data: bytes) -> bool:
        """Write a local file via a temporary name; False where that is not possible."""
        return not self.remote and write_atomic(self.path(name), data)


def write_atomic(path: str, data: bytes) -> bool:
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


class RangeFile(io.RawIOBase):
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


def utf8_path(path: str) -> bool:
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


def check_header(header: bytes, member: str, size: int) -> str | None:
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


class TarWalk:
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
                    self.end = m.offset_data + -(-m.size // BLOCK) * BLOCK
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


def read_member(fileobj, member: tarfile.TarInfo, limit: int) -> bytes:
    """The first ``limit`` bytes of ``member``'s data."""
    fileobj.seek(member.offset_data)
    return fileobj.read(min(member.size, limit))


def class_index(text: bytes) -> int:
    """The integer in a ``cls`` member (decimal ASCII, surrounding whitespace allowed);
    ``ValueError`` when there is none."""
    try:
        return int(text.decode("ascii").strip())
    except UnicodeDecodeError:
        raise ValueError("not ASCII") from None


class TarSamples(JpegDataset):
    """Samples that are members of tar files, located by an index (:class:`ShardDataset`,
    :class:`~fastprep.data.TarDataset`): each is one range read of the member's tar header
    and data, the header checked against the index; a batch of local members is one native
    call, a batch on ``s3://`` has its reads in flight at once.

    A subclass builds its index, then calls :meth:`_locate`; ``files[i]`` must be
    ``"<name of its tar>:<key>"``.
    """

    _storage: Storage

    def _locate(self, storage: Storage, names: list[str], shard_ids, offsets, sizes,
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
        self._native_shard = [utf8_path(path) for path in self.shards]

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
        return int(self._shard_ids[index]), offset - BLOCK, size + BLOCK

    def _checked_member(self, index: int, data: bytearray) -> tuple[torch.Tensor, str]:
        """:meth:`read_encoded`'s answer from the bytes of :meth:`_member_range`, the tar
        header checked against the index."""
        name = self.files[index]
        shard_id = int(self._shard_ids[index])
        member = self._member_name(index)
        offset, size = int(self._offsets[index]), int(self._sizes[index])
        noun = self._storage.noun
        if len(data) < size + BLOCK:
            raise OSError(f"{noun} {self.shards[shard_id]!r} ends before the end of member {member!r} (truncated; "
                          f"needs {offset + size} bytes)")
        why = check_header(bytes(data[:BLOCK]), member, size)
        if why == "checksum":
            raise OSError(f"damaged tar header (bad checksum) before member {member!r} in {self.shards[shard_id]!r}")
        if why is not None:
            raise ValueError(f"the index does not match {noun} {self.shards[shard_id]!r}: {why}")
        return torch.frombuffer(data, dtype=torch.uint8, offset=BLOCK) if size else \
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
        if type(self).read_encoded is not TarSamples.read_encoded:
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

    def read_ahead(self, indices, *, budget_bytes: int, group: int, first: int | None = None) -> ReadAhead | None:
        """On ``s3://``, the epoch's range reads in order of ``indices``,
        issued ahead and coalesced where neighbours in the order are close in a tar
        (:class:`~fastprep.data.objects.ReadAhead`; its ``read_batch(positions)`` answers as
        :meth:`read_encoded_batch`; ``first``: as its ``first``); else ``None``."""
        objects = self._storage.objects
        if objects is None or type(self).read_encoded is not TarSamples.read_encoded \
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
                         ahead=4 * objects.options.max_in_flight, group=group, first=first)
