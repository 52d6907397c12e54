"""A small S3-compatible server on localhost that serves a local folder, with injected latency
and faults: :class:`LocalS3Server` (``python -m fastprep.bench.s3server ROOT``).

It answers the requests a reader of training data makes -- ``ListObjectsV2`` (paginated),
``HEAD`` and ``GET`` of an object, ``GET`` with a ``Range: bytes=a-b`` header -- for one
bucket whose objects are the files under ``root`` (key = the path relative to ``root``,
``/``-separated). Requests are not authenticated (any signature is accepted); nothing is
ever written. Each request can be delayed (``latency_s``: the first-byte latency of object
storage) and every ``fail_every``-th answered with ``503 SlowDown``, every ``reset_every``-th
answered by a reset connection (no response), so the retry paths of a client can be tested
and its throughput measured against a store that behaves like a remote one.

The server binds 127.0.0.1 only, on a free port unless one is given, runs its own asyncio
loop in a daemon thread (or in the foreground from the command line), and stops by itself
after ``lifetime_s`` seconds. It counts requests, bytes sent and requests in flight
(:attr:`LocalS3Server.stats`).
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import hashlib
import os
import socket
import ssl
import struct
import threading
import time
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

__all__ = ["LocalS3Server", "local_certificates"]

_REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            416: "Range Not Satisfiable", 503: "Slow Down"}
_MAX_HEADER_BYTES = 64 << 10


def local_certificates(folder: str) -> tuple[str, str, str]:
    """``(certificate file, key file, CA file)`` written into ``folder``: a CA of its own and a
    server certificate it signed for 127.0.0.1 and ``localhost``, valid for a day (give the CA
    file to a client as its bundle, e.g. ``AWS_CA_BUNDLE``). Needs ``cryptography``."""
    import datetime
    import ipaddress

    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as e:
        raise ImportError("local certificates need cryptography: pip install cryptography") from e
    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject: str, issuer, key, signer, ca: bool):
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fastprep local CA")])
    ca = build("fastprep local CA", ca_name, ca_key, ca_key, True)
    cert = build("fastprep local S3 server", ca_name, key, ca_key, False)
    files = [os.path.join(folder, name) for name in ("server.pem", "server.key", "ca.pem")]
    for path, data in zip(files, [cert.public_bytes(serialization.Encoding.PEM),
                                  key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()),
                                  ca.public_bytes(serialization.Encoding.PEM)]):
        with open(path, "wb") as f:
            f.write(data)
    return files[0], files[1], files[2]


def _error_xml(code: str, message: str, resource: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{escape(message)}'
            f"</Message><Resource>{escape(resource)}</Resource></Error>").encode()


class LocalS3Server:
    """Serve the files under ``root`` as bucket ``bucket`` at ``http://127.0.0.1:<port>``.

    Args:
        root: the folder whose files are the bucket's objects.
        bucket: the bucket's name; any other bucket is ``404 NoSuchBucket``.
        latency_s: seconds every request waits before it is answered.
        tls: ``(certificate file, key file)``: serve HTTPS with them
            (:func:`local_certificates` makes them for 127.0.0.1); ``None``: plain HTTP.
        bandwidth_mbps: the link's capacity in megabits per second (0: unlimited): response
            bodies leave one after another at this rate, as through one network link of that
            speed (a node's share of the network), after their latency.
        fail_every: every this-many-th request (counted over all requests) gets ``503 SlowDown``;
            0: none.
        reset_every: every this-many-th request is answered by a reset connection; 0: none.
            A request that both would hit is a 503.
        fail_keys: keys whose every request gets ``503 SlowDown`` (an object that stays
            unreadable, whatever the retries).
        lifetime_s: the server stops by itself this many seconds after :meth:`start`.
        page_size: most keys per ``ListObjectsV2`` page (the client's ``max-keys`` may lower it).
        port: 0 (default): a free port.

    Use as a context manager, or :meth:`start` / :meth:`stop`. :attr:`endpoint` is the URL to
    give a client (``AWS_ENDPOINT_URL``).
    """

    def __init__(self, root: str, bucket: str = "data", *, latency_s: float = 0.0, bandwidth_mbps: float = 0.0,
                 tls: tuple[str, str] | None = None, fail_every: int = 0,
                 reset_every: int = 0, fail_keys=(), lifetime_s: float = 600.0, page_size: int = 1000, port: int = 0):
        for name, value in (("latency_s", latency_s), ("lifetime_s", lifetime_s), ("bandwidth_mbps", bandwidth_mbps)):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        for name, value in (("fail_every", fail_every), ("reset_every", reset_every), ("page_size", page_size)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if not os.path.isdir(root):
            raise ValueError(f"root must be a folder, got {root!r}")
        self.root = os.path.abspath(root)
        self.bucket = bucket
        self.latency_s = float(latency_s)
        self.bandwidth_mbps = float(bandwidth_mbps)
        self.tls = tls
        self._link_free_at = 0.0  # when the emulated link has sent what it was given
        self.fail_every, self.reset_every = fail_every, reset_every
        self.fail_keys = frozenset(fail_keys)
        self.lifetime_s = float(lifetime_s)
        self.page_size = max(1, page_size)
        self._sock = socket.create_server(("127.0.0.1", port), backlog=512)
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.reset_stats()

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def reset_stats(self) -> None:
        """Zero :attr:`stats`."""
        with self._lock:
            self._count = 0
            self._stats = {"requests": 0, "gets": 0, "lists": 0, "heads": 0, "bytes_sent": 0, "failed_503": 0,
                           "resets": 0, "in_flight": 0, "max_in_flight": 0, "in_flight_sum": 0}

    @property
    def stats(self) -> dict:
        """Counts since the last :meth:`reset_stats`: ``requests`` (all), ``gets``, ``lists``,
        ``heads``, ``bytes_sent`` (response bodies), ``failed_503``, ``resets``,
        ``max_in_flight`` and ``mean_in_flight`` (requests being served, sampled at each
        request's arrival)."""
        with self._lock:
            out: dict[str, float] = dict(self._stats)
        out["mean_in_flight"] = out.pop("in_flight_sum") / max(1, out["requests"])
        del out["in_flight"]
        return out

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LocalS3Server:
        """Serve in a daemon thread; returns ``self``."""
        if self._thread is not None:
            raise RuntimeError("the server is started already")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="fastprep-s3server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until :attr:`lifetime_s` has passed (or :meth:`stop`)."""
        self._run(threading.Event())

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
        finally:
            loop.close()
            self._stopped.set()

    async def _main(self, ready: threading.Event) -> None:
        self._done = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.tls)
        server = await asyncio.start_server(self._client, sock=self._sock, limit=_MAX_HEADER_BYTES, ssl=context)
        ready.set()
        try:
            await asyncio.wait_for(self._done.wait(), self.lifetime_s)
        except asyncio.TimeoutError:
            pass
        server.close()
        tasks = list(self._tasks)
        for task in tasks:  # open keep-alive connections: closed with the server
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    def stop(self) -> None:
        """Stop serving (waits up to 10 s); closing an already stopped server does nothing."""
        loop = self._loop
        if loop is not None and not self._stopped.is_set():
            try:
                loop.call_soon_threadsafe(self._done.set)
            except RuntimeError:  # the loop closed in between
                pass
        if self._thread is not None:
            self._thread.join(10)
        else:
            self._sock.close()

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # asyncio sets TCP_NODELAY only on sockets made with IPPROTO_TCP, and a listening
            # socket from socket.create_server has protocol 0: without this, Nagle's algorithm
            # holds a response's last segment for the client's delayed ACK (about 40 ms a request)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while not self._done.is_set():
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target = (lines[0].split(" ") + ["", ""])[:2]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                if not await self._answer(method, target, headers, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    def _arrive(self) -> int:
        with self._lock:
            self._count += 1
            s = self._stats
            s["requests"] += 1
            s["in_flight"] += 1
            s["max_in_flight"] = max(s["max_in_flight"], s["in_flight"])
            s["in_flight_sum"] += s["in_flight"]
            return self._count

    def _leave(self, **counts) -> None:
        with self._lock:
            self._stats["in_flight"] -= 1
            for k, v in counts.items():
                self._stats[k] += v

    async def _answer(self, method: str, target: str, headers: dict, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to be dropped."""
        n = self._arrive()
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if (self.fail_every and n % self.fail_every == 0) or self._key(target) in self.fail_keys:
                self._leave(failed_503=1)
                body = _error_xml("SlowDown", "Please reduce your request rate.", target)
                await self._send(writer, 503, {"Content-Type": "application/xml"}, body, method)
                return True
            if self.reset_every and n % self.reset_every == 0:
                self._leave(resets=1)
                sock = writer.get_extra_info("socket")
                if sock is not None:  # RST instead of FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            status, extra, body, kind = self._route(method, target, headers)
            if self.bandwidth_mbps and method != "HEAD":
                await self._through_link(len(body))
            self._leave(**{kind: 1}, bytes_sent=len(body) if method != "HEAD" else 0)
            await self._send(writer, status, extra, body, method)
            return True
        except BaseException:
            self._leave()
            raise

    async def _through_link(self, size: int) -> None:
        """Waits until the emulated link has carried ``size`` bytes after what it carries now."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._link_free_at = max(now, self._link_free_at) + size * 8 / (self.bandwidth_mbps * 1e6)
        await asyncio.sleep(self._link_free_at - now)

    async def _send(self, writer, status: int, extra: dict, body: bytes, method: str) -> None:
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Length: {len(body)}",
                "Connection: keep-alive", "x-amz-request-id: fastprep-local"]
        head += [f"{k}: {v}" for k, v in extra.items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        writer.write(data + body if method != "HEAD" else data)  # one segment train, one syscall
        await writer.drain()

    def _key(self, target: str) -> str:
        return unquote(urlsplit(target).path).lstrip("/").partition("/")[2]

    def _route(self, method: str, target: str, headers: dict) -> tuple[int, dict, bytes, str]:
        """``(status, headers, body, stats key)`` of a request (path-style addressing)."""
        parts = urlsplit(target)
        path = unquote(parts.path)
        bucket, _, key = path.lstrip("/").partition("/")
        xml = {"Content-Type": "application/xml"}
        if method not in ("GET", "HEAD"):
            return 405, xml, _error_xml("MethodNotAllowed", "read-only server", path), "gets"
        if bucket != self.bucket:
            return 404, xml, _error_xml("NoSuchBucket", "The specified bucket does not exist", bucket), "gets"
        if not key:
            if method == "HEAD":
                return 200, {}, b"", "heads"
            return 200, xml, self._list(parse_qs(parts.query)), "lists"
        file = os.path.join(self.root, *key.split("/"))
        if ".." in key.split("/") or not os.path.isfile(file):
            return 404, xml, _error_xml("NoSuchKey", "The specified key does not exist.", key), "gets"
        st = os.stat(file)
        meta = {"Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
                "ETag": '"' + hashlib.md5(f"{key}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest() + '"',
                "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if method == "HEAD":
            return 200, meta, b"\0" * 0, "heads"
        start, end, status = 0, st.st_size, 200
        rng = headers.get("range")
        if rng:
            got = _parse_range(rng, st.st_size)
            if got is None:
                return 416, {**xml, "Content-Range": f"bytes */{st.st_size}"}, \
                    _error_xml("InvalidRange", "The requested range is not satisfiable", key), "gets"
            start, end, status = got[0], got[1], 206
            meta["Content-Range"] = f"bytes {start}-{end - 1}/{st.st_size}"
        with open(file, "rb") as f:
            f.seek(start)
            body = f.read(end - start)
        return status, meta, body, "gets"

    def _list(self, query: dict) -> bytes:
        prefix = query.get("prefix", [""])[0]
        token = query.get("continuation-token", [""])[0]
        start_after = query.get("start-after", [""])[0]
        max_keys = min(self.page_size, int(query.get("max-keys", [str(self.page_size)])[0] or self.page_size))
        max_keys = max(1, max_keys)
        keys = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        keys.sort()  # S3 lists in UTF-8 binary order
        after = token or start_after
        keys = [k for k in keys if k > after] if after else keys
        page, more = keys[:max_keys], len(keys) > max_keys
        items = []
        for key in page:
            st = os.stat(os.path.join(self.root, *key.split("/")))
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(st.st_mtime))
            items.append(f"<Contents><Key>{escape(key)}</Key><LastModified>{stamp}</LastModified>"
                         f"<ETag>&quot;x&quot;</ETag><Size>{st.st_size}</Size><StorageClass>STANDARD</StorageClass>"
                         "</Contents>")
        token_xml = f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>" if more else ""
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
                'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<Name>{escape(self.bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(page)}</KeyCount>"
                f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>{token_xml}"
                + "".join(items) + "</ListBucketResult>").encode()


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a ``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` header, or None."""
    if not value.startswith("bytes=") or "," in value:
        return None
    first, _, last = value[6:].partition("-")
    try:
        if not first:
            n = int(last)
            return (max(0, size - n), size) if n > 0 and size else None
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return None
    if start >= size or end <= start:
        return None
    return start, min(end, size)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fastprep.bench.s3server", description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--bucket", default="data")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=0.0, help="the emulated link's capacity (0: none)")
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--reset-every", type=int, default=0)
    parser.add_argument("--lifetime-s", type=float, default=600.0)
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"),
                        help="serve HTTPS with this certificate and key (local_certificates makes them)")
    args = parser.parse_args(argv)
    server = LocalS3Server(args.root, args.bucket, latency_s=args.latency_ms / 1000,
                           bandwidth_mbps=args.bandwidth_mbps, tls=tuple(args.tls) if args.tls else None,
                           fail_every=args.fail_every,
                           reset_every=args.reset_every, lifetime_s=args.lifetime_s, port=args.port)
    print(f"{server.endpoint} bucket={args.bucket} (stops after {args.lifetime_s:.0f} s)", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
