"""The native S3 client: GET requests signed here (AWS Signature Version 4) and moved by
``torch.ops.fastprep.http_get`` (csrc/readers/http_get.cpp: one epoll loop per call, keep-alive
connections pooled per process, no GIL), for S3-compatible endpoints (``AWS_ENDPOINT_URL``) over
``http://``, or ``https://`` where fastprep was built with OpenSSL (the server's certificate
checked against the system's CAs, or ``AWS_CA_BUNDLE``, and against its name).

Why it exists: on 2 cores a request through obstore costs the loader about 0.2 ms of CPU (its
runtime's threads waking each other, the asyncio bridge), about as much as decoding a third of
a sample; this path a few hundredths of a millisecond (docs/storage.md, "Choice of client"). It reads, and never
lists: listings stay with obstore. It takes static credentials only (the environment, or the
AWS config files through boto3); :func:`native_client` says why it cannot be used otherwise, and
:class:`~fastprep.data.objects.ObjectStore` then uses obstore.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import random
import re
import socket
import threading
import time
from urllib.parse import quote, urlsplit

import torch

__all__ = ["NativeClient", "native_client", "sign_v4"]

#: the payload hash of a request without a body, as S3 accepts it for GETs
UNSIGNED = "UNSIGNED-PAYLOAD"
#: the most bytes one response body may have
MAX_BODY = 1 << 40
_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]{1,300})</Message>")
#: http_get's failure codes (csrc/readers/http_get.cpp)
_FAILURES = {-1: "cannot connect", -2: "connection reset", -3: "timeout", -4: "malformed response",
             -5: "response too large", -6: "https"}


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret: str, day: str, region: str) -> bytes:
    """SigV4's derived key for ``day`` (YYYYMMDD), ``region`` and the ``s3`` service."""
    key = _hmac(("AWS4" + secret).encode(), day)
    return _hmac(_hmac(_hmac(key, region), "s3"), "aws4_request")


def sign_v4(method: str, path: str, host: str, amz_date: str, *, access_key: str, secret: str, region: str,
            token: str | None = None, key: bytes | None = None) -> dict[str, str]:
    """The headers that sign a request without a query or body: ``x-amz-date``,
    ``x-amz-content-sha256`` (``UNSIGNED-PAYLOAD``), ``x-amz-security-token`` when there is a
    session token, and ``Authorization``. ``path`` is the URI-encoded path; ``key`` the
    :func:`signing_key` of the day, when the caller caches it."""
    headers = {"host": host, "x-amz-content-sha256": UNSIGNED, "x-amz-date": amz_date}
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join([method, path, "", *(f"{n}:{headers[n]}" for n in names), "", signed, UNSIGNED])
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    if key is None:
        key = signing_key(secret, amz_date[:8], region)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    del headers["host"]
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, "
                                f"Signature={signature}")
    return headers


def _static_credentials() -> tuple[str, str, str | None] | None | str:
    """(key, secret, token) from the environment or boto3's resolution; ``None``: unsigned
    requests (``AWS_SKIP_SIGNATURE``); a str: why there are no static credentials."""
    if os.environ.get("AWS_SKIP_SIGNATURE", "").lower() in ("1", "true", "yes"):
        return None
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return key, secret, os.environ.get("AWS_SESSION_TOKEN") or None
    try:
        import boto3  # type: ignore[import-untyped]
    except ImportError:
        return "no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment (and no boto3 to read the config files)"
    found = boto3.Session().get_credentials()
    if found is None:
        return "no credentials in the environment or the AWS config files"
    if getattr(found, "method", "") not in ("env", "shared-credentials-file", "config-file"):
        return f"credentials come from {getattr(found, 'method', 'a provider')!r}, which refreshes them"
    frozen = found.get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token


def native_client(endpoint: str | None, bucket: str, prefix: str, *, timeout_s: float, retries: int,
                  max_in_flight: int) -> NativeClient | str:
    """The native client for ``s3://bucket/prefix/`` at ``endpoint`` (an S3-compatible
    server's, path-style addressing), or why it cannot read it."""
    if not hasattr(torch.ops.fastprep, "http_get"):
        return "this build of fastprep has no http_get op"
    if not endpoint:
        return "no AWS_ENDPOINT_URL: AWS S3 itself (virtual-hosted addressing) is read through obstore"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    tls = endpoint.startswith("https://")
    if not tls and not endpoint.startswith("http://"):
        return f"the endpoint is not an http:// or https:// URL: {endpoint!r}"
    if tls and not torch.ops.fastprep.http_tls():
        return "this build of fastprep has no TLS (built without OpenSSL's headers)"
    credentials = _static_credentials()
    if isinstance(credentials, str):
        return credentials
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return f"the endpoint names no host: {endpoint!r}"
    port = parts.port or (443 if tls else 80)
    try:
        address = str(socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as e:
        return f"cannot resolve {parts.hostname!r}: {e}"
    tls_options = (parts.hostname, os.environ.get("AWS_CA_BUNDLE", "")) if tls else None
    return NativeClient(address, port, parts.netloc, parts.path.rstrip("/"), bucket, prefix, credentials, region,
                        timeout_s=timeout_s, retries=retries, max_in_flight=max_in_flight, tls=tls_options)


class NativeClient:
    """Signs and sends GETs for one bucket (path-style addressing) through ``http_get``.

    :meth:`fetch` answers ``(name, start, length)`` requests (``start`` ``None``: the whole
    object) with their bodies or the ``OSError`` naming the URL, retrying transient failures
    (5xx, 429, 408, resets, timeouts, refused connections) at most ``retries`` times with
    exponential backoff and jitter. Thread-safe: each call runs its own requests.
    """

    def __init__(self, address: str, port: int, host: str, base: str, bucket: str, prefix: str, credentials,
                 region: str, *, timeout_s: float, retries: int, max_in_flight: int,
                 tls: tuple[str, str] | None = None):
        self.address, self.port, self.host = address, port, host
        #: ``(server name, CA file or "")`` on https, else ``None``
        self.tls = tls
        self.bucket, self.prefix, self.region = bucket, prefix, region
        self._base = f"{base}/{quote(bucket, safe='')}/"
        self._credentials = credentials
        self.timeout_s, self.retries, self.max_in_flight = float(timeout_s), int(retries), int(max_in_flight)
        self._lock = threading.Lock()
        self._day_key: tuple[str, bytes] = ("", b"")
        self._signed: dict[tuple[str, str], dict[str, str]] = {}  # (path, second) -> its headers

    def _path(self, name: str) -> str:
        key = f"{self.prefix}/{name}" if self.prefix else name
        return self._base + quote(key, safe="/")

    def _auth(self, path: str, now: str) -> str:
        if self._credentials is None:
            return ""
        with self._lock:
            headers = self._signed.get((path, now))
            if headers is None:
                access, secret, token = self._credentials
                if self._day_key[0] != now[:8]:
                    self._day_key = (now[:8], signing_key(secret, now[:8], self.region))
                if len(self._signed) > 4096:
                    self._signed.clear()
                headers = sign_v4("GET", path, self.host, now, access_key=access, secret=secret, region=self.region,
                                  token=token, key=self._day_key[1])
                self._signed[path, now] = headers
        return "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    def _heads(self, requests) -> list[str]:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        heads = []
        for name, start, length in requests:
            path = self._path(name)
            rng = "" if start is None else f"Range: bytes={start}-{start + max(1, length) - 1}\r\n"
            heads.append(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n{rng}{self._auth(path, now)}\r\n")
        return heads

    def fetch(self, requests, url_of, concurrency: int | None = None) -> tuple[list, dict]:
        """``(answers, counts)``: per request its body (a uint8 tensor) or the ``OSError``;
        counts of ``requests`` answered, ``bytes``, ``retries``, ``started``, ``in_flight_sum``
        and ``max_in_flight``."""
        requests = list(requests)
        out: list = [None] * len(requests)
        counts = {"requests": 0, "bytes": 0, "retries": 0, "started": 0, "in_flight_sum": 0, "max_in_flight": 0}
        todo = list(range(len(requests)))
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + random.random()))
                counts["retries"] += len(todo)
            bodies, status, reasons, stats = torch.ops.fastprep.http_get(
                self.address, self.port, self._heads(requests[k] for k in todo),
                min(len(todo), concurrency or self.max_in_flight), self.timeout_s, MAX_BODY, self.tls is not None,
                *(self.tls or ("", "")))
            started, in_flight_sum, most = stats.tolist()
            counts["started"] += started
            counts["in_flight_sum"] += in_flight_sum
            counts["max_in_flight"] = max(counts["max_in_flight"], most)
            again = []
            for k, body, code, reason in zip(todo, bodies, status.tolist(), reasons):
                if code in (200, 206):
                    out[k] = body
                    counts["requests"] += 1
                    counts["bytes"] += body.numel()
                    continue
                if attempt < self.retries and ((code < 0 and code != -6) or code >= 500 or code in (408, 429)):
                    again.append(k)
                else:
                    out[k] = self._error(requests[k], code, body, reason, url_of, attempt)
            todo = again
            if not todo:
                break
        return out, counts

    def _error(self, request, code: int, body: torch.Tensor, reason: str, url_of, retried: int) -> OSError:
        """The exception for a failed request, tried again ``retried`` times."""
        name, start, length = request
        url = url_of(name)
        where = "" if start is None else f" (bytes {start}-{start + (length or 0) - 1})"
        tries = f" after {retried} retries" if retried else ""
        if code < 0:
            return OSError(f"cannot read {url!r}{where}{tries}: {_FAILURES.get(code, 'failed')}: {reason}")
        raw = bytes(body[:4096].numpy()) if body.numel() else b""
        found = _CODE.search(raw)
        s3code = found.group(1).decode(errors="replace") if found else ""
        said = _MESSAGE.search(raw)
        message = said.group(1).decode(errors="replace") if said else ""
        if code == 404 and s3code == "NoSuchBucket":
            return FileNotFoundError(f"bucket {self.bucket!r} does not exist: cannot read {url!r}")
        if code == 404:
            return FileNotFoundError(f"object missing: {url!r}")
        transient = code >= 500 or code in (408, 429)
        detail = f"HTTP {code}" + (f" {s3code}" if s3code else "") + (f": {message}" if message else "")
        return OSError(f"cannot read {url!r}{where}{tries if transient else ''}: {detail}")
