"""The native S3 client (fastprep/data/_native_s3.py, csrc/readers/http_get.cpp).

Its signatures against botocore's own SigV4 signer; its HTTP against a raw socket server of this
file whose answers are written byte by byte (chunked bodies, bodies ended by closing, cut
bodies, silence, garbage, 503s); the loaders' batches through it are tests/test_s3.py's, which
run every test once per client.
"""

from __future__ import annotations

import datetime
import socket
import threading

import pytest

pytest.importorskip("obstore")

import fastprep.data as D  # noqa: E402
from fastprep.data._native_s3 import sign_v4  # noqa: E402

BODY = bytes(range(256)) * 40  # 10,240 bytes


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEJr//////////session"])
@pytest.mark.parametrize("key", ["shards/shard-000000.tar", "a b/ü+x=1&y~(z).jpg"])
def test_signature_matches_botocore(monkeypatch, key, token):
    botocore_auth = pytest.importorskip("botocore.auth")
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials
    from urllib.parse import quote

    when = datetime.datetime(2026, 12, 4, 10, 15, 30)
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda: when)
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    path = "/bucket-1/" + quote(key, safe="/")
    request = AWSRequest(method="GET", url=f"http://127.0.0.1:9000{path}")
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    botocore_auth.S3SigV4Auth(credentials, "s3", "eu-west-3").add_auth(request)
    ours = sign_v4("GET", path, "127.0.0.1:9000", when.strftime("%Y%m%dT%H%M%SZ"), access_key="AKIDEXAMPLE",
                   secret="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region="eu-west-3", token=token)
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    assert ours["x-amz-content-sha256"] == request.headers["X-Amz-Content-SHA256"]
    assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


class RawServer:
    """Answers each request by its key (the path after the bucket) with bytes written here."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits: dict[str, int] = {}
        self.heads: list[bytes] = []
        self.open: list[socket.socket] = []
        self.stop = threading.Event()
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
            key = head.split(b" ")[1].decode().split("/", 2)[2]
            self.hits[key] = self.hits.get(key, 0) + 1
            if not self._answer(conn, key, head):
                return

    def _answer(self, conn, key, head) -> bool:
        """Sends the answer; False: the connection is done."""
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
            # headers in odd case and spacing, the body in two writes
            conn.sendall(b"HTTP/1.1 " + status + b"\r\ncontent-LENGTH:%d \r\nX-Other: 1\r\n\r\n" % len(data)
                         + data[:7])
            conn.sendall(data[7:])
        return True

    def close(self):
        self.stop.set()
        for conn in self.open:
            conn.close()
        self.sock.close()


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
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # AWS S3 itself
    store = D.ObjectStore("s3://b/")
    assert store.client_name == "obstore (no AWS_ENDPOINT_URL: AWS S3 itself (virtual-hosted addressing) is read " \
        "through obstore)"
    with pytest.raises(ValueError, match=r"storage.client='native' cannot read 's3://b/': no AWS_ENDPOINT_URL"):
        D.ObjectStore("s3://b/", D.StorageOptions(client="native")).read_all("x")
    with pytest.raises(ValueError, match="client must be 'auto', 'native' or 'obstore', got 'curl'"):
        D.StorageOptions(client="curl")


def test_op_checks_its_arguments():
    import torch

    with pytest.raises(RuntimeError, match="numeric IPv4 or IPv6 address, got 'localhost'"):
        torch.ops.fastprep.http_get("localhost", 80, ["GET / HTTP/1.1\r\n\r\n"], 1, 1.0, 100)
    with pytest.raises(RuntimeError, match="port must be in"):
        torch.ops.fastprep.http_get("127.0.0.1", 0, [], 1, 1.0, 100)
    bodies, status, reasons, stats = torch.ops.fastprep.http_get("127.0.0.1", 1, [], 4, 1.0, 100)
    assert bodies == [] and status.numel() == 0 and reasons == [] and stats.tolist() == [0, 0, 0]


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
