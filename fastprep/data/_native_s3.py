"""The native S3 client: GET requests signed here (AWS Signature Version 4) and moved by
``torch.ops.fastprep.http_get`` (csrc/readers/http_get.cpp: one epoll loop per call, keep-alive
connections pooled per process, no GIL), for S3-compatible endpoints (``AWS_ENDPOINT_URL``) over
``http://``, or ``https://`` where fastprep was built with OpenSSL (the server's certificate
checked against the system's CAs, or ``AWS_CA_BUNDLE``, and against its name), directly or through
the ``http://`` proxy that ``HTTPS_PROXY`` / ``HTTP_PROXY`` name for the endpoint (``NO_PROXY``
excepted: :func:`proxy_for`). Each answer is checked against its request (:func:`checked`): the
bytes asked for, or an ``OSError``.

Why it exists: on 2 cores a request through obstore costs the loader about 0.2 ms of CPU (its
runtime's threads waking each other, the asyncio bridge), about as much as decoding a third of
a sample; this path a few hundredths of a millisecond (docs/storage.md, "Choice of client"). It reads, and never
lists: listings stay with obstore. It takes static credentials only (the environment, or the
AWS config files through boto3); :func:`native_client` says why it cannot be used otherwise, and
:class:`~fastprep.data.objects.ObjectStore` then uses obstore.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import ipaddress
import os
import random
import re
import socket
import threading
import time
from urllib.parse import quote, unquote, urlsplit

import torch

__all__ = ["NativeClient", "checked", "native_client", "proxy_for", "sign_v4"]

#: the payload hash of a request without a body, as S3 accepts it for GETs
UNSIGNED = "UNSIGNED-PAYLOAD"
#: the most bytes one response body may have
MAX_BODY = 1 << 40
_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]{1,300})</Message>")
#: http_get's failure codes (csrc/readers/http_get.cpp), and this module's own for an answer that
#: does not hold the bytes asked for (:func:`checked`)
_MISMATCH = -8
_FAILURES = {-1: "cannot connect", -2: "connection reset", -3: "timeout", -4: "malformed response",
             -5: "response too large", -6: "https", -7: "proxy", _MISMATCH: "response does not match the request"}


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


def proxy_for(scheme: str, host: str, port: int, environ=os.environ) -> str | None:
    """The proxy URL that the environment names for ``scheme://host:port``, as curl, botocore
    and obstore read it: ``https_proxy`` / ``HTTPS_PROXY`` for https, ``http_proxy`` /
    ``HTTP_PROXY`` for http (the lowercase name first), ``None`` where there is none or
    ``no_proxy`` / ``NO_PROXY`` exempts the host: ``*``; a name, matching itself and its
    subdomains (``example.com``, ``.example.com`` and ``*.example.com`` alike); an IP address
    or network (``10.0.0.0/8``); each with an optional ``:port``."""
    names = ("https_proxy", "HTTPS_PROXY") if scheme == "https" else ("http_proxy", "HTTP_PROXY")
    proxy = next((environ[n] for n in names if environ.get(n)), None)
    if not proxy:
        return None
    exempt = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    host = host.lower().strip("[]").rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for entry in exempt.lower().replace(" ", "").split(","):
        if entry == "*":
            return None
        name, entry_port = entry, None
        if entry.startswith("["):  # [v6] or [v6]:port
            name, _, rest = entry[1:].partition("]")
            entry_port = rest[1:] if rest.startswith(":") else None
        elif entry.count(":") == 1:  # name:port (a bare IPv6 address has more colons)
            name, entry_port = entry.split(":")
        if not name or (entry_port and (not entry_port.isdigit() or int(entry_port) != port)):
            continue
        if ip is not None:
            try:
                if ip in ipaddress.ip_network(name, strict=False):
                    return None
            except ValueError:
                pass
            continue
        name = name.lstrip("*").lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return None
    return proxy


def _proxy_route(proxy: str, tls: bool, hostname: str, port: int) -> dict[str, str] | str:
    """How requests go through ``proxy`` (an ``http://`` URL; a bare ``host:port`` too): its
    ``host`` and ``port``, the ``tunnel`` (a CONNECT request, for https) or the ``target`` that
    prefixes each path (absolute-form, for http), ``auth`` (a Proxy-Authorization line for http,
    or ""), and ``name`` (its URL without credentials); or why it cannot be used."""
    parts = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # never its credentials
    if parts.scheme != "http":
        return f"the proxy {shown!r} is not an http:// URL"
    try:
        proxy_port = parts.port or 80
    except ValueError:
        return f"the proxy {shown!r} has an invalid port"
    if not parts.hostname:
        return f"the proxy {shown!r} names no host"
    auth = ""
    if parts.username is not None:
        secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        auth = f"Proxy-Authorization: Basic {base64.b64encode(secret).decode()}\r\n"
    authority = f"[{hostname}]:{port}" if ":" in hostname else f"{hostname}:{port}"
    name = f"http://{parts.hostname}:{proxy_port}"
    if tls:
        tunnel = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n"
        return {"host": parts.hostname, "port": str(proxy_port), "tunnel": tunnel, "target": "", "auth": "",
                "name": name}
    return {"host": parts.hostname, "port": str(proxy_port), "tunnel": "", "target": f"http://{authority}",
            "auth": auth, "name": name}


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
    proxy = proxy_for("https" if tls else "http", parts.hostname, port)
    route = None if proxy is None else _proxy_route(proxy, tls, parts.hostname, port)
    if isinstance(route, str):
        return route
    # through a proxy only the proxy's name is resolved here: the proxy resolves the endpoint's
    host, connect_port = (parts.hostname, port) if route is None else (route["host"], int(route["port"]))
    try:
        address = str(socket.getaddrinfo(host, connect_port, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as e:
        return f"cannot resolve {host!r}: {e}"
    tls_options = (parts.hostname, os.environ.get("AWS_CA_BUNDLE", "")) if tls else None
    return NativeClient(address, connect_port, parts.netloc, parts.path.rstrip("/"), bucket, prefix, credentials,
                        region, timeout_s=timeout_s, retries=retries, max_in_flight=max_in_flight, tls=tls_options,
                        proxy=route)


def checked(request, status: int, body: torch.Tensor, head) -> torch.Tensor | str:
    """The bytes that ``request`` (``(name, start, length)``; ``start`` ``None``: the whole
    object, ``length`` then its listed size or ``None``) asked for, out of an answer with
    ``status`` 200 or 206, its ``body`` and what its ``head`` said (``http_get``'s
    Content-Range ``first, last, size`` and whether the body's end was framed); or why the
    answer does not hold them.

    A range asks for ``bytes=start-last``. Its ``206`` must say ``Content-Range: bytes
    start-last/size`` (or end at the object's end, ``last`` past it) and carry that many
    bytes. A ``200`` to a range is the whole object, from which the range is cut when it holds
    it and its length was framed (a body that runs to the connection's close may have been
    cut, or run on). A whole object's ``200`` must have its listed size, where the caller
    knows it."""
    _, start, length = request
    n = body.numel()
    if start is None:
        if status != 200:
            return f"HTTP {status} to a GET of the whole object"
        if length is not None and n != length:
            return f"{n} bytes, where the object's listed size is {length}"
        return body
    last = start + max(1, length) - 1
    first, end, size, framed = head
    if status == 200:  # the server ignored Range: the whole object
        if n <= last or not framed:
            return f"HTTP 200 with {n} bytes{'' if framed else ' up to the close'}, not the range asked for"
        return body[start:last + 1].clone()
    if first < 0:
        return "HTTP 206 without a Content-Range of the form bytes first-last/size"
    if first != start or not (end == last or (0 <= size == end + 1 and end < last)):
        return f"Content-Range bytes {first}-{end}/{size if size >= 0 else '*'}"
    if n != end - first + 1:
        return f"{n} bytes for Content-Range bytes {first}-{end}"
    return body


class NativeClient:
    """Signs and sends GETs for one bucket (path-style addressing) through ``http_get``.

    :meth:`fetch` answers ``(name, start, length)`` requests (``start`` ``None``: the whole
    object) with their bodies or the ``OSError`` naming the URL, retrying transient failures
    (5xx, 429, 408, resets, timeouts, refused connections) at most ``retries`` times with
    exponential backoff and jitter. Thread-safe: each call runs its own requests.
    """

    def __init__(self, address: str, port: int, host: str, base: str, bucket: str, prefix: str, credentials,
                 region: str, *, timeout_s: float, retries: int, max_in_flight: int,
                 tls: tuple[str, str] | None = None, proxy: dict[str, str] | None = None):
        self.address, self.port, self.host = address, port, host
        #: ``(server name, CA file or "")`` on https, else ``None``
        self.tls = tls
        #: the proxy's URL (without credentials) where requests go through one, else ``None``
        self.proxy = None if proxy is None else proxy["name"]
        self._tunnel = "" if proxy is None else proxy["tunnel"]
        self._target = "" if proxy is None else proxy["target"]
        self._proxy_auth = "" if proxy is None else proxy["auth"]
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
            heads.append(f"GET {self._target}{path} HTTP/1.1\r\nHost: {self.host}\r\n{rng}{self._proxy_auth}"
                         f"{self._auth(path, now)}\r\n")
        return heads

    def fetch(self, requests, url_of, concurrency: int | None = None) -> tuple[list, dict]:
        """``(answers, counts)``: per request its body (a uint8 tensor) or the ``OSError``;
        counts of ``requests`` answered, ``bytes``, ``retries``, ``started``, ``in_flight_sum``
        and ``max_in_flight``. A request is ``(name, start, length)``; ``start`` ``None``: the
        whole object, ``length`` then its listed size (checked) or ``None``. An answer that
        does not hold the bytes asked for (:func:`checked`) is retried as a malformed one is."""
        requests = list(requests)
        out: list = [None] * len(requests)
        counts = {"requests": 0, "bytes": 0, "retries": 0, "started": 0, "in_flight_sum": 0, "max_in_flight": 0}
        todo = list(range(len(requests)))
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + random.random()))
                counts["retries"] += len(todo)
            bodies, status, reasons, heads, stats = torch.ops.fastprep.http_get(
                self.address, self.port, self._heads(requests[k] for k in todo),
                min(len(todo), concurrency or self.max_in_flight), self.timeout_s, MAX_BODY, self.tls is not None,
                *(self.tls or ("", "")), self._tunnel)
            started, in_flight_sum, most = stats.tolist()
            counts["started"] += started
            counts["in_flight_sum"] += in_flight_sum
            counts["max_in_flight"] = max(counts["max_in_flight"], most)
            again = []
            for k, body, code, reason, head in zip(todo, bodies, status.tolist(), reasons, heads.tolist()):
                if code in (200, 206):
                    counts["bytes"] += body.numel()
                    got = checked(requests[k], code, body, head)
                    if not isinstance(got, str):
                        out[k] = got
                        counts["requests"] += 1
                        continue
                    code, reason = _MISMATCH, got
                # refused certificates and proxies are not retried; a cut, malformed or mismatched answer is
                transient = (code < 0 and code not in (-6, -7)) or code >= 500 or code in (408, 429)
                if attempt < self.retries and transient:
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
            via = f" (through the proxy {self.proxy})" if self.proxy and code in (-1, -7) else ""
            return OSError(f"cannot read {url!r}{where}{tries}: {_FAILURES.get(code, 'failed')}: {reason}{via}")
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
