"""``python -m fastprep.pack SRC DST --format wds``: an image folder packed into WebDataset tar
shards that :class:`fastprep.data.ShardDataset` reads with random access (docs/pack.md)."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import re
import sys
import tarfile
import warnings

from ._common import _TMP_SUFFIX, PackSummary, _check_options, _init_worker, _transcode, _walk, account, write_atomic

__all__ = ["DEFAULT_SHARD_SIZE", "pack_shards", "parse_size", "sample_key"]

#: ``--shard-size`` default: 1 GB (10**9 bytes).
DEFAULT_SHARD_SIZE = 10**9
_SHARD_FILE = re.compile(r"^shard-(\d{6})\.(tar|idx\.json)$")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 10**3, "m": 10**6, "g": 10**9}
_END_OF_ARCHIVE = 2 * 512


def parse_size(text) -> int:
    """Bytes from an int or a text like ``"1GB"``, ``"500 MB"``, ``"2GiB"``, ``"123"`` (KB/MB/GB/TB
    are powers of 1000, KiB/MiB/GiB/TiB powers of 1024).

    Raises:
        ValueError: not a size, or under 1 byte.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"shard size must be a number of bytes with an optional unit (KB, MB, GB, KiB, "
                             f"MiB, GiB), got {text!r}")
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value < 1:
        raise ValueError(f"shard size must be >= 1 byte, got {text!r}")
    return value


def sample_key(rel: str) -> str:
    """The WebDataset key of the file at relative path ``rel``: the path without its
    extension, ``/``-separated, with ``%`` and ``.`` in the file name escaped as ``%25`` and
    ``%2E`` (WebDataset ends the key at the first dot of the basename; the escape is
    reversible, so distinct names keep distinct keys). ``"cat/x.v2.jpg"`` -> ``"cat/x%2Ev2"``."""
    parts = rel.replace(os.sep, "/").split("/")
    stem = os.path.splitext(parts[-1])[0] or parts[-1]
    parts[-1] = stem.replace("%", "%25").replace(".", "%2E")
    return "/".join(parts)


def _shard_name(number: int, kind: str = "tar") -> str:
    return f"shard-{number:06d}.{kind}"


def _list_samples(src: str):
    """``(classes, [(relative path, target)], [relative paths of other files])`` as
    JpegFolder lists ``src``."""
    from fastprep.data import JpegFolder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # image files JpegFolder leaves out are listed as not samples
        try:
            folder = JpegFolder(src)
        except FileNotFoundError as e:
            raise ValueError(f"nothing to pack: {e}") from None
    samples = [(os.path.relpath(path, src), target) for path, target in folder.samples]
    listed = {rel for rel, _ in samples}
    others = [rel for rel in _walk(src, src) if rel not in listed]
    return folder.classes, samples, others


def _check_keys(samples) -> list[str]:
    keys: list[str] = []
    seen: dict[str, str] = {}
    for rel, _ in samples:
        key = sample_key(rel)
        if key in seen:
            raise ValueError(f"{seen[key]!r} and {rel!r} would share the WebDataset key {key!r} (same name "
                             "without extension in one folder): rename one")
        seen[key] = rel
        keys.append(key)
    return keys


def _read_and_transcode(job):
    """Worker: (path, options) -> (kind, bytes, input size, reason); kind as in pack_folder."""
    from fastprep.data._files import read_regular

    path, opts = job
    try:
        data = read_regular(path)  # a FIFO swapped in after the listing is refused, not read
    except OSError as e:
        return "error", b"", 0, f"cannot read: {e}"
    kind, out, reason = _transcode(data, opts)
    return kind, out, len(data), reason


class _ShardWriter:
    """Writes one shard to a temporary name; :meth:`finish` renames it and writes its index."""

    def __init__(self, dst: str, number: int, options: dict):
        self.dst, self.number, self.options = dst, number, options
        self.name = _shard_name(number)
        self.tmp = os.path.join(dst, f"{self.name}.{os.getpid()}{_TMP_SUFFIX}")
        self.tar = tarfile.open(self.tmp, "w", format=tarfile.PAX_FORMAT)
        self.index: dict[str, list] = {"keys": [], "extensions": [], "offsets": [], "sizes": [], "targets": []}
        self.sources: list = []

    @property
    def num_samples(self) -> int:
        return len(self.index["keys"])

    def _info(self, name: str, size: int, mtime: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, mtime, 0o644
        return info

    def projected(self, key: str, ext: str, size: int) -> int:
        """The shard's file size if the sample (``size`` image bytes) were added and the shard closed."""
        end = self.tar.offset
        for name, n in ((f"{key}.{ext}", size), (f"{key}.cls", 4)):
            end += len(self._info(name, n, 0).tobuf(self.tar.format, self.tar.encoding, self.tar.errors))
            end += -(-n // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        return -(-(end + _END_OF_ARCHIVE) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE

    def add(self, key: str, ext: str, data: bytes, target: int, mtime: int):
        self.tar.addfile(self._info(f"{key}.{ext}", len(data), mtime), io.BytesIO(data))
        offset = self.tar.offset - -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE  # where the data starts
        label = str(target).encode()
        self.tar.addfile(self._info(f"{key}.cls", len(label), mtime), io.BytesIO(label))
        for column, value in zip(("keys", "extensions", "offsets", "sizes", "targets"),
                                 (key, ext, offset, len(data), target)):
            self.index[column].append(value)

    def finish(self) -> dict:
        """Close, rename into place, write the index; the manifest's entry for this shard."""
        from fastprep.data.shards import FORMAT, FORMAT_VERSION, index_digest

        self.tar.close()
        path = os.path.join(self.dst, self.name)
        os.replace(self.tmp, path)
        size = os.path.getsize(path)
        index = {"format": FORMAT + "-index", "version": FORMAT_VERSION, "shard": self.name, **self.index,
                 "pack": {"options": self.options, "bytes": size, "sources": self.sources}}
        index_name = _shard_name(self.number, "idx.json")
        _write_json(os.path.join(self.dst, index_name), index)
        return {"name": self.name, "index": index_name, "num_samples": self.num_samples, "bytes": size,
                "digest": index_digest(index)}

    def abandon(self):
        try:
            self.tar.close()
        except (OSError, ValueError):
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _write_json(path: str, obj) -> None:
    write_atomic(path, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _kept_shards(dst: str, sources, targets, options: dict):
    """The manifest entries and index pack states of the complete shards from an earlier run
    that still match the sources (in order, from the first shard; stops at the first that
    does not)."""
    from fastprep.data._files import read_regular
    from fastprep.data.shards import index_digest

    kept: list = []
    position = 0
    while True:
        index_path = os.path.join(dst, _shard_name(len(kept), "idx.json"))
        try:
            index = json.loads(read_regular(index_path).decode("utf-8"))
            state = index["pack"]
            shard_size = os.stat(os.path.join(dst, index["shard"])).st_size
            recorded = [tuple(s[:3]) for s in state["sources"]]
            digest = index_digest(index)
        except (OSError, ValueError, KeyError, TypeError):
            return kept
        n = len(recorded)
        if (index["shard"] != _shard_name(len(kept)) or state.get("options") != options
                or shard_size != state.get("bytes") or n == 0
                or recorded != sources[position:position + n]
                or any(s[3] == "error" for s in state["sources"])
                or index["targets"] != [targets[position + i] for i, s in enumerate(state["sources"])
                                        if s[3] != "failed-skipped"]):
            return kept
        kept.append(({"name": index["shard"], "index": _shard_name(len(kept), "idx.json"),
                      "num_samples": len(index["keys"]), "bytes": shard_size, "digest": digest}, state))
        position += n


def _clear_from(dst: str, first: int) -> None:
    """Delete the shards and indexes numbered >= ``first``, temporary files and the manifest."""
    from fastprep.data.shards import MANIFEST_NAME

    for name in os.listdir(dst):
        match = _SHARD_FILE.match(name)
        if name == MANIFEST_NAME or name.endswith(_TMP_SUFFIX) or (match and int(match.group(1)) >= first):
            os.unlink(os.path.join(dst, name))


def pack_shards(src: str | os.PathLike, dst: str | os.PathLike, *, shard_size=DEFAULT_SHARD_SIZE,
                workers: int | None = None, restart_interval: int | str = "auto", optimize: bool = True,
                keep_metadata: bool = True, on_error: str = "copy", max_pixels: int | None = None,
                force: bool = False, progress: bool = True):
    """Pack the images of ``src`` (listed as :class:`fastprep.data.JpegFolder` lists them)
    into WebDataset tar shards in ``dst``, in the folder's order.

    Each sample is ``<key>.jpg`` (the JPEG transcoded as :func:`fastprep.pack.pack_folder`
    does; other images keep their bytes and their own extension) and ``<key>.cls`` (the
    class index as text), the key being :func:`sample_key` of the relative path. A shard
    is closed when the next sample would take it past ``shard_size`` (a sample larger than
    that gets a shard of its own). ``dst`` then holds ``shard-NNNNNN.tar``, their member
    indexes ``shard-NNNNNN.idx.json`` and the manifest ``fastprep-shards.json``, written
    last, which pins each shard (``digest``: :func:`fastprep.data.shards.index_digest`).
    Resumable: the complete shards of an earlier run whose sources (paths, sizes,
    modification times, classes) and options are unchanged are kept, the rest redone.

    Args:
        src: an image folder (class subfolders, or flat).
        dst: the shard directory (created if missing; not inside ``src``).
        shard_size: bytes per shard (int or a text such as ``"1GB"``, see :func:`parse_size`).
        workers, restart_interval, optimize, keep_metadata, on_error, max_pixels, force,
        progress: as :func:`fastprep.pack.pack_folder`. ``on_error="copy"`` stores a corrupt
            JPEG (which cannot be transcoded) as it is; ``"skip"`` leaves it out of the shards
            (the sample order then differs from the folder's by that sample). A valid JPEG
            that cannot be transcoded losslessly is always stored as it is.

    Returns:
        A :class:`fastprep.pack.PackSummary`; files of ``src`` that are not samples are in
        ``not_samples``, the shards written and reused in ``shards`` and ``shards_reused``.

    Raises:
        ValueError: bad arguments, ``dst`` inside ``src``, no images, or two files whose keys
            would collide.
        OSError: ``dst`` cannot be written.
    """
    from fastprep.data.shards import FORMAT, FORMAT_VERSION, MANIFEST_NAME


    src, dst = os.fspath(src), os.fspath(dst)
    opts = _check_options(src, dst, workers, restart_interval, optimize, keep_metadata, on_error, max_pixels)
    real_src, real_dst = os.path.realpath(src), os.path.realpath(dst)
    if os.path.commonpath([real_src, real_dst]) == real_src:
        raise ValueError(f"dst must not be inside src for --format wds (it would become a class), got {dst!r}")
    shard_size = parse_size(shard_size)
    workers = workers or os.cpu_count() or 1
    classes, samples, others = _list_samples(src)
    keys = _check_keys(samples)
    targets = [t for _, t in samples]
    options = {**opts, "shard_size": shard_size}
    sources = []
    for rel, _ in samples:
        try:
            st = os.stat(os.path.join(src, rel))
            sources.append((rel, st.st_size, st.st_mtime_ns))
        except OSError:
            sources.append((rel, -1, -1))
    os.makedirs(dst, exist_ok=True)
    summary = PackSummary(files=len(samples) + len(others), not_samples=others)
    kept = [] if force else _kept_shards(dst, sources, targets, options)
    _clear_from(dst, len(kept))
    entries = [entry for entry, _ in kept]
    position = 0
    for _, state in kept:
        for rel, _, _, kind, reason in state["sources"]:
            if kind.startswith("failed"):
                summary.failed.append((rel, reason))
            elif kind == "kept":
                summary.kept.append((rel, reason))
        position += len(state["sources"])
    summary.up_to_date, summary.shards_reused = position, len(kept)
    todo = list(range(position, len(samples)))
    _write_shards(src, dst, todo, samples, keys, sources, options, workers, progress, entries, summary)
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, "classes": classes,
                "num_samples": sum(e["num_samples"] for e in entries), "shards": entries,
                "pack": {"options": options}}
    _write_json(os.path.join(dst, MANIFEST_NAME), manifest)
    summary.kept.sort()
    summary.failed.sort()
    summary.errors.sort()
    return summary


def _write_shards(src, dst, todo, samples, keys, sources, options, workers, progress, entries, summary):
    """Transcode the samples ``todo`` in parallel (results in order) and append them to new
    shards, numbered after ``entries``; each finished shard's entry is appended there."""
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="file", desc="fastprep.pack", file=sys.stderr, dynamic_ncols=True)
    jobs = [(os.path.join(src, samples[i][0]), options) for i in todo]
    pool = None
    if workers == 1 or len(jobs) <= 1:
        results = map(_read_and_transcode, jobs)
    else:
        ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        pool = ctx.Pool(min(workers, len(jobs)), initializer=_init_worker)
        results = pool.imap(_read_and_transcode, jobs, chunksize=4)
    writer = None
    try:
        for i, (kind, data, n_in, reason) in zip(todo, results):
            rel, target = samples[i]
            ext = "jpg" if data.startswith(b"\xff\xd8\xff") else os.path.splitext(rel)[1][1:].lower() or "bin"
            if writer is not None and writer.num_samples and kind not in ("error", "failed-skipped") and \
                    writer.projected(keys[i], ext, len(data)) > options["shard_size"]:
                entries.append(writer.finish())
                summary.shards += 1
                writer = None
            if writer is None:
                writer = _ShardWriter(dst, len(entries), options)
            if kind.startswith("failed"):
                reason += " (stored as-is)" if kind == "failed-copied" else " (left out)"
            account(summary, rel, kind, n_in, len(data), reason)
            writer.sources.append([*sources[i], kind, reason])
            if kind not in ("error", "failed-skipped"):
                mtime = max(0, sources[i][2] // 10**9)
                writer.add(keys[i], ext, data, target, mtime)
            if bar is not None:
                bar.update(1)
        if writer is not None and writer.num_samples:
            entries.append(writer.finish())
            summary.shards += 1
            writer = None
    finally:
        if writer is not None:
            writer.abandon()
        if pool is not None:
            pool.terminate()
            pool.join()
        if bar is not None:
            bar.close()
