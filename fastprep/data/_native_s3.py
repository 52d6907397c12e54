"""The native S3 client: GET requests signed here (AWS Signature Version 4) and moved by
``torch.ops.fastprep.http_get`` (csrc/readers/http_get.cpp: one epoll loop per call, keep-alive
connections pooled per process, no GIL), for AWS S3 itself (virtual-hosted addressing, the
bucket's region: :func:`bucket_url`, :func:`region_of`) and S3-compatible endpoints
(``AWS_ENDPOINT_URL``), over ``http://``, or ``https://`` where fastprep was built with OpenSSL
(the server's certificate checked against the system's CAs, or ``AWS_CA_BUNDLE``, and against
its name), directly or through the ``http://`` proxy that ``HTTPS_PROXY`` / ``HTTP_PROXY`` name
for the endpoint (``NO_PROXY`` excepted: :func:`proxy_for`). Requests are signed with the
environment's keys or botocore's provider chain, refreshing credentials renewed before they
expire (:class:`Credentials`). Each answer is checked against its request (:func:`checked`):
the bytes asked for, or an ``OSError``.

Why it exists: on 2 cores a request through obstore costs the loader about 0.2 ms of CPU (its
runtime's threads waking each other, the asyncio bridge), about as much as decoding a third of
a sample; this path a few hundredths of a millisecond (docs/storage.md, "Choice of client"). It reads, and
never lists: listings stay with obstore. :func:`native_client` says why it cannot be used where it
cannot, and :class:`~fastprep.data.objects.ObjectStore` then uses obstore.
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

__all__ = ["Credentials", "NativeClient", "bucket_region", "bucket_url", "checked", "credentials", "native_client",
           "proxy_for", "region_of", "resolve", "sign_v4"]

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


class Credentials:
    """The keys that sign requests: fixed ones (the environment's), or botocore's provider
    chain (config and credentials files, SSO, assumed roles, web identity, container and
    instance roles, ``credential_process``), whose refreshing credentials botocore renews
    before they expire (it refreshes them when :meth:`current` is asked for them within 15
    minutes of their expiry, and must within 10).

    Never printed (its ``repr`` names only where the keys come from) and never pickled: each
    process builds its own."""

    def __init__(self, fixed: tuple[str, str, str | None] | None = None, provider=None, method: str = "env"):
        self._fixed, self._provider, self.method = fixed, provider, method

    def current(self) -> tuple[str, str, str | None]:
        """``(access key, secret, session token)``, renewed first where they are about to expire.

        Raises:
            OSError: the provider could not renew them (botocore's reason)."""
        if self._fixed is not None:
            return self._fixed
        try:
            frozen = self._provider.get_frozen_credentials()
        except Exception as e:  # botocore's refresh failures have many types
            raise OSError(f"cannot renew the {self.method!r} credentials: {type(e).__name__}: {e}") from None
        return frozen.access_key, frozen.secret_key, frozen.token

    def __repr__(self) -> str:
        return f"Credentials(method={self.method!r})"

    def __reduce__(self):
        raise TypeError("credentials are not pickled: each process reads its own")


def _botocore_session():
    try:
        import botocore.session  # type: ignore[import-untyped]
    except ImportError:
        return None
    return botocore.session.get_session()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def credentials(session=None) -> Credentials | None | str:
    """The keys that sign requests: the environment's ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, else botocore's provider chain
    (``session``: a botocore session, default a new one); ``None``: unsigned requests
    (``AWS_SKIP_SIGNATURE``); a str: why there are none."""
    if _truthy(os.environ.get("AWS_SKIP_SIGNATURE")):
        return None
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return Credentials((key, secret, os.environ.get("AWS_SESSION_TOKEN") or None))
    session = session or _botocore_session()
    if session is None:
        return "no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment (and no botocore to read the others)"
    try:
        found = session.get_credentials()
    except Exception as e:  # a provider that fails (an expired SSO token, a failing credential_process)
        return f"botocore's credential chain failed: {type(e).__name__}: {e}"
    if found is None:
        return "no credentials in the environment, the AWS config files or botocore's other providers"
    method = str(getattr(found, "method", "") or "botocore")
    if not hasattr(found, "refresh_needed"):  # fixed keys from a file
        frozen = found.get_frozen_credentials()
        return Credentials((frozen.access_key, frozen.secret_key, frozen.token), method=method)
    return Credentials(provider=found, method=method)


#: a bucket name that can be the first label of a host name (virtual-hosted addressing over
#: https: no dots, which the certificate's one-label wildcard would not match)
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def addressing_style(session=None) -> str:
    """How a bucket is addressed (:func:`bucket_url`): ``"virtual-endpoint"`` where obstore's
    ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` is true (the endpoint is then the bucket's own URL, as
    obstore reads it), else botocore's ``s3.addressing_style`` (``"virtual"``, ``"path"`` or
    ``"auto"``, from the AWS config file's ``s3 =`` section), ``"auto"`` by default."""
    if _truthy(os.environ.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST")):
        return "virtual-endpoint"
    if session is None and _config_file_exists():
        session = _botocore_session()
    if session is not None:
        try:
            style = (session.get_scoped_config().get("s3") or {}).get("addressing_style")
        except Exception:  # a profile that does not exist: botocore's chain says so later
            style = None
        if style in ("virtual", "path", "auto"):
            return style
    return "auto"


def bucket_url(endpoint: str | None, bucket: str, region: str, style: str = "auto") -> str:
    """The URL under which ``bucket``'s keys are read, ending in ``/``.

    AWS S3 itself (``endpoint`` ``None``): virtual-hosted
    (``https://bucket.s3.region.amazonaws.com/``, ``.amazonaws.com.cn`` in China's regions)
    for a name that can be a host label, unless ``style`` is ``"path"``; else path-style
    (``https://s3.region.amazonaws.com/bucket/``). An S3-compatible endpoint: path-style
    (``endpoint/bucket/``), unless ``style`` is ``"virtual"`` (the bucket in front of the
    endpoint's host: ``http://bucket.host:port/``) or ``"virtual-endpoint"`` (the endpoint
    is the bucket's URL already)."""
    if endpoint is None:
        domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        if style != "path" and _DNS_BUCKET.match(bucket):
            return f"https://{bucket}.s3.{region}.{domain}/"
        return f"https://s3.{region}.{domain}/{quote(bucket, safe='')}/"
    endpoint = endpoint.rstrip("/")
    if style == "virtual-endpoint":
        return endpoint + "/"
    if style == "virtual":
        parts = urlsplit(endpoint)
        return f"{parts.scheme}://{bucket}.{parts.netloc}{parts.path}/"
    return f"{endpoint}/{quote(bucket, safe='')}/"


_regions: dict[tuple[str, str], str | None] = {}


def bucket_region(url: str, timeout_s: float = 5.0) -> str | None:
    """The region S3 says ``url`` (a bucket's URL) is in: the ``x-amz-bucket-region`` header of
    an unsigned ``HEAD`` (S3 sends it with a 200, a 301 or a 403 alike), through the
    environment's proxy; ``None`` where the answer has none or there is no answer. Asked once
    per URL and process."""
    import ssl
    import urllib.error
    import urllib.request

    key = (str(os.getpid()), url)
    if key not in _regions:
        context = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        found = None
        try:
            with opener.open(urllib.request.Request(url, method="HEAD"), timeout=timeout_s) as answer:
                found = answer.headers.get("x-amz-bucket-region")
        except urllib.error.HTTPError as e:
            found = e.headers.get("x-amz-bucket-region")
        except (OSError, ValueError):
            found = None
        _regions[key] = found if found and re.fullmatch(r"[a-z0-9-]{1,40}", found) else None
    return _regions[key]


def region_of(endpoint: str | None, bucket: str, session=None) -> str:
    """The region requests to ``bucket`` are signed for. AWS S3 itself: the bucket's
    (:func:`bucket_region`), else the configured one. An S3-compatible endpoint: the
    configured one (``AWS_REGION``, ``AWS_DEFAULT_REGION``, the AWS config file's ``region``),
    else what the endpoint says of the bucket, else ``us-east-1``."""
    configured = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not configured:
        session = session or _botocore_session()
        if session is not None:
            try:
                configured = session.get_config_variable("region")
            except Exception:
                configured = None
    if endpoint is None:
        return bucket_region(bucket_url(None, bucket, "us-east-1")) or configured or "us-east-1"
    return configured or bucket_region(bucket_url(endpoint, bucket, "us-east-1")) or "us-east-1"


def resolve(host: str, port: int) -> str:
    """``host``'s address: loopback for ``localhost`` and the names under it (RFC 6761 section
    6.3, as curl and browsers read them, where the system's resolver does not); else the
    system resolver's first address.

    Raises:
        OSError: the name does not resolve."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return "127.0.0.1"
    return str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])


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


def _config_file_exists() -> bool:
    return os.path.exists(os.path.expanduser(os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"))


def native_client(endpoint: str | None, bucket: str, prefix: str, *, timeout_s: float, retries: int,
                  max_in_flight: int) -> NativeClient | str:
    """The native client for ``s3://bucket/prefix/``: at ``endpoint`` (an S3-compatible
    server's), or AWS S3 itself where ``endpoint`` is ``None`` (:func:`bucket_url`,
    :func:`region_of`, :func:`credentials`); or why it cannot read it."""
    if not hasattr(torch.ops.fastprep, "http_get"):
        return "this build of fastprep has no http_get op"
    if endpoint and not endpoint.startswith(("http://", "https://")):
        return f"the endpoint is not an http:// or https:// URL: {endpoint!r}"
    keys_in_env = bool(os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"))
    region_in_env = bool(os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    # botocore is imported only where the environment leaves something to its files and providers
    session = None if keys_in_env and region_in_env and not _config_file_exists() else _botocore_session()
    url = bucket_url(endpoint, bucket, "us-east-1")
    tls = url.startswith("https://")
    if tls and not torch.ops.fastprep.http_tls():
        return "this build of fastprep has no TLS (built without OpenSSL's headers)"
    found = credentials(session)
    if isinstance(found, str):
        return found
    region = region_of(endpoint, bucket, session)
    url = bucket_url(endpoint, bucket, region, addressing_style(session))
    parts = urlsplit(url)
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
        address = resolve(host, connect_port)
    except OSError as e:
        return f"cannot resolve {host!r}: {e}"
    tls_options = (parts.hostname, os.environ.get("AWS_CA_BUNDLE", "")) if tls else None
    return NativeClient(address, connect_port, parts.netloc, parts.path, bucket, prefix, found, region,
                        timeout_s=timeout_s, retries=retries, max_in_flight=max_in_flight, tls=tls_options,
                        proxy=route, resolve_name=host)


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
    """Signs and sends GETs for one bucket (path-style or virtual-hosted addressing: :attr:`base`)
    through ``http_get``.

    :meth:`fetch` answers ``(name, start, length)`` requests (``start`` ``None``: the whole
    object) with their bodies or the ``OSError`` naming the URL, retrying transient failures
    (5xx, 429, 408, resets, timeouts, refused connections) at most ``retries`` times with
    exponential backoff and jitter. Thread-safe: each call runs its own requests.
    """

    def __init__(self, address: str, port: int, host: str, base: str, bucket: str, prefix: str,
                 credentials: Credentials | None, region: str, *, timeout_s: float, retries: int, max_in_flight: int,
                 tls: tuple[str, str] | None = None, proxy: dict[str, str] | None = None, resolve_name: str = ""):
        self.address, self.port, self.host = address, port, host
        #: the name ``address`` was resolved from, resolved again when connections to it fail
        self._resolve_name = resolve_name
        #: ``(server name, CA file or "")`` on https, else ``None``
        self.tls = tls
        #: the proxy's URL (without credentials) where requests go through one, else ``None``
        self.proxy = None if proxy is None else proxy["name"]
        self._tunnel = "" if proxy is None else proxy["tunnel"]
        self._target = "" if proxy is None else proxy["target"]
        self._proxy_auth = "" if proxy is None else proxy["auth"]
        self.bucket, self.prefix, self.region = bucket, prefix, region
        #: the path under which the bucket's keys are (``/bucket/`` path-style, ``/`` virtual-hosted)
        self.base = base if base.endswith("/") else base + "/"
        self._credentials = credentials
        self.timeout_s, self.retries, self.max_in_flight = float(timeout_s), int(retries), int(max_in_flight)
        self._lock = threading.Lock()
        self._day_key: tuple[str, str, bytes] = ("", "", b"")  # (day, access key, signing key)
        self._signed: dict[tuple[str, str, str], dict[str, str]] = {}  # (path, second, access key) -> headers

    def __repr__(self) -> str:
        scheme = "https" if self.tls else "http"
        return (f"NativeClient({scheme}://{self.host}{self.base}, region={self.region!r}, "
                f"credentials={self._credentials!r}, proxy={self.proxy!r})")

    def __reduce__(self):
        raise TypeError("a NativeClient holds credentials and is not pickled: each process makes its own")

    def _path(self, name: str) -> str:
        key = f"{self.prefix}/{name}" if self.prefix else name
        return self.base + quote(key, safe="/")

    def _auth(self, path: str, now: str, keys: tuple[str, str, str | None] | None) -> str:
        if keys is None:
            return ""
        access, secret, token = keys
        with self._lock:
            headers = self._signed.get((path, now, access))
            if headers is None:
                if self._day_key[:2] != (now[:8], access):
                    self._day_key = (now[:8], access, signing_key(secret, now[:8], self.region))
                if len(self._signed) > 4096:
                    self._signed.clear()
                headers = sign_v4("GET", path, self.host, now, access_key=access, secret=secret, region=self.region,
                                  token=token, key=self._day_key[2])
                self._signed[path, now, access] = headers
        return "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    def _heads(self, requests) -> list[str]:
        """The requests' heads, signed with the credentials of now (renewed first where they are
        about to expire: :meth:`Credentials.current`, whose ``OSError`` this raises)."""
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        keys = None if self._credentials is None else self._credentials.current()
        heads = []
        for name, start, length in requests:
            path = self._path(name)
            rng = "" if start is None else f"Range: bytes={start}-{start + max(1, length) - 1}\r\n"
            heads.append(f"GET {self._target}{path} HTTP/1.1\r\nHost: {self.host}\r\n{rng}{self._proxy_auth}"
                         f"{self._auth(path, now, keys)}\r\n")
        return heads

    def _resolve_again(self) -> None:
        """After connections failed: the name's address now (DNS may have moved it), kept as it
        was where the name no longer resolves."""
        if self._resolve_name:
            try:
                self.address = resolve(self._resolve_name, self.port)
            except OSError:
                pass

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
            try:
                request_heads = self._heads(requests[k] for k in todo)
            except OSError as e:  # the credentials could not be renewed: no request can be signed
                for k in todo:
                    out[k] = OSError(f"cannot read {url_of(requests[k][0])!r}: {e}")
                break
            bodies, status, reasons, heads, stats = torch.ops.fastprep.http_get(
                self.address, self.port, request_heads,
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
            if -1 in status.tolist():  # connections refused or unanswered: the name may point elsewhere now
                self._resolve_again()
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
