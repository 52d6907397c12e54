"""Training data in S3-compatible object storage: :class:`ObjectStore` (many requests in
flight, timeouts, bounded retries) and :class:`ObjectFolder` (a class-folder of images under
an ``s3://bucket/prefix/`` URL). :class:`~fastprep.data.ShardDataset` reads ``s3://`` shard
directories through :class:`ObjectStore` too. See docs/storage.md.

The client is obstore (Rust ``object_store``; ``pip install fastprep[s3]``): its requests run
on its own threads without the GIL, and one asyncio loop per process keeps up to
``StorageOptions.max_in_flight`` of them in flight; :class:`ReadAhead` issues an epoch's
reads in its order ahead of the threads engine's readers, neighbouring range reads
coalesced; :meth:`ObjectFolder.read_windows` reads of packed files only a crop window's
bytes (:mod:`fastprep.data.windows`). Credentials and the endpoint come from the standard AWS environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``; a plain ``http://`` endpoint is
allowed, for S3-compatible servers) and, when the environment has no key and boto3 is
installed, from boto3's chain (``~/.aws/config``, ``~/.aws/credentials``, SSO, ...). They are
never printed, never pickled (a worker or a copy of the dataset builds its own client) and
never part of a loader's ``state_dict``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import queue
import random
import re
import threading
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from .datasets import JpegDataset, folder_extensions, list_folder_keys
from .options import StorageOptions
from .windows import WINDOW_PREFIX, WindowLayout, header_end

__all__ = ["ObjectFolder", "ObjectStore", "ReadAhead", "is_object_url", "split_url"]

_SCHEME = "s3://"
#: the process whose obstore runtime has run (its threads do not survive a fork)
_runtime_pid: int | None = None
_PERMANENT_STATUS = re.compile(r"status code: 4(?!08|29)\d\d")
#: in obstore's message when its own retries of a request are spent
_CLIENT_RETRIES_SPENT = re.compile(r"max_retries: \d+")


def is_object_url(source) -> bool:
    """True for an ``s3://`` URL (a string)."""
    return isinstance(source, str) and source.startswith(_SCHEME)


def split_url(url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://bucket/prefix/`` (prefix without slashes at its ends).

    Raises:
        ValueError: not an ``s3://`` URL with a bucket.
    """
    if not is_object_url(url):
        raise ValueError(f"an object storage URL must start with {_SCHEME!r}, got {url!r}")
    bucket, _, prefix = url[len(_SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"the URL names no bucket: {url!r}")
    return bucket, prefix.strip("/")


def _obstore():
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError as e:
        raise ImportError("reading s3:// URLs needs obstore: pip install 'fastprep[s3]' (or pip install obstore)") \
            from e
    return obstore, S3Store


def endpoint_url() -> str | None:
    """The S3 endpoint the environment names (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``,
    ``AWS_ENDPOINT``, first set wins); ``None``: AWS's own."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
        if os.environ.get(name):
            return os.environ[name]
    return None


def _credential_kwargs() -> dict[str, Any]:
    """boto3's credential chain (config files, SSO, ...) when the environment has no key."""
    if os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_SKIP_SIGNATURE"):
        return {}
    if importlib.util.find_spec("boto3") is None:
        return {}
    try:
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return {}
    return {"credential_provider": Boto3CredentialProvider()}


def _is_permanent(error: BaseException) -> bool:
    """Errors a retry cannot fix: a missing object or bucket, a refused request (4xx except
    408 and 429). Everything else (5xx, SlowDown, timeouts, resets) is transient."""
    import obstore.exceptions as ox

    if isinstance(error, (ox.NotFoundError, ox.PermissionDeniedError, ox.UnauthenticatedError,
                          ox.InvalidPathError, ox.NotSupportedError, ox.UnknownConfigurationKeyError)):
        return True
    return bool(_PERMANENT_STATUS.search(str(error)))


def _short(error: BaseException) -> str:
    """The first line of a client error (obstore appends a multi-line debug dump)."""
    text = str(error).strip().split("\n", 1)[0]
    return text[:300] or type(error).__name__


_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None


def _process_loop() -> asyncio.AbstractEventLoop:
    """The asyncio loop this process's requests run on (one daemon thread, started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="fastprep-s3", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


class _Client:
    """One store's client in one process: the obstore store, the process's loop and the
    semaphore bounding the store's requests in flight."""

    def __init__(self, bucket: str, prefix: str, options: StorageOptions):
        obstore, S3Store = _obstore()
        self.obstore = obstore
        endpoint = endpoint_url()
        timeout = timedelta(seconds=options.timeout_s)
        client_options: dict[str, Any] = {"timeout": timeout, "connect_timeout": timedelta(seconds=min(5.0,
                                                                                                     options.timeout_s)),
                                          "allow_http": bool(endpoint and endpoint.startswith("http://")),
                                          "pool_max_idle_per_host": str(max(8, options.max_in_flight))}
        bundle = os.environ.get("AWS_CA_BUNDLE")
        if bundle:  # a private CA (a self-hosted server), trusted beside the system's, as boto3 does
            with open(bundle, "rb") as f:
                client_options["root_certificate"] = f.read()
        # obstore retries 5xx (SlowDown is a 503), connection errors, resets and timeouts with
        # exponential backoff and jitter, at most `retries` times and within `timeout_s` of the first try
        retry = {"max_retries": options.retries, "retry_timeout": timeout,
                 "backoff": {"init_backoff": timedelta(milliseconds=50), "max_backoff": timedelta(seconds=2),
                             "base": 2.0}}
        kwargs: dict[str, Any] = {"prefix": prefix or None, "client_options": client_options,
                                  "retry_config": retry, **_credential_kwargs()}
        if endpoint:
            kwargs["endpoint"] = endpoint
        elif not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            from ._native_s3 import region_of

            kwargs["region"] = region_of(None, bucket)  # AWS S3 itself: the bucket's region, as the native client's
        self.store = S3Store(bucket, **kwargs)
        self.loop = _process_loop()
        self.semaphore: asyncio.Semaphore | None = None  # created on the loop


class ObjectStore:
    """Reads the objects under one ``s3://bucket/prefix/`` URL, many requests at a time.

    Args:
        url: ``s3://bucket`` or ``s3://bucket/prefix/``; object names are relative to it.
        options: :class:`~fastprep.data.StorageOptions` (requests in flight, timeout,
            retries); ``None``: the defaults.

    Each request has a timeout (``timeout_s``, connection to last byte); transient failures
    (5xx, SlowDown, 429, timeouts, reset connections) are retried by the client with
    exponential backoff and jitter, at most ``retries`` times, and a body that fails
    mid-transfer is requested again, ``retries`` times at most. After that the request
    fails with an ``OSError`` naming the object's URL. :attr:`stats` counts requests,
    bytes received and this layer's retries. The client (and its credentials) is created
    lazily in each process and never pickled.
    """

    def __init__(self, url: str, options: StorageOptions | None = None):
        self.bucket, self.prefix = split_url(url)
        self.url = f"{_SCHEME}{self.bucket}/" + (f"{self.prefix}/" if self.prefix else "")
        self.options = options if options is not None else StorageOptions()
        if not isinstance(self.options, StorageOptions):
            raise TypeError(f"storage must be a StorageOptions or None, got {type(self.options).__name__}")
        _obstore()  # a missing client fails here, at construction, naming the extra
        self._client: tuple[int, _Client] | None = None
        self._native: tuple[int, Any, str] | None = None  # (pid, NativeClient or None, why not)
        self._slots: tuple[int, threading.BoundedSemaphore] | None = None  # the native calls' requests in flight
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {"requests": 0, "bytes": 0, "retries": 0, "in_flight": 0, "max_in_flight": 0,
                        "in_flight_sum": 0}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client"] = None
        state["_native"] = None
        state["_slots"] = None
        state["_lock"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def url_of(self, name: str) -> str:
        """The URL of object ``name`` (for messages)."""
        return self.url + name

    @property
    def stats(self) -> dict:
        """Counts in this process since construction (or :meth:`reset_stats`):
        ``requests`` (answered), ``bytes`` (received), ``retries`` (this layer's, after the
        client's own), ``max_in_flight`` and ``mean_in_flight`` (requests in flight, seen
        by each request as it starts)."""
        with self._lock:
            out: dict[str, float] = dict(self._counts)
        started = out.pop("started", 0) or 1
        out["mean_in_flight"] = out.pop("in_flight_sum") / started
        del out["in_flight"]
        return out

    def reset_stats(self) -> None:
        with self._lock:
            self._counts = {"requests": 0, "bytes": 0, "retries": 0, "in_flight": 0, "max_in_flight": 0,
                            "in_flight_sum": 0, "started": 0}

    def _add(self, counts: dict) -> None:
        """Adds a native call's counts to :attr:`stats`."""
        with self._lock:
            c = self._counts
            for key in ("requests", "bytes", "retries", "in_flight_sum"):
                c[key] += counts[key]
            c["started"] = c.get("started", 0) + counts["started"]
            c["max_in_flight"] = max(c["max_in_flight"], counts["max_in_flight"])

    def native(self):
        """This process's :class:`~fastprep.data._native_s3.NativeClient`, or ``None`` where
        obstore sends the requests (``storage.client``; :attr:`client_name` says why).

        Raises:
            ValueError: ``client="native"`` and the native client cannot read this endpoint.
        """
        with self._lock:
            if self._native is None or self._native[0] != os.getpid():
                if self.options.client == "obstore":
                    got: Any = "storage.client is 'obstore'"
                else:
                    from ._native_s3 import native_client

                    o = self.options
                    got = native_client(endpoint_url(), self.bucket, self.prefix, timeout_s=o.timeout_s,
                                        retries=o.retries, max_in_flight=o.max_in_flight)
                if isinstance(got, str) and self.options.client == "native":
                    raise ValueError(f"storage.client='native' cannot read {self.url!r}: {got}")
                self._native = (os.getpid(), None, got) if isinstance(got, str) else (os.getpid(), got, "")
            return self._native[1]

    def fetch_native(self, requests: list, concurrency: int | None = None) -> tuple[list, dict]:
        """The native client's answers to ``requests`` (``NativeClient.fetch``), with at most
        ``concurrency`` (default ``max_in_flight``) of them in flight, and never more than
        ``max_in_flight`` over all of this store's calls in this process. The requests go out
        in waves: each takes the slots that are free then (at least one, waiting for it) and
        sends that many requests, giving the slots back at its end; a call that started while
        others held most slots so takes more of them as they come free, instead of sending
        all of its requests through the few it found."""
        native = self.native()
        assert native is not None
        with self._lock:
            if self._slots is None or self._slots[0] != os.getpid():
                self._slots = (os.getpid(), threading.BoundedSemaphore(self.options.max_in_flight))
            slots = self._slots[1]
        requests = list(requests)
        answers: list = []
        counts = {"requests": 0, "bytes": 0, "retries": 0, "started": 0, "in_flight_sum": 0, "max_in_flight": 0}
        while len(answers) < len(requests):
            want = max(1, min(len(requests) - len(answers), concurrency or self.options.max_in_flight))
            slots.acquire()
            held = 1
            while held < want and slots.acquire(blocking=False):
                held += 1
            try:
                wave, got = native.fetch(requests[len(answers):len(answers) + held], self.url_of, held)
            finally:
                for _ in range(held):
                    slots.release()
            answers += wave
            for key, value in got.items():
                counts[key] = max(counts[key], value) if key == "max_in_flight" else counts[key] + value
        self._add(counts)
        return answers, counts

    @property
    def client_name(self) -> str:
        """``"native"``, or ``"obstore"`` with the reason the native client is not used."""
        if self.native() is not None:
            return "native"
        assert self._native is not None
        return f"obstore ({self._native[2]})"

    def _track(self, delta: int) -> None:
        with self._lock:
            c = self._counts
            c["in_flight"] += delta
            if delta > 0:
                c["started"] = c.get("started", 0) + 1
                c["in_flight_sum"] += c["in_flight"]
                c["max_in_flight"] = max(c["max_in_flight"], c["in_flight"])

    def client(self) -> _Client:
        """This process's client, created on first use.

        Raises:
            RuntimeError: this process was forked from one whose obstore client had run
                (obstore's runtime threads do not exist in the child: a request would
                never return).
        """
        global _runtime_pid
        with self._lock:
            if self._client is None or self._client[0] != os.getpid():
                if _runtime_pid is not None and _runtime_pid != os.getpid():
                    raise RuntimeError(f"cannot read {self.url!r} in a process forked after obstore ran in its "
                                       "parent (its runtime's threads do not survive fork): use make_loader's "
                                       "threads engine, or worker processes started by spawn or forkserver "
                                       "(make_loader picks them for s3:// sources unless multiprocessing_context "
                                       "says otherwise)")
                self._client = (os.getpid(), _Client(self.bucket, self.prefix, self.options))
                _runtime_pid = os.getpid()
            return self._client[1]

    def _run(self, make_coroutine):
        client = self.client()  # before the coroutine exists: a refused client leaves none unawaited
        future = asyncio.run_coroutine_threadsafe(make_coroutine(), client.loop)
        return future.result()

    def listing(self) -> list[tuple[str, int]]:
        """``(name, size)`` of every object under the URL, in the store's (byte) order,
        read page by page (``ListObjectsV2``).

        Raises:
            FileNotFoundError: the bucket does not exist (the URL is named).
            OSError: the listing failed after the retries.
        """
        return [(name, size) for name, size, _ in self.list_versions()]

    def list_versions(self, limit: int | None = None) -> list[tuple[str, int, str]]:
        """:meth:`listing` with each object's version tag: ``(name, size, tag)``, the tag
        its ``ETag`` as the listing gives it (``"etag:..."``), or its last-modified time
        (``"modified:<ISO 8601>"``) where the server lists no ETag.

        Args:
            limit: stop after the page holding the ``limit``-th object (``None``: all).

        Raises:
            FileNotFoundError: the bucket does not exist (the URL is named).
            OSError: the listing failed after the retries.
        """
        client = self.client()
        out: list[tuple[str, int, str]] = []
        try:
            for page in client.obstore.list(client.store, chunk_size=1000):
                for meta in page:
                    etag, modified = meta.get("e_tag"), meta.get("last_modified")
                    tag = f"etag:{etag}" if etag else f"modified:{modified.isoformat() if modified else ''}"
                    out.append((meta["path"], int(meta["size"]), tag))
                with self._lock:
                    self._counts["requests"] += 1
                if limit is not None and len(out) >= limit:
                    break
        except Exception as e:
            if "NoSuchBucket" in str(e):
                raise FileNotFoundError(f"bucket {self.bucket!r} does not exist: cannot list {self.url!r}") from None
            raise OSError(f"cannot list {self.url!r}: {_short(e)}") from None
        return out

    def get_many(self, requests) -> list[bytearray | OSError]:
        """The bytes of each ``(name, start, length)`` request (``start`` ``None``: the
        whole object, ``length`` then its listed size, which the native client checks, or
        ``None``), all in flight at once (up to ``max_in_flight`` per store and process), or the
        ``OSError`` naming the URL when one cannot be read (``FileNotFoundError`` for a
        missing object). A range that ends past the object's end returns fewer bytes; one
        that starts past it is an ``OSError``."""
        requests = list(requests)
        if not requests:
            return []
        native = self.native()
        if native is None:
            return self._run(lambda: self._gather(requests))
        answers = self.fetch_native(requests)[0]
        return [a if isinstance(a, OSError) else bytearray(a.numpy()) for a in answers]

    def read_all(self, name: str, size: int | None = None) -> bytearray:
        """The bytes of object ``name`` (of ``size`` bytes as listed, where known); raises the
        ``OSError`` :meth:`get_many` returns."""
        return _raise(self.get_many([(name, None, size)])[0])

    def read_range(self, name: str, start: int, length: int) -> bytearray:
        """``length`` bytes of object ``name`` from ``start`` (fewer where it ends first)."""
        return _raise(self.get_many([(name, start, length)])[0])

    async def _gather(self, requests):
        client = self.client()
        if client.semaphore is None:
            client.semaphore = asyncio.Semaphore(self.options.max_in_flight)
        return await asyncio.gather(*(self._get(client, *r) for r in requests))

    async def _get(self, client: _Client, name: str, start: int | None, length: int | None):
        obstore, store = client.obstore, client.store
        assert client.semaphore is not None
        for attempt in range(self.options.retries + 1):
            try:
                async with client.semaphore:
                    self._track(1)
                    try:
                        if start is None:
                            result = await obstore.get_async(store, name)
                            data = await asyncio.wait_for(result.bytes_async(), self.options.timeout_s)
                        else:
                            data = await obstore.get_range_async(store, name, start=start, length=length)
                    finally:
                        self._track(-1)
                out = bytearray(data)
                with self._lock:
                    self._counts["requests"] += 1
                    self._counts["bytes"] += len(out)
                return out
            except Exception as e:  # obstore's errors, asyncio's timeout
                error = e
                # the client retried the request itself; this layer retries what it does not (a
                # body that fails mid-transfer), so the attempts stay bounded by `retries`
                if _is_permanent(e) or _CLIENT_RETRIES_SPENT.search(str(e)) or attempt == self.options.retries:
                    break
                with self._lock:
                    self._counts["retries"] += 1
                await asyncio.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random()))
        url = self.url_of(name)
        where = "" if start is None else f" (bytes {start}-{start + (length or 0) - 1})"
        import obstore.exceptions as ox

        if isinstance(error, ox.NotFoundError) or "NoSuchKey" in str(error):
            return FileNotFoundError(f"object missing: {url!r}")
        if "NoSuchBucket" in str(error):
            return FileNotFoundError(f"bucket {self.bucket!r} does not exist: cannot read {url!r}")
        tries = "" if _is_permanent(error) else f" after {self.options.retries} retries"
        return OSError(f"cannot read {url!r}{where}{tries}: {_short(error)}")


class _Finished:
    """A position's entry made by ReadAhead's ``finish`` (not to be converted)."""

    __slots__ = ("entry",)

    def __init__(self, entry):
        self.entry = entry


#: neighbouring range reads of one object at most this many bytes apart are one request
COALESCE_GAP = 16 << 10
#: and one coalesced request spans at most this many bytes
COALESCE_MAX = 16 << 20


class ReadAhead:
    """An epoch's reads, issued in the epoch's order ahead of the readers that take them.

    The threads engine knows the whole epoch's order when it starts; this keeps the requests
    of the next samples in flight continuously (up to ``storage.max_in_flight``, sharing the
    store's bound), so the latency of object storage overlaps the decode instead of being
    paid per batch. Reads of one object that are neighbours in the epoch's order (within
    ``group`` positions of each other) and at most :data:`COALESCE_GAP` bytes apart are one
    request (a shard's consecutive samples in a block shuffle), split again on arrival.

    Args:
        store: the :class:`ObjectStore`.
        requests: per position of the epoch, ``(name, start, length, size)`` (``start``
            ``None``: the whole object of ``size`` bytes) or the exception that position
            is answered with.
        convert: ``convert(position, data)`` -> :meth:`read_batch`'s entry for a read.
        budget_bytes: bytes issued but not yet taken at most (the first position not taken
            is always issued).
        ahead: positions issued but not yet taken at most.
        group: positions issued (and looked at for coalescing) together: the batch size,
            so that the batch of the first position not taken is always issued whole.
        finish: with the native client, ``finish(positions, datas)`` -> the
            group's entries, run in the reading thread once a group's reads are in (a second
            round of reads that depends on the first: the crop windows' intervals);
            :attr:`finished` says whether it runs. ``None``: ``convert`` per position.
        first: issue only the first this many positions until :meth:`widen` (the next
            epoch's reads, issued before it begins); ``None``: up to ``ahead`` from the start.
    """

    def __init__(self, store: ObjectStore, requests: list, convert, *, budget_bytes: int, ahead: int,
                 group: int = 64, finish=None, first: int | None = None):
        self.store, self.requests, self.convert = store, requests, convert
        self.budget_bytes, self.group = int(budget_bytes), max(1, int(group))
        self.ahead = max(1, int(ahead)) if first is None else max(1, min(int(ahead), int(first)))
        self._full_ahead = max(1, int(ahead))
        self._cond = threading.Condition()
        self._results: dict[int, Any] = {}
        self._taken = 0  # positions taken so far (in any order); the window moves with it
        self._held = 0  # bytes issued, not taken
        self._sizes: dict[int, int] = {}
        self._tasks: set[asyncio.Future] = set()
        self._closed = False
        self._failure: BaseException | None = None
        self._wake: asyncio.Event | None = None
        self._native = store.native()
        self._finish = finish if self._native is not None else None
        self._loop: asyncio.AbstractEventLoop | None = None
        if self._native is None:
            client = store.client()
            self._loop = client.loop
            asyncio.run_coroutine_threadsafe(self._run(client), self._loop)
        else:
            # calls of the native client run in a few threads, each with its share of the
            # requests in flight: a slow request holds back only its own call's next group
            max_in_flight = store.options.max_in_flight
            workers = max(2, min(8, -(-max_in_flight // self.group)))
            self._concurrency = max(1, -(-max_in_flight // workers))
            # daemon threads, not an executor: interpreter exit never waits for queued calls
            self._queue: queue.SimpleQueue = queue.SimpleQueue()
            self._workers = workers
            for k in range(workers):
                threading.Thread(target=self._work, name=f"fastprep-s3-{k}", daemon=True).start()
            threading.Thread(target=self._run_native, name="fastprep-s3-ahead", daemon=True).start()

    def widen(self) -> None:
        """Issue up to ``ahead`` positions from now on (a ReadAhead made with ``first``)."""
        with self._cond:
            self.ahead = self._full_ahead
            self._cond.notify_all()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._notify)

    def _free(self, p: int) -> bool:
        """Whether position ``p``'s group may be issued now (under ``_cond``)."""
        free = self._held < self.budget_bytes and p - self._taken < self.ahead
        # a reader waits for the batch at the first position not taken: with `group` its
        # batch size, that batch is always issued whole
        return free or p - self._taken < self.group

    def _fail(self, p: int, e: BaseException) -> None:
        """A bug in the pump: every reader waiting at or after ``p`` hears of it."""
        with self._cond:
            self._failure = e
            for k in range(p, len(self.requests)):
                self._results.setdefault(k, RuntimeError(f"read-ahead of {self.store.url!r} failed: {e!r}"))
            self._cond.notify_all()

    async def _run(self, client: _Client) -> None:
        if client.semaphore is None:
            client.semaphore = asyncio.Semaphore(self.store.options.max_in_flight)
        self._wake = asyncio.Event()
        n, p = len(self.requests), 0
        try:
            while p < n and not self._closed:
                q = min(n, p + self.group)
                while True:
                    with self._cond:
                        free = self._free(p)
                    if free or self._closed:
                        break
                    self._wake.clear()
                    await self._wake.wait()
                for run in self._coalesce(p, q):
                    task = asyncio.ensure_future(self._fetch(client, run))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                p = q
        except BaseException as e:
            self._fail(p, e)

    def _run_native(self) -> None:
        n, p = len(self.requests), 0
        try:
            while p < n:
                q = min(n, p + self.group)
                with self._cond:
                    while not self._closed and not self._free(p):
                        self._cond.wait()
                    if self._closed:
                        return
                self._queue.put((p, self._coalesce(p, q)))
                p = q
        except BaseException as e:
            self._fail(p, e)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._fetch_native(*item)

    def _coalesce(self, p: int, q: int) -> list[list[tuple]]:
        """Positions ``p .. q-1`` as runs of one request each: ``(position, name, start,
        length)`` each, ``start`` ``None`` for a whole object."""
        runs: list[list[tuple]] = []
        by_object: dict[str, list[tuple[int, str, int, int]]] = {}
        with self._cond:
            for k in range(p, q):
                r = self.requests[k]
                if isinstance(r, BaseException):
                    self._results[k] = r
                    continue
                name, start, length, size = r
                self._sizes[k] = size
                self._held += size
                if start is None:
                    runs.append([(k, name, None, size)])
                else:
                    by_object.setdefault(name, []).append((k, name, start, length))
            self._cond.notify_all()
        for reads in by_object.values():
            reads.sort(key=lambda r: r[2])
            run = [reads[0]]
            end = reads[0][2] + reads[0][3]
            for r in reads[1:]:
                if r[2] - end <= COALESCE_GAP and max(end, r[2] + r[3]) - run[0][2] <= COALESCE_MAX:
                    run.append(r)
                    end = max(end, r[2] + r[3])
                else:
                    runs.append(list(run))
                    run, end = [r], r[2] + r[3]
            runs.append(run)
        return runs

    @staticmethod
    def _request(run) -> tuple[str, int | None, int | None]:
        """The one request of a run: ``(name, start, length)`` (a whole object's listed size as
        its length)."""
        start = run[0][2]
        return run[0][1], start, run[0][3] if start is None else max(r[2] + r[3] for r in run) - start

    def _keep(self, run, data, into: dict) -> None:
        """Puts the answer of a run's request into ``into``, split per position."""
        start = run[0][2]
        if isinstance(data, BaseException) or len(run) == 1:
            for r in run:
                into[r[0]] = data
            return
        view = memoryview(data)
        for r in run:
            into[r[0]] = view[r[2] - start:r[2] - start + r[3]]

    @property
    def finished(self) -> bool:
        """Whether :meth:`read_batch` gives ``finish``'s entries (else ``convert``'s)."""
        return self._finish is not None

    async def _fetch(self, client: _Client, run) -> None:
        data = await self.store._get(client, *self._request(run))
        with self._cond:
            self._keep(run, data, self._results)
            self._cond.notify_all()

    def _fetch_native(self, p: int, runs) -> None:
        """One group's runs through the native client (in a worker thread)."""
        try:
            if self._closed:
                return
            assert self._native is not None
            answers, counts = self.store.fetch_native([self._request(run) for run in runs], self._concurrency)
            results: dict[int, Any] = {}
            for run, data in zip(runs, answers):
                self._keep(run, data if isinstance(data, BaseException) else memoryview(data.numpy()), results)
            if self._finish is not None and results and not self._closed:
                positions = sorted(results)
                # the second round takes whatever of max_in_flight is free (fetch_native's slots)
                done = self._finish(positions, [results[k] for k in positions])
                results = {k: _Finished(entry) for k, entry in zip(positions, done)}
            with self._cond:
                if self._closed:
                    return
                self._results.update(results)
                self._cond.notify_all()
        except BaseException as e:
            self._fail(p, e)

    def read_batch(self, positions) -> list:
        """``convert(position, data)`` of each position (``data`` the bytes, or the
        ``OSError`` naming the URL), waiting for the reads still in flight. Each position
        is taken once."""
        positions = list(positions)
        with self._cond:
            while not self._closed and any(k not in self._results for k in positions):
                if self._failure is not None:
                    raise RuntimeError(f"read-ahead of {self.store.url!r} failed") from self._failure
                self._cond.wait(1.0)
            if self._closed:  # the epoch was left while this reader waited: nobody takes its batch
                return [(OSError(f"read-ahead of {self.store.url!r} closed"), "") for _ in positions]
            datas = [self._results.pop(k) for k in positions]
            self._taken += len(positions)
            self._held -= sum(self._sizes.pop(k, 0) for k in positions)
            self._cond.notify_all()  # the native pump waits on the condition
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._notify)
        return [data.entry if isinstance(data, _Finished) else self.convert(k, data)
                for k, data in zip(positions, datas)]

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def close(self) -> None:
        """Stop issuing reads and cancel those in flight (the epoch ended or was left)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._results.clear()
            self._cond.notify_all()

        def cancel() -> None:
            self._notify()
            for task in list(self._tasks):
                task.cancel()

        if self._loop is None:  # native: queued calls are dropped, those in flight end by their timeouts
            for _ in range(self._workers):
                self._queue.put(None)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(cancel)


def _raise(value):
    if isinstance(value, BaseException):
        raise value
    return value


class ObjectFolder(JpegDataset):
    """A class-folder of images in object storage (``s3://bucket/prefix/<class>/**/<file>``),
    with :class:`~fastprep.data.JpegFolder`'s rules: the same classes, order and samples as
    the same tree on disk.

    The listing is one paginated ``ListObjectsV2`` walk of the prefix; each sample is one
    whole-object ``GET``: the threads engine issues an epoch's ``GET``\\ s in its order ahead
    of the decode (:meth:`read_ahead`), and :meth:`read_encoded_batch` has all of a batch's
    in flight at once (up to ``storage.max_in_flight``). A folder of packed files
    (``fastprep.pack``) is read by the threads engine by window where its files are large
    (``StorageOptions.window_reads``, ``"auto"`` by default: files of at least
    ``window_min_bytes``): only each file's header and the restart intervals its crop decodes
    (:meth:`read_windows`); smaller files, and every file on the processes engine, whole.

    Args:
        root: the ``s3://`` URL of the folder.
        transform, on_error, extensions, **kwargs: as :class:`~fastprep.data.JpegFolder`.
        storage: :class:`~fastprep.data.StorageOptions` (``None``: the defaults).

    Object storage has no empty folders: a class folder without files, which
    ``JpegFolder`` lists as a class on disk, does not exist there. ``files`` holds each
    sample's URL.

    Raises:
        FileNotFoundError: the bucket does not exist, or no object with one of
            ``extensions`` is under the URL (the URL is named).
        ImportError: obstore is not installed (``pip install 'fastprep[s3]'``).
    """

    def __init__(self, root: str, transform=None, on_error: str = "raise", extensions=None,
                 storage: StorageOptions | None = None, **kwargs):
        self.root = root
        self.store = ObjectStore(root, storage)
        self.extensions = folder_extensions(extensions, bool(kwargs.get("jpeg_only")))
        objects = self.store.listing()
        sizes = dict(objects)
        listing = list_folder_keys([name for name, _ in objects], self.extensions)
        self.classes, self.ignored = listing.classes, listing.ignored
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        if self.ignored:
            import warnings

            listed = ", ".join(f"{n} {ext}" for ext, n in sorted(self.ignored.items()))
            warnings.warn(f"ObjectFolder({self.store.url!r}) lists objects ending in {' '.join(self.extensions)}; "
                          f"ignored image files: {listed} (pass extensions= to include them)", UserWarning,
                          stacklevel=2)
        if not listing.samples:
            raise FileNotFoundError(f"no objects ending in {self.extensions} found under {self.store.url!r}")
        self.names = [name for name, _ in listing.samples]
        self._window_prefix = 0  # the longest header read by window so far
        self.sizes = [sizes[name] for name in self.names]
        self.samples = [(self.store.url_of(name), t) for name, t in listing.samples]
        super().__init__([p for p, _ in self.samples], [t for _, t in self.samples], transform, on_error, **kwargs)

    @property
    def object_store(self) -> ObjectStore:
        """The :class:`ObjectStore` the samples are read from."""
        return self.store

    def read_encoded(self, index: int) -> tuple[torch.Tensor, str]:
        """``(the object's bytes as a uint8 1-D tensor, its URL)``; one ``GET``."""
        return _tensor(self.store.read_all(self.names[index], self.sizes[index])), self.files[index]

    def read_encoded_batch(self, indices) -> list[tuple[torch.Tensor | Exception, str]]:
        """:meth:`read_encoded` for a batch: every ``GET`` in flight at once; a failed one
        is ``(OSError naming the URL, "")``."""
        indices = list(indices)
        if type(self).read_encoded is not ObjectFolder.read_encoded:
            return [self._read_or_error(i) for i in indices]
        datas = self.store.get_many([(self.names[i], None, self.sizes[i]) for i in indices])
        out: list[tuple[torch.Tensor | Exception, str]] = []
        for i, data in zip(indices, datas):
            out.append((data, "") if isinstance(data, OSError) else (_tensor(data), self.files[i]))
        return out

    @property
    def window_reads(self) -> bool:
        """Whether the threads engine reads this folder through :meth:`read_windows`:
        ``storage.window_reads`` (with ``"auto"``: where a file is at least
        ``storage.window_min_bytes``), unless a subclass reads samples its own way."""
        if type(self).read_encoded is not ObjectFolder.read_encoded:
            return False
        option = self.store.options.window_reads
        if option != "auto":
            return bool(option)
        least = self.store.options.window_min_bytes
        found = getattr(self, "_large_files", None)  # asked per batch: the listing is looked through once
        if found is None or found[0] != least:
            found = self._large_files = (least, any(size >= least for size in self.sizes))
        return found[1]

    def _first_length(self, i: int, prefix: int) -> int:
        """The bytes of file ``i``'s first read by window: its first ``prefix``, or all of it
        where ``window_reads="auto"`` reads it whole (smaller than ``window_min_bytes``)."""
        options = self.store.options
        if options.window_reads == "auto" and self.sizes[i] < options.window_min_bytes:
            return self.sizes[i]
        return min(prefix, self.sizes[i])

    def read_windows(self, indices, plan_windows, heads=None) -> list[tuple[torch.Tensor | Exception, str]]:
        """:meth:`read_encoded_batch` reading of packed files only what each crop decodes,
        in two rounds of requests, each with the whole batch's in flight at once: a range
        read of every file's first :data:`~fastprep.data.windows.WINDOW_PREFIX` bytes
        (more where its header is longer), then, per file, the ranges of the restart
        intervals of its window (``plan_windows(buffers, indices)`` -> per sample
        ``(top, left, height, width, scale_num)`` or ``None``: the loader's own plan, the
        same draws), or the rest of the object where the file is not packed or the window
        is not decoded from its intervals. Each entry is a buffer of the object's size
        that the decode reads as the whole file (docs/storage.md). ``heads``: the first
        reads of the batch's files when they were issued ahead (:meth:`read_ahead`'s), each
        bytes or an ``OSError``; the first round is then only what they miss."""
        indices = list(indices)
        heads = self._read_heads(indices, heads)
        buffers: list[Any] = []
        layouts: list[Any] = []
        for i, (head, scan) in zip(indices, heads):
            whole = not isinstance(head, Exception) and len(head) >= self.sizes[i]  # its first read had it all
            layout = None if isinstance(head, Exception) or scan <= 0 or whole else WindowLayout.parse(head, scan)
            if layout is not None and not layout.fits(self.sizes[i]):
                layout = None  # a stale or damaged index: the whole file, and its decode reports it
            layouts.append(layout)
            if isinstance(head, Exception):
                buffers.append(head)
            elif layout is None:
                buffers.append(None)
            else:
                buffers.append(layout.sparse(self.sizes[i], head, len(layout.starts) - 1))
        live = [k for k, b in enumerate(buffers) if isinstance(b, torch.Tensor)]
        windows = dict(zip(live, plan_windows([buffers[k] for k in live], [indices[k] for k in live]))) if live \
            else {}
        requests: list[tuple[int, int, int]] = []  # (sample, start, length)
        for k, i in enumerate(indices):
            if isinstance(buffers[k], Exception):
                continue
            window = windows.get(k)
            chosen = None if window is None else layouts[k].intervals(*window)
            if chosen is None:  # the whole file: what the prefix does not hold
                head = heads[k][0]
                if layouts[k] is not None:
                    buffers[k] = None
                if len(head) < self.sizes[i]:
                    requests.append((k, len(head), self.sizes[i] - len(head)))
                continue
            requests += [(k, a, n) for a, n in layouts[k].ranges(chosen, self.store.options.window_gap)]
        datas = self.store.get_many([(self.names[indices[k]], a, n) for k, a, n in requests])
        for (k, a, _), data in zip(requests, datas):
            if isinstance(data, Exception) or isinstance(buffers[k], Exception):
                buffers[k] = data if isinstance(data, Exception) else buffers[k]
                continue
            if buffers[k] is None:
                buffers[k] = bytearray(heads[k][0])
            target = buffers[k]
            if isinstance(target, torch.Tensor):
                target.numpy()[a:a + len(data)] = np.frombuffer(data, dtype=np.uint8)
            else:
                target += data
        out: list[tuple[torch.Tensor | Exception, str]] = []
        for k, i in enumerate(indices):
            b = buffers[k] if buffers[k] is not None else bytearray(heads[k][0])
            if isinstance(b, Exception):
                out.append((b, ""))
            else:
                out.append((b if isinstance(b, torch.Tensor) else _tensor(b), self.files[i]))
        return out

    def _first_read(self) -> int:
        """Bytes of a file's first read by window: the longest header seen so far (from
        :data:`~fastprep.data.windows.WINDOW_PREFIX`, at most 1 MB)."""
        return max(WINDOW_PREFIX, min(self._window_prefix, 1 << 20))

    def _read_heads(self, indices: list[int], first=None) -> list[tuple[Any, int]]:
        """Per index, the object's first bytes holding its whole header (or all of it) and
        where the header ends (:func:`~fastprep.data.windows.header_end`); all in flight.
        ``first``: the first reads, when issued ahead; else read here."""
        if first is None:
            prefix = self._first_read()
            first = self.store.get_many([(self.names[i], 0, self._first_length(i, prefix)) for i in indices])
        first = [d[0] if isinstance(d, tuple) else d for d in first]  # a closed read-ahead's (error, "")
        heads: list[Any] = [d if isinstance(d, Exception) else bytearray(d) for d in first]
        scans = [0] * len(indices)
        todo = list(range(len(indices)))
        while todo:
            more = []
            for k in todo:
                if isinstance(heads[k], Exception):
                    continue
                scans[k] = header_end(heads[k])
                size = self.sizes[indices[k]]
                if scans[k] < 0 and len(heads[k]) < size:
                    more.append((k, min(size, max(-scans[k], 2 * len(heads[k])))))
            datas = self.store.get_many([(self.names[indices[k]], len(heads[k]), n - len(heads[k]))
                                         for k, n in more])
            for (k, _), data in zip(more, datas):
                heads[k] = data if isinstance(data, Exception) else heads[k] + data
            todo = [k for k, _ in more]
        self._window_prefix = max([self._window_prefix, *scans])
        return list(zip(heads, scans))

    def read_ahead(self, indices, *, budget_bytes: int, group: int, plan_windows=None,
                   first: int | None = None) -> ReadAhead | None:
        """The epoch's whole-object GETs in order of ``indices``, issued ahead
        (:class:`ReadAhead`; its ``read_batch(positions)`` answers as
        :meth:`read_encoded_batch`); with :attr:`window_reads`, the first read of each
        file instead (its ``read_batch`` gives the bytes or the ``OSError``, for
        :meth:`read_windows`' ``heads``), or, given ``plan_windows`` and with the native
        client, the whole of :meth:`read_windows` ahead: each group's intervals are
        requested as soon as its headers are in (``ReadAhead.finished``). ``None`` when a
        subclass reads samples its own way or ``storage.read_ahead`` is off. ``first``: as
        :class:`ReadAhead`'s."""
        if type(self).read_encoded is not ObjectFolder.read_encoded or not self.store.options.read_ahead:
            return None
        indices = list(indices)
        ahead = 4 * self.store.options.max_in_flight
        if self.window_reads:  # the first read of each file (its header), for read_windows
            prefix = self._first_read()
            firsts = [(self.names[i], 0, n, n) for i in indices for n in (self._first_length(i, prefix),)]
            finish = None
            if plan_windows is not None:
                def finish(positions, heads):
                    return self.read_windows([indices[k] for k in positions], plan_windows, heads)
            return ReadAhead(self.store, firsts, lambda k, data: data, budget_bytes=budget_bytes, ahead=ahead,
                             group=group, finish=finish, first=first)
        requests = [(self.names[i], None, None, self.sizes[i]) for i in indices]

        def convert(k: int, data) -> tuple[torch.Tensor | Exception, str]:
            return (data, "") if isinstance(data, Exception) else (_tensor(data), self.files[indices[k]])

        return ReadAhead(self.store, requests, convert, budget_bytes=budget_bytes, ahead=ahead, group=group,
                         first=first)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.store.url!r}, samples={len(self.files)}, "
                f"classes={len(self.classes)}, transform={self.transform!r}, on_error={self.on_error!r})")


def _tensor(data: bytearray) -> torch.Tensor:
    return torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
