"""The native S3 client (fastprep/data/_native_s3.py, csrc/readers/http_get.cpp).

Its signatures against botocore's own SigV4 signer; its HTTP against a raw socket server of this
file whose answers are written byte by byte (chunked bodies, bodies ended by closing, cut
bodies, silence, garbage, 503s, framings that lie, interim responses, random mutations of
response heads: each GET ends in the bytes asked for, known here, or an OSError naming the URL);
proxies against a CONNECT and absolute-form proxy of this file; the loaders' batches through it
are tests/test_s3.py's, which run every test once per client.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading

import pytest

pytest.importorskip("obstore")

import fastprep.data as D  # noqa: E402
from fastprep.data._native_s3 import sign_v4  # noqa: E402

BODY = bytes(range(256)) * 40  # 10,240 bytes


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEJr//////////session"])
@pytest.mark.parametrize("key", ["shards/shard-000000.tar", "a b/ü+x=1&y~(z).jpg"])
@pytest.mark.parametrize("origin, base", [("http://127.0.0.1:9000", "/bucket-1/"),  # path-style
                                          ("https://bucket-1.s3.eu-west-3.amazonaws.com", "/")])  # virtual-hosted
def test_signature_matches_botocore(monkeypatch, key, token, origin, base):
    botocore_auth = pytest.importorskip("botocore.auth")
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials
    from urllib.parse import quote

    when = datetime.datetime(2026, 12, 4, 10, 15, 30)
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: when)
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    path = base + quote(key, safe="/")
    request = AWSRequest(method="GET", url=f"{origin}{path}")
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    botocore_auth.S3SigV4Auth(credentials, "s3", "eu-west-3").add_auth(request)
    ours = sign_v4("GET", path, origin.split("://")[1], when.strftime("%Y%m%dT%H%M%SZ"), access_key="AKIDEXAMPLE",
                   secret="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region="eu-west-3", token=token)
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    assert ours["x-amz-content-sha256"] == request.headers["X-Amz-Content-SHA256"]
    assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


class _Listener:
    """A socket on 127.0.0.1 whose connections are each served by ``_serve`` on a thread of their
    own, until :meth:`close`."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.open: list[socket.socket] = []
        self.stop = threading.Event()

    def _start(self):
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        raise NotImplementedError

    def close(self):
        self.stop.set()
        for conn in self.open:
            conn.close()
        self.sock.close()


class RawServer(_Listener):
    """Answers each request by its key (the path after the bucket) with bytes written here."""

    def __init__(self):
        super().__init__()
        self.hits: dict[str, int] = {}
        self.heads: list[bytes] = []
        #: key -> the answer's bytes, written in one piece (a list: one per hit, the last repeated),
        #: and the connection then closed where the key is in `closing`
        self.answers: dict[str, bytes | list[bytes]] = {}
        self.closing: set[str] = set()
        self._start()

    def _serve(self, conn):
        buffer = b""
        while not self.stop.is_set():
            while b"\r\n\r\n" not in buffer:
                try:
                    got = conn.recv(65536)
                except OSError:
                    return
                if not got:
                    return
                buffer += got
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            self.heads.append(head)
            target = head.split(b" ")[1].decode()
            # virtual-hosted (the bucket, b, in front of the host): the path is the key
            key = target[1:] if b"\r\nHost: b.localhost:" in head else target.split("/", 2)[2]
            self.hits[key] = self.hits.get(key, 0) + 1
            if not self._answer(conn, key, head):
                return

    def _answer(self, conn, key, head) -> bool:
        """Sends the answer; False: the connection is done."""
        if key in self.answers:
            answer = self.answers[key]
            if isinstance(answer, list):
                answer = answer[min(self.hits[key], len(answer)) - 1]
            conn.sendall(answer)
            if key in self.closing:
                conn.close()
                return False
            return True
        if key == "chunked":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=1\r\n world"
                         b"\r\n0\r\n\r\n")
        elif key == "close":
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY)
            conn.close()
            return False
        elif key == "silent":
            return False  # the connection stays open, unanswered
        elif key == "cut" or (key == "flaky" and self.hits[key] % 2 == 1):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
            conn.close()
            return False
        elif key == "garbage":
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        elif key == "busy":
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            conn.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif key == "denied":
            body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        else:  # "flaky" on even hits, and any other key: BODY, honouring a Range header
            data, status = BODY, b"200 OK"
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"range: bytes="):
                    a, b = line.split(b"=", 1)[1].split(b"-")
                    data, status = BODY[int(a):int(b) + 1], b"206 Partial Content"
                    status += b"\r\nContent-Range: bytes %d-%d/%d" % (int(a), int(a) + len(data) - 1, len(BODY))
            # headers in odd case and spacing, the body in two writes
            conn.sendall(b"HTTP/1.1 " + status + b"\r\ncontent-LENGTH:%d \r\nX-Other: 1\r\n\r\n" % len(data)
                         + data[:7])
            conn.sendall(data[7:])
        return True


@pytest.fixture
def raw(monkeypatch):
    server = RawServer()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    yield server
    server.close()


def _store(**options):
    store = D.ObjectStore("s3://b/", D.StorageOptions(client="native", **options))
    assert store.client_name == "native"
    return store


def test_bodies_ranges_and_framings(raw):
    store = _store()
    got = store.get_many([("plain", None, None), ("plain", 100, 50), ("plain", 10_000, 1_000), ("chunked", None, None),
                          ("close", None, None)] * 3)
    assert got[:5] == [BODY, BODY[100:150], BODY[10_000:], b"hello world", BODY] and got[5:] == got[:5] * 2
    # signed: every request carries the SigV4 headers and the Host of the endpoint
    assert all(b"Authorization: AWS4-HMAC-SHA256 Credential=test-key/" in h for h in raw.heads)
    assert all(f"Host: 127.0.0.1:{raw.port}".encode() in h for h in raw.heads)
    assert store.stats["requests"] == 15 and store.stats["bytes"] == 3 * (2 * len(BODY) + 50 + 240 + 11)


def test_a_cut_response_is_retried(raw):
    store = _store(retries=2)
    assert store.get_many([("flaky", None, None)]) == [BODY]  # cut on the first try, whole on the second
    assert raw.hits["flaky"] == 2 and store.stats["retries"] == 1


@pytest.mark.parametrize("key, error, match", [
    ("cut", OSError, r"cannot read 's3://b/cut' after 2 retries: connection reset"),
    ("garbage", OSError, r"cannot read 's3://b/garbage' after 2 retries: malformed response"),
    ("busy", OSError, r"cannot read 's3://b/busy' after 2 retries: HTTP 503 SlowDown: Please reduce"),
    ("denied", OSError, r"cannot read 's3://b/denied': HTTP 403 AccessDenied: Access Denied"),
])
def test_failures_name_the_url(raw, key, error, match):
    store = _store(retries=2)
    with pytest.raises(error, match=match):
        store.read_all(key)
    assert raw.hits[key] == (1 if key == "denied" else 3)  # a refusal is not retried


def _answer(status: bytes, *lines: bytes, body: bytes = b"") -> bytes:
    """An HTTP/1.1 response: its status, header lines and body, written out."""
    return b"HTTP/1.1 " + status + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n" + body


def _partial(first: int, last: int, *, content_range: bytes | None = None, length: int | None = None,
             body: bytes | None = None) -> bytes:
    """A 206 of BODY[first:last + 1] (or `body`), its Content-Range and Content-Length as given."""
    data = BODY[first:last + 1] if body is None else body
    if content_range is None:
        content_range = b"bytes %d-%d/%d" % (first, last, len(BODY))
    lines = [b"Content-Length: %d" % (len(data) if length is None else length)]
    if content_range:
        lines.append(b"Content-Range: " + content_range)
    return _answer(b"206 Partial Content", *lines, body=data)


@pytest.mark.parametrize("answer", [
    _answer(b"200 OK", b"Content-Length: 10240", b"Content-Length: 10000", body=BODY),  # two lengths
    _answer(b"200 OK", b"Content-Length: 10000", b"Content-Length: 10240", body=BODY),
    _answer(b"200 OK", b"Content-Length: +10240", body=BODY),  # not plain decimals
    _answer(b"200 OK", b"Content-Length: 0x2800", body=BODY),
    _answer(b"200 OK", b"Content-Length: 10240, 10240", body=BODY),
    _answer(b"200 OK", b"Content-Length: 10 240", body=BODY),
    _answer(b"200 OK", b"Content-Length: -1", body=BODY),
    _answer(b"200 OK", b"Content-Length:", body=BODY),
    _answer(b"200 OK", b"Transfer-Encoding: gzip, chunked", body=b"5\r\nhello\r\n0\r\n\r\n"),  # a coding not decoded
    _answer(b"200 OK", b"Content-Length: 10240", b" folded", body=BODY),  # obs-fold
    _answer(b"200 OK", b"Content-Length : 10240", body=BODY),  # space before the colon
    _answer(b"2000 OK", b"Content-Length: 10240", body=BODY),
    _answer(b"200 OK", b"Content-Length: 10000", body=BODY),  # 240 bytes past the framed body
    _answer(b"200 OK", b"Transfer-Encoding: chunked", body=b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1"),
    _answer(b"101 Switching Protocols", b"Upgrade: h2c") + _answer(b"200 OK", b"Content-Length: 5", body=b"hello"),
], ids=["two-lengths", "two-lengths-2", "plus", "hex", "list", "space", "negative", "empty", "gzip", "obs-fold",
        "name-space", "status-digits", "surplus", "chunked-surplus", "101"])
def test_invalid_framing_is_an_error_retried(raw, answer):
    raw.answers["x"] = answer
    store = _store(retries=1)
    with pytest.raises(OSError, match=r"cannot read 's3://b/x' after 1 retries: malformed response: "):
        store.read_all("x")
    assert raw.hits["x"] == 2
    assert store.read_all("plain") == BODY  # and the client goes on


def test_framings_that_agree(raw):
    raw.answers["same"] = _answer(b"200 OK", b"Content-Length: 10240", b"content-length:10240", body=BODY)
    # Transfer-Encoding overrides Content-Length (and the connection is not used again)
    raw.answers["both"] = _answer(b"200 OK", b"Content-Length: 3", b"Transfer-Encoding: chunked",
                                  body=b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    raw.answers["trailers"] = _answer(b"200 OK", b"Transfer-Encoding: Chunked",
                                      body=b"5\r\nhello\r\n0\r\nX-Checksum: 1\r\nX-More: 2\r\n\r\n")
    store = _store(retries=0)
    # connections opened: "both" closes its own; "same" keeps one, which "trailers" goes on using
    for key, want, connections in [("both", b"hello world", 2), ("same", BODY, 1), ("trailers", b"hello", 0)]:
        before = len(raw.open)
        assert [store.read_all(key), store.read_all(key)] == [want, want]
        assert len(raw.open) - before == connections


def test_range_answered_with_the_whole_object(raw):
    raw.answers["whole"] = _answer(b"200 OK", b"Content-Length: 10240", body=BODY)
    raw.answers["chunked"] = _answer(b"200 OK", b"Transfer-Encoding: chunked",
                                     body=b"2800\r\n" + BODY + b"\r\n0\r\n\r\n")
    store = _store(retries=0)
    for key in ("whole", "chunked"):
        got = store.get_many([(key, 100, 50), (key, 0, 10240), (key, 10239, 1)])
        assert got == [BODY[100:150], BODY, BODY[10239:]]


@pytest.mark.parametrize("answer, why", [
    (_answer(b"200 OK", b"Content-Length: 120", body=BODY[:120]), "HTTP 200 with 120 bytes"),
    (_answer(b"200 OK", b"Content-Length: 149", body=BODY[:149]), "HTTP 200 with 149 bytes"),
    (_answer(b"200 OK", body=BODY), "HTTP 200 with 10240 bytes up to the close"),  # may be cut or run on
    (_partial(101, 150), r"Content-Range bytes 101-150/10240"),
    (_partial(100, 148), r"Content-Range bytes 100-148/10240"),  # short of the range, not at the end
    (_partial(0, 49), r"Content-Range bytes 0-49/10240"),
    (_partial(100, 149, content_range=b"bytes 100-150/10240", body=BODY[100:151]),
     r"Content-Range bytes 100-150/10240"),
    (_partial(100, 149, content_range=b""), "HTTP 206 without a Content-Range"),
    (_partial(100, 149, content_range=b"bytes */10240"), "HTTP 206 without a Content-Range"),
    (_partial(100, 149, content_range=b"bytes 100-149/120"), "HTTP 206 without a Content-Range"),
    (_partial(100, 149, content_range=b"bytes=100-149/10240"), "HTTP 206 without a Content-Range"),
    (_answer(b"206 Partial Content", b"Content-Length: 50", b"Content-Range: bytes 100-149/10240",
             b"Content-Range: bytes 0-49/10240", body=BODY[100:150]), "HTTP 206 without a Content-Range"),
    (_partial(100, 149, length=55, body=BODY[100:155]), r"55 bytes for Content-Range bytes 100-149"),  # more
    (_partial(100, 149, length=45, body=BODY[100:145]), r"45 bytes for Content-Range bytes 100-149"),  # fewer
])
def test_range_answers_that_are_not_the_range(raw, answer, why):
    raw.answers["x"] = answer
    raw.closing.add("x")
    store = _store(retries=1)
    with pytest.raises(OSError, match=r"cannot read 's3://b/x' \(bytes 100-149\) after 1 retries: response does "
                                      r"not match the request: " + why):
        store.read_range("x", 100, 50)
    assert raw.hits["x"] == 2  # retried: a flaky cache may answer right the next time


def test_range_answers_past_the_end_and_cut(raw):
    raw.answers["unsized"] = _partial(100, 149, content_range=b"bytes 100-149/*")
    raw.answers["extra"] = _partial(100, 149, length=50, body=BODY[100:155])  # 5 bytes past Content-Length
    raw.answers["cut"] = _partial(100, 149)[:-5]
    raw.closing.add("cut")
    raw.answers["early"] = _partial(10_000, 10_199, content_range=b"bytes 10000-10199/10240")
    store = _store(retries=0)
    assert store.read_range("unsized", 100, 50) == BODY[100:150]
    assert store.read_range("tail", 10_000, 1_000) == BODY[10_000:]  # the object ends first: what it has
    with pytest.raises(OSError, match=r"'s3://b/extra' \(bytes 100-149\): malformed response: bytes past the end"):
        store.read_range("extra", 100, 50)
    with pytest.raises(OSError, match=r"'s3://b/cut' \(bytes 100-149\): connection reset: connection closed mid"):
        store.read_range("cut", 100, 50)
    with pytest.raises(OSError, match=r"'s3://b/early' \(bytes 10000-10999\): response does not match the "
                                      r"request: Content-Range bytes 10000-10199/10240"):
        store.read_range("early", 10_000, 1_000)


def test_interim_responses_are_skipped(raw):
    interim = (_answer(b"103 Early Hints", b"Link: </style.css>; rel=preload", b"Content-Length: 7")
               + _answer(b"100 Continue"))
    raw.answers["x"] = [interim + _partial(100, 149), interim + _partial(0, 9), interim + _partial(100, 149)]
    store = _store(retries=0)
    assert store.read_range("x", 100, 50) == BODY[100:150]
    assert store.read_range("x", 0, 10) == BODY[:10]
    before = len(raw.open)
    assert store.read_range("x", 100, 50) == BODY[100:150]
    assert len(raw.open) == before  # on the same kept-alive connection


def test_whole_object_against_its_listed_size(raw):
    store = _store(retries=1)
    assert store.read_all("plain", len(BODY)) == BODY
    assert store.get_many([("plain", None, None)]) == [BODY]  # no listed size: the framing's length
    with pytest.raises(OSError, match=r"cannot read 's3://b/plain' after 1 retries: response does not match the "
                                      r"request: 10240 bytes, where the object's listed size is 10241"):
        store.read_all("plain", len(BODY) + 1)
    raw.answers["ranged"] = _partial(0, 10239)  # a 206 to a GET without a Range
    with pytest.raises(OSError, match=r"'s3://b/ranged' after 1 retries: response does not match the request: "
                                      r"HTTP 206 to a GET of the whole object"):
        store.read_all("ranged", len(BODY))


_NOISE = b"0123456789 :;,-/*=\r\n\tHTTPbytesChunkedlength"


def _mutated(head: bytes, rng) -> bytes:
    """`head` (a response's status line and headers, with the blank line) with 1 to 3 random changes."""
    for _ in range(rng.randint(1, 3)):
        h = bytearray(head)
        op = rng.randrange(8)
        at = rng.randrange(len(h) + 1)
        lines = head.split(b"\r\n")
        k = rng.randrange(len(lines))
        if op == 0 and at < len(h):  # a byte replaced
            h[at] = rng.choice(_NOISE)
        elif op == 1 and at < len(h):  # a byte dropped
            del h[at]
        elif op == 2:  # a byte inserted
            h.insert(at, rng.choice(_NOISE))
        elif op == 3:  # a line repeated
            lines.insert(k, lines[k])
            h = bytearray(b"\r\n".join(lines))
        elif op == 4:  # a line dropped
            del lines[k]
            h = bytearray(b"\r\n".join(lines))
        elif op == 5:  # a number changed
            digits = [i for i, c in enumerate(h) if chr(c).isdigit()]
            if digits:
                i = rng.choice(digits)
                h[i:i + 1] = str(rng.choice([0, 1, 9, 10, 99, 10239, 10241, rng.randrange(100_000)])).encode()
        elif op == 6:  # an interim response before it
            code = rng.choice([b"100", b"102", b"103", b"101", b"199", b"1"])
            h = bytearray(_answer(code + b" Interim", b"Link: </a>") + h)
        else:  # a framing header added
            extra = rng.choice([b"Content-Length: 50", b"Content-Length: 10240", b"Transfer-Encoding: chunked",
                                b"Content-Range: bytes 0-49/10240", b"Connection: close", b"Content-Length: 0"])
            lines.insert(max(1, k), extra)
            h = bytearray(b"\r\n".join(lines))
        head = bytes(h)
    return head


def test_mutated_heads_give_the_bytes_or_an_error(raw):
    """Every GET against answers whose heads are randomly damaged ends in the exact bytes asked for
    or an OSError naming the URL (never other bytes, a hang past the deadline or a crash)."""
    import random

    rng = random.Random(42)
    requests, wanted = [], []
    for i in range(200):
        key = f"m{i}"
        if rng.random() < 0.4:
            first, last = 0, len(BODY) - 1
            requests.append((key, None, len(BODY)))
            status, lines = b"200 OK", [b"ETag: \"abc\"", b"Content-Type: application/octet-stream"]
        else:
            first = rng.choice([0, 100, 5000, 10_000])
            length = rng.choice([1, 50, 240, 1000])
            last = min(first + length, len(BODY)) - 1
            requests.append((key, first, length))
            status = b"206 Partial Content"
            lines = [b"ETag: \"abc\"", b"Content-Range: bytes %d-%d/%d" % (first, last, len(BODY))]
        data = BODY[first:last + 1]
        wanted.append(data)
        framing = rng.choice(["length", "length", "chunked", "close"])
        if framing == "length":
            lines.append(b"Content-Length: %d" % len(data))
        elif framing == "chunked":
            lines.append(b"Transfer-Encoding: chunked")
            cut = rng.randrange(len(data) + 1)
            parts = [p for p in (data[:cut], data[cut:]) if p]
            data = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        rng.shuffle(lines)
        head = _answer(status, *lines)
        raw.answers[key] = _mutated(head, rng) + data
        if framing == "close" or rng.random() < 0.5:
            raw.closing.add(key)
    store = _store(retries=0, timeout_s=1.0)
    got = store.get_many(requests)
    exact = errors = 0
    for (key, _, _), want, answer in zip(requests, wanted, got):
        if isinstance(answer, OSError):
            assert f"cannot read 's3://b/{key}'" in str(answer) or f"object missing: 's3://b/{key}'" in str(answer)
            errors += 1
        else:
            assert answer == want, key
            exact += 1
    assert exact > 20 and errors > 20  # both outcomes are exercised
    assert store.read_all("plain") == BODY


def test_silence_times_out(raw):
    store = _store(retries=1, timeout_s=0.3)
    with pytest.raises(OSError, match=r"cannot read 's3://b/silent' \(bytes 0-9\) after 1 retries: timeout"):
        store.read_range("silent", 0, 10)
    assert raw.hits["silent"] == 2  # each try ended by its deadline
    assert store.read_all("plain") == BODY  # the loop and the pool still serve


def test_nothing_listening(monkeypatch):
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with pytest.raises(OSError, match=r"cannot read 's3://b/x' after 1 retries: cannot connect: Connection refused"):
        _store(retries=1).read_all("x")


def test_client_choice(monkeypatch, raw):
    import torch

    assert D.ObjectStore("s3://b/", D.StorageOptions(client="obstore")).client_name.startswith("obstore (")
    assert D.ObjectStore("s3://b/").client_name == "native"  # auto, on plain http
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"https://127.0.0.1:{raw.port}")
    assert D.ObjectStore("s3://b/").client_name == ("native" if torch.ops.fastprep.http_tls() else
                                                    "obstore (this build of fastprep has no TLS (built without "
                                                    "OpenSSL's headers))")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://127.0.0.1:21")
    with pytest.raises(ValueError, match=r"storage.client='native' cannot read 's3://b/': the endpoint is not an "
                                         r"http:// or https:// URL: 'ftp://127.0.0.1:21'"):
        D.ObjectStore("s3://b/", D.StorageOptions(client="native")).read_all("x")
    with pytest.raises(ValueError, match="client must be 'auto', 'native' or 'obstore', got 'curl'"):
        D.StorageOptions(client="curl")


def _aws_files(tmp_path, monkeypatch, config: str = "") -> None:
    """This test's AWS config file (``config``) and an empty credentials file, instance-role
    lookups off: nothing of the machine's own AWS setup is read."""
    (tmp_path / "aws-config").write_text(config)
    (tmp_path / "aws-credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_aws_s3_itself(monkeypatch, tmp_path):
    """No endpoint: AWS S3, virtual-hosted over https in the bucket's region (asked of S3, here
    answered by the test), path-style for a name that cannot be a host label or where the config
    file says so. The secret is in no repr and no pickle."""
    import pickle

    import torch

    import fastprep.data._native_s3 as native

    if not torch.ops.fastprep.http_tls():
        pytest.skip("this build of fastprep has no TLS")
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    _aws_files(tmp_path, monkeypatch)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-key")
    asked: list[str] = []
    monkeypatch.setattr(native, "bucket_region", lambda url, timeout_s=5.0: asked.append(url) or "eu-west-3")
    monkeypatch.setattr(native, "resolve", lambda host, port: "127.0.0.1")  # no DNS in a test
    store = D.ObjectStore("s3://train-set/imagenet/")
    assert store.client_name == "native"
    client = store.native()
    assert asked == ["https://train-set.s3.us-east-1.amazonaws.com/"]
    assert (client.host, client.port, client.base, client.region) == (
        "train-set.s3.eu-west-3.amazonaws.com", 443, "/", "eu-west-3")
    assert client.tls == ("train-set.s3.eu-west-3.amazonaws.com", "")
    assert client._path("cat/a b.jpg") == "/imagenet/cat/a%20b.jpg"
    assert "very-secret-key" not in repr(client) and "very-secret-key" not in repr(store)
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(client)
    assert b"very-secret-key" not in pickle.dumps(store)
    dotted = D.ObjectStore("s3://my.data/").native()
    assert (dotted.host, dotted.base) == ("s3.eu-west-3.amazonaws.com", "/my.data/")
    _aws_files(tmp_path, monkeypatch, "[default]\ns3 =\n    addressing_style = path\n")
    assert D.ObjectStore("s3://train-set/").native().base == "/train-set/"
    monkeypatch.setenv("AWS_REGION", "cn-north-1")
    monkeypatch.setattr(native, "bucket_region", lambda url, timeout_s=5.0: None)  # no answer: the configured one
    assert D.ObjectStore("s3://t/").native().host == "s3.cn-north-1.amazonaws.com.cn"


@pytest.mark.parametrize("style", ["botocore-config", "obstore-env"])
def test_virtual_hosted_addressing(raw, monkeypatch, tmp_path, style):
    """The bucket in front of the endpoint's host: botocore's ``addressing_style = virtual``
    (the endpoint is the server's), or obstore's ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` (the
    endpoint is the bucket's). ``b.localhost`` is loopback (RFC 6761) without the resolver."""
    if style == "botocore-config":
        _aws_files(tmp_path, monkeypatch, "[default]\ns3 =\n    addressing_style = virtual\n")
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://localhost:{raw.port}")
    else:
        _aws_files(tmp_path, monkeypatch)
        monkeypatch.setenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true")
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://b.localhost:{raw.port}")
    store = _store()
    assert store.get_many([("plain", None, None), ("dir/x y.jpg", 5, 10)]) == [BODY, BODY[5:15]]
    assert [h.split(b"\r\n")[0] for h in raw.heads] == [b"GET /plain HTTP/1.1", b"GET /dir/x%20y.jpg HTTP/1.1"]
    assert all(f"\r\nHost: b.localhost:{raw.port}\r\n".encode() in h for h in raw.heads)


def _credential_process(tmp_path, minutes: int, fail_after: int = 0) -> str:
    """An AWS config file's ``credential_process`` line: each run prints new keys (``ROTATED<n>``,
    its secret and token numbered alike) that expire in ``minutes``; after ``fail_after`` runs
    (0: never) it fails."""
    import sys

    script = tmp_path / "credentials.py"
    script.write_text(
        "import datetime, json, pathlib, sys\n"
        f"p = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        f"if {fail_after} and n > {fail_after}:\n"
        "    sys.exit('the identity provider is down')\n"
        f"end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes={minutes})\n"
        "print(json.dumps({'Version': 1, 'AccessKeyId': f'ROTATED{n}', 'SecretAccessKey': f'secret-{n}',\n"
        "                  'SessionToken': f'token-{n}', 'Expiration': end.isoformat()}))\n")
    return f"[default]\ncredential_process = {sys.executable} {script}\n"


def _keys(heads) -> list[tuple[str, str]]:
    """The access key and session token each request was signed with."""
    import re

    out = []
    for head in heads:
        key = re.search(rb"Credential=(\w+)/", head)
        token = re.search(rb"x-amz-security-token: (\S+)", head)
        out.append((key.group(1).decode() if key else "", token.group(1).decode() if token else ""))
    return out


@pytest.mark.parametrize("minutes", [5, 60])
def test_refreshing_credentials(raw, monkeypatch, tmp_path, minutes):
    """Credentials from botocore's chain (a ``credential_process`` here) that expire: renewed
    before each call within 15 minutes of their expiry (botocore's advisory window), kept
    while an hour is left; each request signed with one set (its key and token alike)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    _aws_files(tmp_path, monkeypatch, _credential_process(tmp_path, minutes))
    store = _store()
    assert store.native()._credentials.method == "custom-process"
    assert store.read_all("plain") == BODY and store.read_all("plain") == BODY
    keys = _keys(raw.heads)
    assert all(key.startswith("ROTATED") and token == "token-" + key[7:] for key, token in keys)
    numbers = [int(key[7:]) for key, _ in keys]
    if minutes == 5:
        assert numbers[1] > numbers[0]  # renewed before the second call
    else:
        assert numbers == [1, 1]  # the first set, still good for an hour
    assert "secret-" not in repr(store.native())


def test_credentials_that_cannot_be_renewed(raw, monkeypatch, tmp_path, capfd):
    """A provider that fails when its credentials must be renewed: each request of the call
    fails with an OSError naming its URL and the provider's reason; nothing on stderr."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    _aws_files(tmp_path, monkeypatch, _credential_process(tmp_path, 5, fail_after=1))
    store = _store()
    with pytest.raises(OSError, match=r"cannot read 's3://b/plain': cannot renew the 'custom-process' "
                                      r"credentials: .*the identity provider is down"):
        store.read_all("plain")
    assert raw.heads == []
    assert capfd.readouterr().err == ""


def test_op_checks_its_arguments():
    import torch

    with pytest.raises(RuntimeError, match="numeric IPv4 or IPv6 address, got 'localhost'"):
        torch.ops.fastprep.http_get("localhost", 80, ["GET / HTTP/1.1\r\n\r\n"], 1, 1.0, 100)
    with pytest.raises(RuntimeError, match="port must be in"):
        torch.ops.fastprep.http_get("127.0.0.1", 0, [], 1, 1.0, 100)
    bodies, status, reasons, heads, stats = torch.ops.fastprep.http_get("127.0.0.1", 1, [], 4, 1.0, 100)
    assert bodies == [] and status.numel() == 0 and reasons == [] and stats.tolist() == [0, 0, 0]
    assert heads.shape == (0, 4)


def test_exit_does_not_wait_for_requests_in_flight(tmp_path):
    """A loader left mid-epoch while its reads hang: the interpreter exits at once, quietly."""
    import subprocess
    import sys

    script = tmp_path / "left.py"
    script.write_text(
        "import os, socket, time\n"
        "import fastprep.data as D\n"
        "from fastprep.data.objects import ReadAhead\n"
        "s = socket.create_server(('127.0.0.1', 0), backlog=128)  # never accepts: no request is answered\n"
        "os.environ.update(AWS_ENDPOINT_URL=f'http://127.0.0.1:{s.getsockname()[1]}', AWS_ACCESS_KEY_ID='k',\n"
        "                  AWS_SECRET_ACCESS_KEY='s')\n"
        "store = D.ObjectStore('s3://b/', D.StorageOptions(client='native', timeout_s=60, retries=0))\n"
        "ahead = ReadAhead(store, [('x', 0, 10, 10)] * 64, lambda k, d: d, budget_bytes=1 << 20, ahead=64, group=16)\n"
        "time.sleep(0.5)\n"
        "print('leaving', flush=True)\n")
    # the requests' timeout is 60 s: an exit that waited for them would overrun the 50 s here
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=50)
    assert (done.returncode, done.stdout, done.stderr) == (0, "leaving\n", "")


@pytest.fixture
def tls_server(tmp_path, monkeypatch):
    """LocalS3Server over HTTPS (a certificate of a CA made here) on a small ImageFolder tree."""
    import torch

    if not torch.ops.fastprep.http_tls():
        pytest.skip("built without OpenSSL")
    pytest.importorskip("cryptography")
    from conftest import make_jpeg
    from fastprep.bench.s3server import LocalS3Server, local_certificates

    root = tmp_path / "data"
    for k in range(7):
        path = root / "tree" / f"c{k % 2}" / f"{k}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make_jpeg("420", 40 + 3 * k, 52 + 5 * k, seed=k))
    cert, key, ca = local_certificates(str(tmp_path))
    server = LocalS3Server(str(root), "data", tls=(cert, key), lifetime_s=60).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_CA_BUNDLE", ca)
    yield server, root
    server.stop()


def test_https_batches_equal_local(tls_server):
    import torch

    server, root = tls_server
    assert server.endpoint.startswith("https://127.0.0.1:")
    files = sorted(p for p in (root / "tree").rglob("*.jpg"))
    store = D.ObjectStore("s3://data/tree/", D.StorageOptions(client="native"))
    got_bytes = store.get_many([(p.relative_to(root / "tree").as_posix(), None, None) for p in files])
    assert got_bytes == [p.read_bytes() for p in files]  # the files themselves, over TLS
    kwargs = dict(batch_size=3, crop_size=24, device="cpu", seed=7, shuffle=True, num_workers=2, engine="threads")
    remote = D.make_loader("s3://data/tree/", storage=D.StorageOptions(client="native"), **kwargs)
    assert remote.dataset.object_store.client_name == "native"
    got = [(x.clone(), y.clone()) for x, y in remote]
    ref = [(x.clone(), y.clone()) for x, y in D.make_loader(str(root / "tree"), **kwargs)]
    assert len(got) == len(ref) == 3
    assert all(torch.equal(x, rx) and torch.equal(y, ry) for (x, y), (rx, ry) in zip(got, ref))


def test_https_refuses_an_unknown_certificate(tls_server, monkeypatch):
    server, _ = tls_server
    monkeypatch.delenv("AWS_CA_BUNDLE")  # the system's CAs do not know the test's CA
    store = _store(retries=3)
    with pytest.raises(OSError, match=r"cannot read 's3://b/tree/c0/0.jpg': https: TLS handshake failed: "
                                      r"certificate verify failed"):
        store.read_all("tree/c0/0.jpg")
    assert store.stats["retries"] == 0  # not retried
    assert server.stats["requests"] == 0  # no request was sent


class Proxy(_Listener):
    """An HTTP proxy on 127.0.0.1 that counts what goes through it: ``CONNECT`` tunnels (their
    targets in ``connects``) and absolute-form requests (their request lines in ``gets``), each
    rewritten to origin-form for the server; ``auths`` holds each one's Proxy-Authorization.
    ``refuse``: the status line that answers every request instead."""

    def __init__(self, refuse: bytes | None = None):
        super().__init__()
        self.url = f"http://127.0.0.1:{self.port}"
        self.refuse = refuse
        self.connects: list[bytes] = []
        self.gets: list[bytes] = []
        self.auths: list[bytes | None] = []
        self._start()

    @staticmethod
    def _head(conn, buffer: bytes) -> tuple[bytes | None, bytes]:
        while b"\r\n\r\n" not in buffer:
            try:
                got = conn.recv(65536)
            except OSError:
                return None, b""
            if not got:
                return None, b""
            buffer += got
        head, rest = buffer.split(b"\r\n\r\n", 1)
        return head, rest

    def _pump(self, src, dst):
        try:
            while got := src.recv(65536):
                dst.sendall(got)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, conn):
        upstream = None
        buffer = b""
        while True:
            head, buffer = self._head(conn, buffer)
            if head is None:
                break
            lines = head.split(b"\r\n")
            method, target, version = lines[0].split(b" ")
            auth = next((line.split(b":", 1)[1].strip() for line in lines[1:]
                         if line.lower().startswith(b"proxy-authorization:")), None)
            self.auths.append(auth)
            if self.refuse is not None:
                conn.sendall(b"HTTP/1.1 " + self.refuse + b"\r\nContent-Length: 0\r\n\r\n")
                continue
            if method == b"CONNECT":
                self.connects.append(target)
                host, port = target.rsplit(b":", 1)
                assert host == b"127.0.0.1"  # nothing leaves this machine
                upstream = socket.create_connection(("127.0.0.1", int(port)))
                self.open.append(upstream)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()
                self._pump(conn, upstream)
                return
            self.gets.append(lines[0])
            authority, path = target.split(b"//", 1)[1].split(b"/", 1)
            host, port = authority.rsplit(b":", 1)
            assert host == b"127.0.0.1"
            if upstream is None:
                upstream = socket.create_connection(("127.0.0.1", int(port)))
                self.open.append(upstream)
                threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()
            kept = [line for line in lines[1:] if not line.lower().startswith(b"proxy-authorization:")]
            upstream.sendall(b"\r\n".join([b"%s /%s %s" % (method, path, version), *kept]) + b"\r\n\r\n")
        conn.close()


@pytest.fixture
def proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = Proxy()
    yield server
    server.close()


@pytest.mark.parametrize("environ, scheme, host, port, want", [
    ({"HTTPS_PROXY": "http://p:3128"}, "https", "s3.example.com", 443, "http://p:3128"),
    ({"HTTPS_PROXY": "http://p:3128"}, "http", "s3.example.com", 80, None),  # http reads HTTP_PROXY
    ({"HTTP_PROXY": "http://big:1", "http_proxy": "http://small:2"}, "http", "h", 80, "http://small:2"),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "*"}, "https", "s3.example.com", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "other.org, example.com"}, "https", "s3.example.com", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "example.com"}, "https", "example.com", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": ".example.com"}, "https", "example.com", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "*.example.com"}, "https", "s3.EXAMPLE.com", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "ample.com"}, "https", "s3.example.com", 443, "x"),  # suffixes at a dot
    ({"HTTPS_PROXY": "x", "NO_PROXY": "example.com:443"}, "https", "s3.example.com", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "example.com:8443"}, "https", "s3.example.com", 443, "x"),
    ({"HTTPS_PROXY": "x", "no_proxy": "10.0.0.0/8,localhost"}, "https", "10.1.2.3", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "10.0.0.0/8"}, "https", "11.1.2.3", 443, "x"),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "10.1.2.3:9000"}, "https", "10.1.2.3", 9000, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "::1"}, "https", "::1", 443, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "[::1]:9000"}, "https", "::1", 9000, None),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "[::1]:9000"}, "https", "::1", 9001, "x"),
    ({"HTTPS_PROXY": "x", "NO_PROXY": "127.0.0.1"}, "https", "localhost", 443, "x"),  # names are not resolved
    ({"HTTPS_PROXY": "", "NO_PROXY": ""}, "https", "h", 443, None),
])
def test_proxy_for(environ, scheme, host, port, want):
    from fastprep.data._native_s3 import proxy_for

    assert proxy_for(scheme, host, port, environ) == want


def test_http_through_a_proxy(raw, proxy, monkeypatch):
    import base64

    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{proxy.port}")
    store = _store()
    assert store.native().proxy == proxy.url
    got = store.get_many([("plain", None, len(BODY)), ("plain", 100, 50), ("chunked", None, None)] * 2)
    assert got == [BODY, BODY[100:150], b"hello world"] * 2
    # each request went through the proxy in absolute form, with the proxy's credentials, the
    # server's Host and signature, and the proxy kept its credentials to itself
    assert sorted(proxy.gets) == sorted(f"GET http://127.0.0.1:{raw.port}/b/{key} HTTP/1.1".encode()
                                        for key in ("plain", "plain", "chunked") * 2)
    assert proxy.auths == [b"Basic " + base64.b64encode(b"user:p@ss")] * 6
    assert len(raw.heads) == 6 and all(f"Host: 127.0.0.1:{raw.port}".encode() in h and b"Authorization: AWS4" in h
                                       and b"Proxy-Authorization" not in h for h in raw.heads)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.0/8")
    direct = _store()
    assert direct.native().proxy is None and direct.read_all("plain") == BODY and len(proxy.gets) == 6


def test_a_proxy_that_cannot_be_used(raw, proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "socks5://user:secret@127.0.0.1:1080")
    assert D.ObjectStore("s3://b/").client_name == \
        "obstore (the proxy 'socks5://127.0.0.1:1080' is not an http:// URL)"
    with pytest.raises(ValueError, match=r"storage.client='native' cannot read 's3://b/': the proxy "
                                         r"'socks5://127.0.0.1:1080' is not an http:// URL"):
        D.ObjectStore("s3://b/", D.StorageOptions(client="native")).read_all("x")


@pytest.mark.parametrize("refuse, match, tries", [
    (b"407 Proxy Authentication Required", r"cannot read 's3://b/x': proxy: proxy answered CONNECT with "
                                           r"'HTTP/1.1 407 Proxy Authentication Required' \(through the proxy ", 1),
    (b"502 Bad Gateway", r"cannot read 's3://b/x' after 2 retries: cannot connect: proxy answered CONNECT with "
                         r"'HTTP/1.1 502 Bad Gateway' \(through the proxy ", 3),
])
def test_a_proxy_that_refuses_the_tunnel(raw, monkeypatch, refuse, match, tries):
    import torch

    if not torch.ops.fastprep.http_tls():
        pytest.skip("built without OpenSSL")
    refusing = Proxy(refuse=refuse)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"https://127.0.0.1:{raw.port}")
        monkeypatch.setenv("HTTPS_PROXY", refusing.url)
        with pytest.raises(OSError, match=match):
            _store(retries=2).read_all("x")
        assert len(refusing.auths) == tries and raw.hits == {}
    finally:
        refusing.close()


def test_https_through_a_proxy(tls_server, proxy, monkeypatch):
    import torch

    server, root = tls_server
    port = server.endpoint.rsplit(":", 1)[1]
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    files = sorted(p for p in (root / "tree").rglob("*.jpg"))
    store = D.ObjectStore("s3://data/tree/", D.StorageOptions(client="native"))
    assert store.native().proxy == proxy.url
    got_bytes = store.get_many([(p.relative_to(root / "tree").as_posix(), None, None) for p in files])
    assert got_bytes == [p.read_bytes() for p in files]
    # obstore has not run yet: these tunnels are the native client's
    assert proxy.connects and set(proxy.connects) == {f"127.0.0.1:{port}".encode()}
    # a loader: the listing through obstore (which reads the same variables: a tunnel of its own),
    # the reads natively
    kwargs = dict(batch_size=3, crop_size=24, device="cpu", seed=7, shuffle=True, num_workers=2, engine="threads")
    tunnels = len(proxy.connects)
    remote = D.make_loader("s3://data/tree/", **kwargs)
    assert remote.dataset.object_store.client_name == "native" and len(proxy.connects) > tunnels
    got = [(x.clone(), y.clone()) for x, y in remote]
    ref = [(x.clone(), y.clone()) for x, y in D.make_loader(str(root / "tree"), **kwargs)]
    assert len(got) == len(ref) == 3
    assert all(torch.equal(x, rx) and torch.equal(y, ry) for (x, y), (rx, ry) in zip(got, ref))
