"""WebDataset tars written by any tool, read with random access: :class:`TarDataset`,
:func:`is_tar_source`, :func:`expand_braces`, :func:`webdataset_split`.

A folder of ``.tar`` files, a list of tar paths or ``s3://`` URLs, or a brace pattern
(``train-{000000..000146}.tar``, as webdataset writes it) becomes a map-style dataset: the
tar headers are scanned once (only the headers and the small target members are read),
the member index is cached (beside the tars when their folder is writable, else under
``$FASTPREP_CACHE/tar-index/``) and each sample is then one range read. Samples are the ones
``webdataset.WebDataset(urls, shardshuffle=False)`` yields, in its order, with its keys.
See docs/sources.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import string
import tarfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from .. import _checks
from .._cache import cache_root
from ._tar import BLOCK, IMAGE_EXTENSIONS, Storage, TarSamples, TarWalk, class_index, read_member, write_atomic
from .objects import ObjectStore, endpoint_url, is_object_url, split_url
from .options import StorageOptions
from .shards import MANIFEST_NAME, is_shard_dir

__all__ = ["INDEX_DIR", "LeftOut", "TarDataset", "expand_braces", "is_tar_source", "tar_index_path", "webdataset_split"]

#: The hidden folder beside the tars where their member indexes are cached
#: (``<folder>/.fastprep-index/<tar file name>.json``).
INDEX_DIR = ".fastprep-index"
INDEX_FORMAT = "fastprep-tar-index"
INDEX_VERSION = 1
#: Target members read while scanning: a ``cls`` member of at most this many bytes ...
_CLS_LIMIT = 64
#: ... and a ``json`` member of at most this many (a larger one is not read: no target from it)
_JSON_LIMIT = 64 << 10
_COLUMNS = ("keys", "extensions", "offsets", "sizes", "targets")
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


# -- names -----------------------------------------------------------------------------


def webdataset_split(name: str) -> tuple[str | None, str | None]:
    """``(key, extension)`` of a tar member name by webdataset's rule (1.0.2,
    ``tariterators.base_plus_ext``): the key ends at the first dot of the basename, the
    extension is the rest (``"a/b.c.jpg"`` -> ``("a/b", "c.jpg")``). A basename that starts
    with a dot ends the key at the last slash when the folder before it has no dot
    (``"a/.x.jpg"`` -> ``("a/", "x.jpg")``). ``(None, None)`` where webdataset finds no key:
    a basename without a dot, ``".x.jpg"`` at the top, ``"a.b/.x.jpg"``.

    Unlike :func:`fastprep.data.shards.split_member_name` (the rule of fastprep's own
    shards, whose keys never start a basename with a dot), this follows webdataset in
    those corners too.
    """
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot > slash + 1:
        return name[:dot], name[dot + 1:]
    if dot == slash + 1 and slash >= 0 and "." not in name[name.rfind("/", 0, slash) + 1:slash]:
        return name[:slash + 1], name[dot + 1:]
    return None, None


def _is_meta(name: str) -> bool:
    """Members webdataset leaves out before grouping: ``__name__`` at the top of the tar, and
    anything in a top folder named ``__name__/``."""
    first, slash, _ = name.partition("/")
    return first.startswith("__") and first.endswith("__") and (not slash or len(first) >= 4)


def _last_extension(ext: str) -> str:
    """What decides a member's kind: the last dot-separated part of its extension, lower case
    (``"b.JPG"`` -> ``"jpg"``), as webdataset's decoders choose by it."""
    return ext.rsplit(".", 1)[-1].lower()


# -- brace patterns --------------------------------------------------------------------

_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")
#: the order of a range of letters: upper case first (``{X..b}`` is ``X Y Z a b``)
_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def expand_braces(pattern: str) -> list[str]:
    """The names a brace pattern stands for, in order, as the shell (and the braceexpand
    package webdataset uses) expands them.

    * ``{a,b,c}``: each alternative, left to right (empty ones too: ``x{,y}`` -> ``x``, ``xy``);
    * ``{0..146}``, ``{000000..000146}``: an integer range, ends included, zero-padded to the
      longer end when either end has a leading zero; ``{10..0}`` counts down;
      ``{0..10..2}``: a step (its sign ignored);
    * ``{a..e}``: a range of letters (with an optional step too), upper case before lower
      case (``{Y..b}``: ``Y Z a b``);
    * braces nest (``{a,b{1,2}}``), several expand as a product (the first one slowest);
    * ``\\{``, ``\\}``, ``\\,``: the character itself; ``{abc}``, ``{}``: left as they are.

    Raises:
        ValueError: unbalanced braces.
    """
    depth = 0
    for _, _, depth in _braces(pattern, 0):
        if depth < 0:
            break
    if depth != 0:
        raise ValueError(f"unbalanced braces in {pattern!r}")
    return [re.sub(r"\\(.)", r"\1", name) for name in _expand(pattern)]


def _braces(pattern: str, start: int):
    """``(index, character, depth after it)`` of each character of ``pattern`` from ``start``,
    an escaped one (``\\x``) left out."""
    depth = 0
    i = start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        depth += (c == "{") - (c == "}")
        yield i, c, depth
        i += 1


def _closing(pattern: str, start: int) -> tuple[int, list[int]]:
    """The index of the brace closing the one at ``start`` (a balanced pattern), and of its
    top-level commas."""
    commas = list[int]()
    for i, c, depth in _braces(pattern, start):
        if c == "}" and depth == 0:
            return i, commas
        if c == "," and depth == 1:
            commas.append(i)
    raise ValueError(f"unbalanced braces in {pattern!r}")


def _expand(pattern: str) -> list[str]:
    """:func:`expand_braces` of a balanced pattern, escapes kept."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] != "{":
            i += 1
            continue
        close, commas = _closing(pattern, i)
        inner = pattern[i + 1:close]
        if commas:
            bounds = [i] + commas + [close]
            options = [x for a, b in zip(bounds, bounds[1:]) for x in _expand(pattern[a + 1:b])]
        else:
            found = _range(inner)
            options = found if found is not None else ["{" + x + "}" for x in _expand(inner)]
        return [pattern[:i] + option + rest for option in options for rest in _expand(pattern[close + 1:])]
    return [pattern]


def _range(inner: str) -> list[str] | None:
    """The names of ``{inner}`` when it is a range (``0..9``, ``a..e``, with a step), else None."""
    found = _INT_RANGE.match(inner)
    if found:
        first, last, step = found.groups()
        width = max(len(first), len(last)) if any(
            end.lstrip("-").startswith("0") and end.lstrip("-") != "0" for end in (first, last)) else 0
        a, b = int(first), int(last)
        by = abs(int(step)) if step and int(step) else 1
        return [f"{n:0{width}d}" for n in (range(a, b + 1, by) if a <= b else range(a, b - 1, -by))]
    found = _CHAR_RANGE.match(inner)
    if found:
        first, last, step = found.groups()
        a, b = _LETTERS.index(first), _LETTERS.index(last)
        by = abs(int(step)) if step and int(step) else 1
        return [_LETTERS[n] for n in (range(a, b + 1, by) if a <= b else range(a, b - 1, -by))]
    return None


def _expand_source(source: str) -> list[str]:
    """The tar paths or URLs of a string source: webdataset's ``::``-separated list of
    patterns, each brace-expanded."""
    return [name for part in source.split("::") for name in expand_braces(part)]


def _is_tar_name(name: str) -> bool:
    return name.lower().endswith(".tar")


# -- what a source is ------------------------------------------------------------------


def is_tar_source(source, storage: StorageOptions | None = None) -> bool:
    """Whether :class:`TarDataset` reads ``source`` (what :func:`~fastprep.data.make_loader`
    asks before the other kinds of sources):

    * a string naming ``.tar`` files: one path or ``s3://`` URL ending in ``.tar``, a brace
      pattern (``train-{000000..000146}.tar``) or webdataset's ``::``-separated list of them,
      every name ending in ``.tar``;
    * a list (any sequence but a string) of paths or URLs all ending in ``.tar`` (decided by
      its first one);
    * a local folder holding ``.tar`` files at its top, no visible (non-dot) sub-folder --
      an ImageFolder tree has class folders -- and no ``fastprep-shards.json`` (a shard
      directory of ``fastprep.pack``: :class:`~fastprep.data.ShardDataset`);
    * an ``s3://`` prefix that is no shard directory (one ``GET`` of its manifest) and whose
      first listing page (up to 1,000 objects) holds ``.tar`` objects at its top and no
      object in a sub-folder.

    Raises:
        ValueError: a list starting with a ``.tar`` file and naming other files too.
    """
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if not isinstance(text, str):
            return False
        try:
            names = _expand_source(text)
        except ValueError:
            return False
        if names != [text]:
            return all(map(_is_tar_name, names))
        if is_object_url(text):
            if _is_tar_name(text):
                return True
            if is_shard_dir(text, storage):
                return False
            listed = [name for name, _, _ in ObjectStore(text, storage).list_versions(limit=1000)]
            return any("/" not in n and _is_tar_name(n) for n in listed) and \
                not any("/" in n and not n.startswith(".") for n in listed)
        if "://" in text:
            return False
        if _is_tar_name(text) and not os.path.isdir(text):
            return True
        return _is_tar_folder(text)
    if isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray)) and len(source) > 0 \
            and all(isinstance(s, (str, os.PathLike)) for s in source):
        first = os.fspath(source[0])
        if not (isinstance(first, str) and _is_tar_name(first)):
            return False  # image files (a long list: not walked here)
        names = [os.fspath(s) for s in source]
        flags = [isinstance(n, str) and _is_tar_name(n) for n in names]
        if all(flags):
            return True
        if any(flags):
            other = names[flags.index(False)]
            raise ValueError(f"the list mixes .tar files with other files ({other!r}): pass either tars "
                             "(TarDataset) or image files (JpegDataset)")
    return False


def _is_tar_folder(path: str) -> bool:
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    if any(e.name == MANIFEST_NAME for e in entries):
        return False
    if any(not e.name.startswith(".") and e.is_dir() for e in entries):
        return False
    return any(_is_tar_name(e.name) and e.is_file() for e in entries)


# -- the index of one tar --------------------------------------------------------------


def _sample(fileobj, key: str, members: list[tarfile.TarInfo]) -> tuple | str:
    """``(image extension, data offset, size, target or None)`` of one sample, or why it is
    not one."""
    image: tarfile.TarInfo | None = None
    cls: tarfile.TarInfo | None = None
    meta: tarfile.TarInfo | None = None
    seen: set[str] = set()
    for m in members:
        ext = m.name[len(key) + 1:]
        if ext.lower() in seen:
            return f"two members with extension .{ext.lower()} (webdataset refuses such a sample)"
        seen.add(ext.lower())
        kind = _last_extension(ext)
        if kind in IMAGE_EXTENSIONS and image is None:
            image = m
        elif kind == "cls" and cls is None:
            cls = m
        elif kind == "json" and meta is None:
            meta = m
    if image is None:
        return (f"no image member (none of .{', .'.join(IMAGE_EXTENSIONS)}; its members: "
                f"{', '.join('.' + m.name[len(key) + 1:] for m in members)})")
    target: int | None = None
    if cls is not None:
        text = read_member(fileobj, cls, _CLS_LIMIT + 1)
        try:
            if len(text) > _CLS_LIMIT:
                raise ValueError
            target = class_index(text)
        except ValueError:
            return f"{cls.name!r} is not an integer class index: {text[:20]!r}"
        if target < 0:
            return f"{cls.name!r} holds a negative class index ({target})"
    elif meta is not None and meta.size <= _JSON_LIMIT:
        target = _json_target(read_member(fileobj, meta, _JSON_LIMIT))
    return image.name[len(key) + 1:], image.offset_data, image.size, target


def _json_target(data: bytes) -> int | None:
    """The target in a ``json`` member: a plain int >= 0, or an object's ``"label"`` (else its
    ``"cls"``) when that is an int >= 0; ``None`` for anything else."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if isinstance(value, dict):
        value = next((value[k] for k in ("label", "cls") if _is_target(value.get(k))), None)
    return value if _is_target(value) else None


def _is_target(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _compression(head: bytes) -> str | None:
    return next((name for magic, name in _COMPRESSED if head.startswith(magic)), None)


def scan_tar(fileobj, tar: str, size: int) -> dict:
    """The member index of a tar: its samples, the ones it cannot use and why, and whether
    its headers end as a tar ends. Reads the tar headers (seeking over the data) and each
    sample's target member.

    Samples are grouped as webdataset groups them (:func:`webdataset_split`, consecutive
    members sharing a key; its ``__name__`` members left out). Per sample: the image is the
    first member whose extension ends in one of :data:`~fastprep.data.shards.IMAGE_EXTENSIONS`
    (case-insensitive: ``.JPEG``, ``.b.jpg``); the target the integer in its ``cls`` member,
    else in its ``json`` member (a plain int, or an object's int ``"label"`` or ``"cls"``),
    else ``None``.

    Args:
        fileobj: the tar, opened for binary reading (seekable).
        tar: its path or URL, in the index and in messages.
        size: its size in bytes.

    Returns:
        ``{"format", "version", "tar", "keys", "extensions", "offsets", "sizes", "targets",
        "bad": [[key, why], ...], "damage": None or why the tar ends early}`` -- without
        ``"stamp"``, which :class:`TarDataset` adds. A damaged or truncated tar keeps the
        samples before the damage, the one it may have cut short left out.
    """
    index: dict = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "tar": tar,
                   **{c: [] for c in _COLUMNS}, "bad": [], "damage": None}
    walk = TarWalk(fileobj, tar, split=webdataset_split, skip=_is_meta)
    mark = (0, 0)  # the lengths of the columns and of "bad" before the last sample
    try:
        for key, members in walk:
            mark = (len(index["keys"]), len(index["bad"]))
            found = _sample(fileobj, key, members)
            if isinstance(found, str):
                index["bad"].append([key, found])
                continue
            for column, value in zip(_COLUMNS, (key,) + found):
                index[column].append(value)
        damage = _tail(fileobj, walk, size)
        if damage is not None:  # the last sample's members may go on past the damage
            for column in _COLUMNS:
                del index[column][mark[0]:]
            del index["bad"][mark[1]:]
    except ValueError as e:
        damage = _truncated(walk, size) or str(e).removeprefix(f"{tar}: ")
        if walk.data_end <= size and walk.last is not None and walk.end + BLOCK > size:
            damage = f"truncated: {size} bytes, cut after its member {walk.last!r}"  # before the next header
        if not walk.samples:
            fileobj.seek(0)
            kind = _compression(fileobj.read(8))
            if kind is not None:
                damage = (f"{kind}-compressed: a compressed tar cannot be read with random access; decompress it "
                          "(the index then reads the plain tar)")
    index["damage"] = damage
    return index


def _tail(fileobj, walk: TarWalk, size: int) -> str | None:
    """Why the tar does not end where its headers say (``None``: it does): the last member's
    data runs past the end of the file, or what follows it is neither a header nor the
    end-of-archive blocks (``tarfile`` takes such a block for the end)."""
    truncated = _truncated(walk, size)
    if truncated is not None:
        return truncated
    if walk.end >= size:
        return None  # ends after its last member, without end-of-archive blocks: complete
    fileobj.seek(walk.end)
    block = fileobj.read(BLOCK)
    if not block.strip(b"\0"):
        return None
    after = f"after member {walk.last!r}" if walk.last is not None else "at the start"
    if len(block) < BLOCK:
        return f"truncated inside the tar header at byte {walk.end} ({after})"
    return f"damaged: the block at byte {walk.end} ({after}) is not a valid tar header"


def _truncated(walk: TarWalk, size: int) -> str | None:
    if walk.data_end <= size:
        return None
    return f"truncated: {size} bytes, but its member {walk.last!r} ends at byte {walk.data_end}"


# -- the index cache -------------------------------------------------------------------


def tar_index_path(tar: str, *, beside: bool = True) -> str:
    """Where :class:`TarDataset` caches the member index of ``tar`` (a local path or an
    ``s3://`` URL): ``<folder>/.fastprep-index/<file name>.json`` beside a local tar
    (``beside=True``), else ``$FASTPREP_CACHE/tar-index/<hash>.json`` (default
    ``~/.cache/fastprep``), the hash a SHA-256 of the tar's absolute path, or of its URL
    and the S3 endpoint in use."""
    if beside and not is_object_url(tar):
        folder, name = os.path.split(os.path.abspath(tar))
        return os.path.join(folder, INDEX_DIR, name + ".json")
    ident = f"{endpoint_url() or ''}\0{tar}" if is_object_url(tar) else os.path.abspath(tar)
    return str(cache_root() / "tar-index" / (hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()
                                             + ".json"))


def _cached_index(locations: list[str], tar: str, stamp: dict) -> dict | None:
    """The first cached index among ``locations`` that is of ``tar`` as it is now (its
    ``stamp``) and well formed; ``None`` when there is none. An index beside its tar need
    only name a tar of the same file name (the folder may have been moved or copied with
    its times); one in the cache folder must name this very path or URL."""
    for path in locations:
        try:
            with open(path, "rb") as f:
                index = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(index, dict) or not isinstance(index.get("tar"), str):
            continue
        named = index["tar"]
        beside = os.path.basename(os.path.dirname(path)) == INDEX_DIR
        if (os.path.basename(named) == os.path.basename(tar) if beside else named == tar) \
                and _valid_index(index, stamp):
            return index
    return None


def _valid_index(index: dict, stamp: dict) -> bool:
    """Whether a cached index is of this format and of the tar as ``stamp`` describes it,
    its columns well formed."""
    if not (index.get("format") == INDEX_FORMAT and index.get("version") == INDEX_VERSION
            and index.get("stamp") == stamp):
        return False
    columns: list = [index.get(c) for c in _COLUMNS]
    if not all(isinstance(c, list) and len(c) == len(columns[0]) for c in columns):
        return False
    keys, exts, offsets, sizes, targets = columns
    bad, damage = index.get("bad"), index.get("damage")
    return (all(isinstance(k, str) for k in keys + exts)
            and all(_is_target(o) and _is_target(n) and o >= BLOCK and o + n <= stamp["size"]
                    for o, n in zip(offsets, sizes))
            and all(t is None or _is_target(t) for t in targets)
            and isinstance(bad, list) and all(isinstance(b, list) and len(b) == 2
                                              and all(isinstance(x, str) for x in b) for b in bad)
            and (damage is None or isinstance(damage, str)))


def _store_index(locations: list[str], index: dict) -> str | None:
    """Write ``index`` to the first of ``locations`` that takes it (its folder created);
    the path written, or ``None``."""
    data = json.dumps(index, separators=(",", ":")).encode()
    for path in locations:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError:
            continue
        if write_atomic(path, data):
            return path
    return None


class LeftOut(NamedTuple):
    """A sample (or a whole tar: ``key`` None) :class:`TarDataset` left out, and why
    (:attr:`TarDataset.left_out`)."""

    tar: str
    key: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.tar!r}: " + (self.reason if self.key is None else f"sample {self.key!r}: {self.reason}")


# -- the dataset -----------------------------------------------------------------------


class TarDataset(TarSamples):
    """The samples of WebDataset tars written by any tool (webdataset's ``TarWriter``,
    ``tarp``, ``tar`` itself), read with random access.

    Sample ``i`` is the ``i``-th sample ``webdataset.WebDataset(urls, shardshuffle=False)``
    yields from the same tars (its ``__key__`` and ``__url__``: :meth:`sample_key`), less the
    ones left out (below). Each is one range read of its image member (the 512-byte tar
    header before it is checked to name that member), so a sampler shuffles globally and
    every engine feature applies: shuffle, ``seed``, resuming, ``distributed=True``.

    Args:
        source: the tars, on disk or in ``s3://`` object storage (one bucket):

            * a folder: its ``.tar`` files (top level only), sorted by name;
            * an ``s3://`` prefix: the ``.tar`` objects directly under it, in the store's order
              (sorted bytewise);
            * a brace pattern, as webdataset takes them (``/data/train-{000000..000146}.tar``,
              ``s3://bucket/train-{0..9}.tar``; ``::`` separates several):
              :func:`expand_braces`;
            * a list (any sequence) of tar paths or ``s3://`` URLs, in that order.
        transform, on_error, **kwargs: as :class:`~fastprep.data.JpegDataset`
            (``max_skip_attempts``, ``max_pixels``, ``jpeg_only``, ``apply_exif_orientation``,
            ``seed``). ``on_error`` also decides what bad tars and samples do when the dataset
            opens (below).
        storage: :class:`~fastprep.data.StorageOptions` for ``s3://`` tars (``None``: the
            defaults; read with obstore, ``pip install 'fastprep[s3]'``).
        index_workers: threads scanning tars without a cached index (default: up to 8; a
            scan waits on I/O). A progress bar shows on a terminal when it takes over 2 s.

    Samples (webdataset's grouping): members whose names give the same key
    (:func:`webdataset_split`: ``n01440764_10026.JPEG`` -> key ``n01440764_10026``;
    ``a.b.jpg`` -> key ``a``, extension ``b.jpg``) and follow one another form one sample;
    ``__name__`` members (``__index__``), directories, links and names without an extension
    belong to none. The image is the sample's first member whose extension ends in ``.jpg
    .jpeg .png .ppm .bmp .pgm .tif .tiff .webp`` (any case). The target, read when the tar is
    indexed:

    * the sample's ``cls`` member (extension ending in ``.cls``): a decimal integer >= 0
      (ASCII, at most 64 bytes, whitespace around it allowed);
    * else its ``json`` member (at most 64 KiB): a plain integer >= 0, or an object whose
      ``"label"`` (else ``"cls"``) is one; any other JSON gives no target.

    When no sample of the whole set has a target, every target is 0 (:attr:`labelled` is
    False); otherwise a sample without one is a bad sample.

    Bad input, found when the tars are indexed: a file that is not a tar (a compressed tar is
    named as such: random access needs the plain tar), a damaged or truncated tar (its samples
    before the damage are kept, the one it may cut short is not), a sample without an image
    member, without a target (see above), with a ``cls`` member that is no integer, or with two
    members of one extension. ``on_error="raise"``: ``ValueError`` at open naming each tar and
    key; ``"skip"``: they are left out, listed in :attr:`left_out` and warned about once. Past
    that, a sample that fails when read (its tar changed since, an image that does not decode)
    raises :class:`fastprep.io.DecodeError` naming ``<tar>:<key>``, or is replaced as
    ``on_error="skip"`` replaces samples.

    The index (docs/sources.md): built by scanning the tar headers once, in threads, and cached
    per tar in ``<folder>/.fastprep-index/<tar name>.json`` when the folder is writable, else in
    ``$FASTPREP_CACHE/tar-index/`` (default ``~/.cache/fastprep/tar-index/``; always there for
    ``s3://``). A cached index is used only while its tar keeps the same size and
    modification time (``st_mtime_ns``), or on ``s3://`` the same size and ETag (its
    last-modified time where the listing has no ETag); otherwise the tar is scanned again.

    Attributes:
        tars: the tar paths or URLs, in order (also :attr:`shards`).
        files: per sample ``"<tar name>:<key>"``, the tar name relative to the tars' common
            folder -- the name error messages use.
        labelled: whether the targets come from the samples (else all 0).
        left_out: with ``on_error="skip"``, what was left out at open, as :class:`LeftOut`
            ``(tar path or URL, key or None for a whole tar, reason)`` tuples.

    Raises:
        FileNotFoundError: a tar, the folder or the bucket does not exist; no ``.tar`` file
            in the folder or under the prefix; no sample in any tar.
        OSError: a tar is not a regular file (a FIFO, a directory, a device).
        ValueError: bad tars or samples with ``on_error="raise"`` (above); a source naming
            files other than tars, several buckets, or mixing local paths and URLs.
    """

    def __init__(self, source, transform=None, on_error: str = "raise", storage: StorageOptions | None = None,
                 *, index_workers: int | None = None, **kwargs):
        #: the source as given (a list copied)
        self.root = os.fspath(source) if isinstance(source, (str, os.PathLike)) else list(source)
        _checks.on_error(on_error)
        root, names, objects = _locate_tars(source, storage)
        storage_ = Storage(root, storage, noun="tar", listing=objects)
        indexes = _indexes(storage_, names, index_workers)
        problems: list[LeftOut] = []
        for name, index in zip(names, indexes):
            path = storage_.path(name)
            problems += [LeftOut(path, key, why) for key, why in index["bad"]]
            if index["damage"] is not None:
                kept = f"; the {len(index['keys'])} samples before it are intact" if index["keys"] else ""
                problems.append(LeftOut(path, None, index["damage"] + kept))
        self.labelled = any(t is not None for index in indexes for t in index["targets"])
        files, targets, shard_ids, offsets, sizes, exts = [], [], [], [], [], []
        for shard_id, (name, index) in enumerate(zip(names, indexes)):
            for key, ext, offset, size, target in zip(*(index[c] for c in _COLUMNS)):
                if target is None and self.labelled:
                    problems.append(LeftOut(storage_.path(name), key, "no target (a .cls member, or a .json one "
                                             "holding an int or an int 'label'/'cls'), while other samples have one"))
                    continue
                files.append(f"{name}:{key}")
                targets.append(target or 0)
                shard_ids.append(shard_id)
                offsets.append(offset)
                sizes.append(size)
                exts.append(ext)
        self.left_out: list[LeftOut] = []
        if problems:
            listed = "; ".join(map(str, problems[:5])) + (f"; and {len(problems) - 5} more" if len(problems) > 5
                                                           else "")
            if on_error != "skip":
                raise ValueError(f"bad tars or samples: {listed} (on_error='skip' leaves them out)")
            self.left_out = problems
            warnings.warn(f"TarDataset left out {len(problems)} bad tars or samples: {listed} (all of them in "
                          "dataset.left_out)", UserWarning, stacklevel=2)
        if not files:
            raise FileNotFoundError(f"no samples in the tars of {self.root!r}"
                                    + (" (all left out: dataset.left_out)" if problems else ""))
        self._locate(storage_, names, shard_ids, offsets, sizes, exts)
        super().__init__(files, targets, transform, on_error, **kwargs)

    @property
    def tars(self) -> list[str]:
        """The tar paths or URLs, in order."""
        return self.shards

    def sample_key(self, index: int) -> tuple[str, str]:
        """``(tar path or URL, key)`` of sample ``index``: webdataset's ``__url__`` and
        ``__key__`` of the same sample (``__url__`` as given to it: the path or URL here)."""
        shard_id = int(self._shard_ids[index])
        return self.shards[shard_id], self.files[index][self._key_starts[shard_id]:]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root!r}, samples={len(getattr(self, 'files', ()))}, "
                f"tars={len(getattr(self, 'shards', ()))}, "
                f"transform={self.transform!r}, on_error={self.on_error!r})")


def _locate_tars(source, storage: StorageOptions | None) -> tuple[str, list[str], dict | None]:
    """``(root, tar names relative to it, s3:// listing or None)`` of a source."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if isinstance(source, str):
        urls = _expand_source(source)
        if urls == [source] and (not _is_tar_name(source) or os.path.isdir(source)):
            return _folder(source, storage)
    elif isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray)):
        urls = [os.fspath(s) for s in source]
    else:
        raise TypeError(f"source must be a folder, a brace pattern or a list of tar paths or URLs, "
                        f"got {type(source).__name__}")
    if not urls:
        raise FileNotFoundError("no tars given (an empty list)")
    bad = [u for u in urls if not isinstance(u, str) or not _is_tar_name(u)]
    if bad:
        raise ValueError(f"not a .tar file: {bad[0]!r} (TarDataset reads uncompressed .tar files)")
    remote = [is_object_url(u) for u in urls]
    if any(remote):
        if not all(remote):
            raise ValueError("the tars mix local paths and s3:// URLs; give one kind")
        buckets = {split_url(u)[0] for u in urls}
        if len(buckets) > 1:
            raise ValueError(f"the tars are in several buckets ({', '.join(sorted(buckets))}); give one bucket's")
        keys = [split_url(u)[1] for u in urls]
        folders = [posixpath.dirname(k) for k in keys]
        common = posixpath.commonpath(folders) if all(folders) else ""
        root = f"s3://{buckets.pop()}/" + (f"{common}/" if common else "")
        store = ObjectStore(root, storage)
        listing = {name: (size, tag) for name, size, tag in store.list_versions()}
        return root, [k[len(common) + 1:] if common else k for k in keys], listing
    if storage is not None:
        raise ValueError(f"storage= configures s3:// tars; the tars are local ({urls[0]!r})")
    if any("://" in u for u in urls):
        raise ValueError(f"TarDataset reads local paths and s3:// URLs, got {next(u for u in urls if '://' in u)!r}")
    paths = [os.path.abspath(u) for u in urls]
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    return root, [os.path.relpath(p, root) for p in paths], None


def _folder(source: str, storage: StorageOptions | None) -> tuple[str, list[str], dict | None]:
    """:func:`_locate_tars` of a local folder or an ``s3://`` prefix."""
    if is_object_url(source):
        store = ObjectStore(source, storage)
        listing = {name: (size, tag) for name, size, tag in store.list_versions()}
        names = [n for n in listing if "/" not in n and _is_tar_name(n)]
        if not names:
            raise FileNotFoundError(f"no .tar objects directly under {store.url!r}")
        return store.url, names, listing
    if storage is not None:
        raise ValueError(f"storage= configures s3:// tars; {source!r} is local")
    if "://" in source:
        raise ValueError(f"TarDataset reads local paths and s3:// URLs, got {source!r}")
    source = os.path.abspath(source)
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such folder: {source!r}") from None
    except NotADirectoryError:
        raise ValueError(f"not a folder of tars, a .tar file or a pattern: {source!r}") from None
    names = [e.name for e in entries if _is_tar_name(e.name) and e.is_file()]
    if not names:
        raise FileNotFoundError(f"no .tar files in {source!r}")
    return source, names, None


def _indexes(storage: Storage, names: list[str], workers: int | None) -> list[dict]:
    """The member index of each tar: cached, or scanned (in threads) and cached."""
    distinct = list(dict.fromkeys(names))
    stamps, missing = {}, []
    for name in distinct:
        try:
            stamps[name] = storage.stamp(name)
        except FileNotFoundError:
            missing.append(storage.path(name))
    if missing:
        more = f" and {len(missing) - 1} more (to {missing[-1]!r})" if len(missing) > 1 else ""
        raise FileNotFoundError(f"tar missing: {missing[0]!r}{more}")
    found: dict[str, dict] = {}
    todo = []
    for name in distinct:
        path = storage.path(name)
        index = _cached_index(_locations(path), path, stamps[name])
        if index is None:
            todo.append(name)
        else:
            found[name] = index

    def scan(name: str) -> dict:
        path = storage.path(name)
        with storage.open(name) as f:
            index = scan_tar(f, path, stamps[name]["size"])
        index["stamp"] = stamps[name]
        _store_index(_locations(path), index)
        return index

    if todo:
        from .._progress import progress_bar

        threads = max(1, min(len(todo), workers if workers is not None else 8))
        bar = progress_bar(len(todo), desc="fastprep: indexing tars", unit="tar", delay=2.0)
        try:
            with ThreadPoolExecutor(threads, thread_name_prefix="fastprep-tar-index") as pool:
                for name, index in zip(todo, pool.map(scan, todo)):
                    found[name] = index
                    bar.update()
        finally:
            bar.close()
    return [found[name] for name in names]


def _locations(path: str) -> list[str]:
    """Where the index of the tar at ``path`` may be cached, in the order tried."""
    places = [] if is_object_url(path) else [tar_index_path(path)]
    return places + [tar_index_path(path, beside=False)]
