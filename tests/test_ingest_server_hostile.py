"""Hostile clients against the real receiver (a subprocess with a memory cap, spoken to over raw
sockets) and hostile inputs against the SDK (in subprocesses). Every case runs under a timeout and
asserts one clear outcome: an HTTP status with a JSON error, or an exact ledger.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tuneplane.ingest import hparams, mint_token, summary

SECRET = b"a" * 32
RUN = "run-adv"
TOKEN = mint_token(SECRET, RUN)
CASE_TIMEOUT = 60
MEMORY_CAP = 1024 * 1024 * 1024  # the receiver's address-space-independent data limit
RECEIVER = r"""
import resource, sys
from tuneplane.ingest.server import IngestServer, Limits
cap = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
limits = Limits(header_timeout=1.5, body_timeout=2.0, idle_timeout=2.0, max_per_client=12, max_points=5000)
server = IngestServer(sys.argv[1], sys.argv[2].encode(), limits=limits)
print(server.url, flush=True)
server.serve_forever()
"""


@pytest.fixture(autouse=True)
def _case_timeout() -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"case ran over {CASE_TIMEOUT}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(CASE_TIMEOUT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


class Receiver:
    def __init__(self, db: Path) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, str(db), SECRET.decode(), str(MEMORY_CAP)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("http://"), self.proc.stderr.read() if self.proc.stderr else line
        self.host, port = line[len("http://") :].split(":")
        self.port = int(port)

    def peak_rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


@pytest.fixture(scope="module")
def rx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    receiver = Receiver(tmp_path_factory.mktemp("adv") / "ingest.sqlite")
    yield receiver
    err = receiver.stop()
    assert "Traceback" not in err, err


def connect(rx: Receiver, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.bind((source, 0))
    sock.connect((rx.host, rx.port))
    return sock


def read_answer(sock: socket.socket | Any) -> tuple[int, dict[str, Any], str]:
    """One HTTP response: status, JSON body, raw head. Fails on a connection closed without one.

    Pass `sock.makefile("rb")` to read several answers from one connection."""
    stream = sock.makefile("rb") if isinstance(sock, socket.socket) else sock
    status_line = stream.readline()
    if not status_line:
        raise AssertionError("connection closed without an answer")
    lines = [status_line.decode("latin-1").rstrip("\r\n")]
    while True:
        line = stream.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        lines.append(line.decode("latin-1").rstrip("\r\n"))
    status = int(lines[0].split()[1])
    length = next(int(h.split(":", 1)[1]) for h in lines[1:] if h.lower().startswith("content-length:"))
    return status, json.loads(stream.read(length)), "\r\n".join(lines)


def exchange(rx: Receiver, raw: bytes, source: str = "127.0.0.1") -> tuple[int, dict[str, Any]]:
    with connect(rx, source) as sock:
        sock.sendall(raw)
        status, body, _ = read_answer(sock)
    assert isinstance(body.get("error", ""), str)
    return status, body


def post(
    path: str, body: bytes, headers: dict[str, str] | None = None, *, token: str | None = TOKEN, length: bool = True
) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x"]
    if token is not None:
        lines.append(f"X-TunePlane-Token: {token}")
    if length:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def metrics(points: int = 1, run: str = RUN, **extra: Any) -> bytes:
    return json.dumps(
        {"run_id": run, "points": [{"key": "loss", "step": i, "value": 1.0, "ts": "t"} for i in range(points)], **extra}
    ).encode()


def bomb(inflated: int = 64 * 1024 * 1024) -> bytes:
    """The issue's attack: a small gzip of `{"points":[[],[],...]}` that inflates to `inflated` bytes."""
    pieces = [b'{"points":[']
    unit = b"[]," * 1024
    body = gzip.compress(b"".join(pieces) + unit * (inflated // len(unit)) + b"[]]}", compresslevel=9)
    return body


BOMB = bomb()


# ── authentication before the body ────────────────────────────────────────────────────────────
def test_the_bomb_is_small_on_the_wire() -> None:
    assert len(BOMB) < 300 * 1024


@pytest.mark.parametrize("token", [None, "x" * 64, "\xff\xfe" + "0" * 62, mint_token(SECRET, "other")])
def test_gzip_bomb_without_a_valid_token_is_refused(rx: Receiver, token: str | None) -> None:
    status, body = exchange(rx, post("/metrics", BOMB, {"Content-Encoding": "gzip"}, token=token))
    assert status in (401, 403, 413, 422), body
    assert any(word in body["error"].lower() for word in ("token", "limit", "run_id"))


def test_gzip_bomb_with_a_valid_token_is_refused_by_size(rx: Receiver) -> None:
    status, body = exchange(rx, post("/metrics", BOMB, {"Content-Encoding": "gzip", "X-TunePlane-Run": RUN}))
    assert status == 413 and "decompressed" in body["error"]


@pytest.mark.parametrize(
    ("token", "status"), [(None, 401), ("nothex", 403), ("\xff\xfe", 403), (mint_token(SECRET, "other"), 403)]
)
def test_refused_before_the_body_is_sent(rx: Receiver, token: str | None, status: int) -> None:
    """The answer comes while the client still holds its 1 MB body back: nothing was read."""
    head = post("/metrics", b"", {"X-TunePlane-Run": RUN}, token=token, length=False)
    head = head.replace(b"\r\n\r\n", b"\r\nContent-Length: 1000000\r\n\r\n")
    with connect(rx) as sock:
        sock.sendall(head)
        code, body, _ = read_answer(sock)
    assert code == status and "token" in body["error"].lower()


def test_token_header_with_bad_bytes_gets_an_answer(rx: Receiver) -> None:
    raw = post("/metrics", metrics(), token=None).replace(b"Host: x", b"Host: x\r\nX-TunePlane-Token: \xff\xfe")
    assert exchange(rx, raw)[0] == 403


def test_two_token_headers_are_ambiguous(rx: Receiver) -> None:
    raw = post("/metrics", metrics()).replace(b"Host: x", b"Host: x\r\nX-TunePlane-Token: " + TOKEN.encode())
    assert exchange(rx, raw)[0] == 400


def test_run_header_and_body_must_agree(rx: Receiver) -> None:
    status, body = exchange(rx, post("/metrics", metrics(run="other"), {"X-TunePlane-Run": RUN}))
    assert status == 422 and "differs" in body["error"]


def test_large_body_with_run_id_late_is_refused(rx: Receiver) -> None:
    points = json.loads(metrics(2000))["points"]
    raw = json.dumps({"points": points, "run_id": RUN}).encode()
    assert len(raw) > 64 * 1024
    status, body = exchange(rx, post("/metrics", raw))
    assert status == 422 and "first field" in body["error"]


# ── framing ───────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    ("extra", "status", "words"),
    [
        ("Content-Length: 5", 400, "Content-Length headers"),
        ("Transfer-Encoding: chunked", 400, "both"),
        ("Transfer-Encoding: identity", 400, "both"),
    ],
)
def test_ambiguous_framing_is_refused(rx: Receiver, extra: str, status: int, words: str) -> None:
    raw = post("/metrics", metrics()).replace(b"Host: x", f"Host: x\r\n{extra}".encode())
    code, body = exchange(rx, raw)
    assert code == status and words in body["error"]


@pytest.mark.parametrize("value", ["+5", "5_0", "-1", " 0x10", "1e3", "٣"])
def test_odd_content_lengths_are_refused(rx: Receiver, value: str) -> None:
    raw = post("/metrics", b"", length=False).replace(b"Host: x", f"Host: x\r\nContent-Length: {value}".encode())
    code, body = exchange(rx, raw)
    assert code == 400 and "Content-Length" in body["error"]


def test_chunked_body_needs_a_length(rx: Receiver) -> None:
    raw = post("/metrics", b"0\r\n\r\n", {"Transfer-Encoding": "chunked"}, length=False)
    assert exchange(rx, raw)[0] == 411


def test_huge_declared_length_is_refused_unread(rx: Receiver) -> None:
    head = post("/metrics", b"", length=False).replace(b"Host: x", b"Host: x\r\nContent-Length: 999999999999")
    code, body = exchange(rx, head)
    assert code == 413 and "limit" in body["error"]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /metrics HTTP/9.9\r\nHost: x\r\n\r\n", 505),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"POST /metrics HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"POST /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) + b"\r\n", 431),
    ],
)
def test_broken_request_heads_get_json_answers(rx: Receiver, raw: bytes, status: int) -> None:
    assert exchange(rx, raw)[0] == status


def test_unsupported_method_and_path(rx: Receiver) -> None:
    assert exchange(rx, b"PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")[0] == 405
    assert exchange(rx, post("/nowhere", metrics()))[0] == 404


# ── bodies ────────────────────────────────────────────────────────────────────────────────────
def deep(levels: int, inner: str = "") -> bytes:
    return (
        json.dumps({"run_id": RUN, "params": {"x": "@"}}).replace('"@"', "[" * levels + inner + "]" * levels).encode()
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"run_id": "run-adv", "points": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 413),
        (deep(100_000), 413),
        (deep(5_000), 422),
        (deep(40), 422),
        (b"\xff\xfe{}", 400),
        (b'{"run_id": "run-adv", "points": [], "x": "\\ud800"}', 200),
        (b"[1, 2]", 400),
        (b'{"points": []}', 422),
        (b'{"run_id": "' + b"r" * 300 + b'", "points": []}', 422),
        (b'{"run_id": "run\\u0000adv", "points": []}', 422),
    ],
)
def test_hostile_json_bodies(rx: Receiver, body: bytes, status: int) -> None:
    path = "/hparams" if b'"params"' in body else "/metrics"
    code, answer = exchange(rx, post(path, body))
    assert code == status, answer
    if status >= 400:
        assert answer["error"]


@pytest.mark.parametrize(
    "spelled",
    [b"NaN", b"Infinity", b"-Infinity", b"null", b"1e999", b"-1e999", pytest.param(b"1" * 400, id="400-digit-integer")],
)
def test_a_value_that_is_not_a_finite_number_is_left_out_and_the_batch_is_stored(rx: Receiver, spelled: bytes) -> None:
    """Python's json writes NaN and Infinity bare; an upstream client whose batch got a 4xx resends it
    forever, so one overflowed loss would cost the run every later point. The finite points of the
    batch, before and after, are stored; the answer says what was left out and why."""
    run = f"run-nan-{spelled[:12].decode()}"
    body = (
        b'{"run_id": "' + run.encode() + b'", "points": [{"key": "loss", "step": 1, "value": 2.5}, '
        b'{"key": "loss", "step": 2, "value": ' + spelled + b'}, {"key": "loss", "step": 3, "value": 0.5}]}'
    )
    code, answer = exchange(rx, post("/metrics", body, token=mint_token(SECRET, run)))
    assert code == 200, answer
    assert (answer["stored"], answer["dropped"]) == (2, 1), answer
    assert answer["dropped_points"][0].startswith("points[1] 'loss' step 2: ") and "finite" in answer["dropped_why"]
    assert summary(rx.db, run)["loss"] == {
        **summary(rx.db, run)["loss"],
        "count": 2,
        "last": 0.5,
        "min": 0.5,
        "max": 2.5,
    }


@pytest.mark.parametrize(
    ("point", "field"),
    [
        ({"key": "k", "step": 1, "value": "NaN"}, "value"),
        ({"key": "k", "step": 1.5, "value": float("inf")}, "step"),
        ({"key": "k", "step": 10**30, "value": 1.0}, "step"),
        ({"key": "k" * 600, "step": 1, "value": 1.0}, "key"),
        ({"key": "k", "step": 1, "value": "1.0"}, "value"),
    ],
)
def test_bad_points_are_422_and_nothing_stored(rx: Receiver, point: dict[str, Any], field: str) -> None:
    body = json.dumps({"run_id": "run-bad", "points": [point]}).encode()
    code, answer = exchange(rx, post("/metrics", body, token=mint_token(SECRET, "run-bad")))
    assert code == 422 and any(f".{field}" in p for p in answer["problems"])
    assert summary(rx.db, "run-bad") == {}


def test_too_many_points_in_one_request(rx: Receiver) -> None:
    code, answer = exchange(rx, post("/metrics", metrics(5001)))
    assert code == 413 and "5000" in answer["error"]


def test_too_many_hparams_in_one_request(rx: Receiver) -> None:
    body = json.dumps({"run_id": RUN, "params": {f"p{i}": i for i in range(10_001)}}).encode()
    code, answer = exchange(rx, post("/hparams", body))
    assert code == 413 and "10000" in answer["error"]


@pytest.mark.parametrize(
    ("encoding", "raw", "status"),
    [
        ("gzip", b"not gzip at all", 400),
        ("gzip", gzip.compress(metrics(), mtime=0)[:-12], 400),
        ("br", metrics(), 415),
        ("gzip, gzip", metrics(), 415),
    ],
    ids=["not-gzip", "truncated-gzip", "brotli", "gzip-twice"],
)
def test_bad_encodings(rx: Receiver, encoding: str, raw: bytes, status: int) -> None:
    assert exchange(rx, post("/metrics", raw, {"Content-Encoding": encoding}))[0] == status


def test_pipelined_requests_are_all_answered(rx: Receiver) -> None:
    with connect(rx) as sock:
        sock.sendall(post("/metrics", metrics(2)) + post("/metrics", metrics(3)))
        stream = sock.makefile("rb")
        assert read_answer(stream)[0] == 200
        assert read_answer(stream)[0] == 200
    assert summary(rx.db, RUN)["loss"]["count"] >= 3


# ── slow and many clients ─────────────────────────────────────────────────────────────────────
def test_slow_headers_get_408_within_the_deadline(rx: Receiver) -> None:
    with connect(rx) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /metrics HTTP/1.1\r\n")
        for _ in range(40):
            try:
                sock.sendall(b"X: y\r\n")
            except OSError:
                break
            time.sleep(0.25)
            if time.monotonic() - started > 4:
                break
        status, body, _ = read_answer(sock)
    assert status == 408 and "deadline" in body["error"]


def test_slow_body_gets_408(rx: Receiver) -> None:
    with connect(rx) as sock:
        sock.sendall(
            post("/metrics", b"", {"X-TunePlane-Run": RUN}, length=False).replace(
                b"\r\n\r\n", b"\r\nContent-Length: 100\r\n\r\n"
            )
            + b'{"run_id"'
        )
        status, body, _ = read_answer(sock)
    assert status == 408


def test_idle_connection_is_closed(rx: Receiver) -> None:
    with connect(rx) as sock:
        sock.sendall(post("/metrics", metrics(1)))
        assert read_answer(sock)[0] == 200
        sock.settimeout(15)
        assert sock.recv(100) == b""  # closed by the receiver after the idle deadline


def test_connection_cap_per_client_answers_503_and_others_are_served(rx: Receiver) -> None:
    held = [connect(rx) for _ in range(12)]
    try:
        time.sleep(0.2)
        with connect(rx) as extra:
            status, body, _ = read_answer(extra)
        assert status == 503 and "retry" in body["error"]
        # Another client address is still served while this one is at its cap.
        assert exchange(rx, post("/metrics", metrics(1)), source="127.0.0.2")[0] == 200
    finally:
        for sock in held:
            sock.close()


def test_healthy_client_is_served_during_eight_hostile_bodies(rx: Receiver) -> None:
    hostile = []
    for index in range(8):
        sock = connect(rx, source=f"127.0.1.{index + 1}")
        kind = index % 3
        if kind == 0:
            sock.sendall(post("/metrics", BOMB, {"Content-Encoding": "gzip", "X-TunePlane-Run": RUN}))
        elif kind == 1:
            sock.sendall(post("/hparams", deep(100_000)))
        else:
            sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\n")  # and then nothing: a slow client
        hostile.append(sock)
    started = time.monotonic()
    answers = [
        exchange(
            rx,
            post("/metrics", metrics(10, run="run-healthy"), token=mint_token(SECRET, "run-healthy")),
            source="127.0.0.3",
        )[0]
        for _ in range(5)
    ]
    assert answers == [200] * 5 and time.monotonic() - started < 30
    for sock in hostile:
        sock.close()
    assert summary(rx.db, "run-healthy")["loss"]["count"] == 10


def test_a_client_that_resets_mid_body_is_no_internal_error(tmp_path: Path) -> None:
    """A sender cut off while its body is read (a job killed, a reset by the network): the receiver
    lets the connection go without calling it its own error, and goes on serving."""
    receiver = Receiver(tmp_path / "ingest.sqlite")
    try:
        for _ in range(3):
            sock = connect(receiver)
            sock.sendall(post("/metrics", metrics(200))[:-500])
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # with a zero linger: a reset, not a polite close
        assert exchange(receiver, post("/metrics", metrics(3)))[0] == 200
    finally:
        err = receiver.stop()
    assert "internal error" not in err and "Traceback" not in err, err


def test_receiver_survived_everything_and_stayed_small(rx: Receiver) -> None:
    assert rx.alive()
    assert exchange(rx, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200
    assert rx.peak_rss() < 200 * 1024 * 1024, rx.peak_rss()


# ── the SDK, in subprocesses ──────────────────────────────────────────────────────────────────
SDK_RUNNER = r"""
import json, os, resource, signal, sys
limit = int(os.environ.pop("CASE_FSIZE", "0"))
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
cap = 1024 * 1024 * 1024
resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
import tuneplane.report as report
checks = []
exec(sys.argv[1])
report.finish(timeout=float(os.environ.get("CASE_FINISH", "20")))
print(json.dumps({"stats": report.stats(), "checks": checks}))
"""


def sdk(code: str, env_extra: dict[str, str], tmp_path: Path, run: str = "run-sdk") -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_RUN_ID": run,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, run),
            "TUNEPLANE_OUT_DIR": str(tmp_path / "out"),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
            "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
            "TUNEPLANE_REPORT_RETRY_CAP": "0.1",
            **env_extra,
        }
    )
    (tmp_path / "out").mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", SDK_RUNNER, code], env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


def balanced(stats: dict[str, Any]) -> bool:
    ledger = stats["ledger"]
    return ledger["delivered"] + ledger["dropped"] + ledger["refused"] + ledger["pending"] == ledger["logged"]


@pytest.fixture()
def down_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_disk_full_mid_spill_keeps_the_ledger_and_what_was_written(
    tmp_path: Path, down_port: int, rx: Receiver
) -> None:
    """The receiver is away, the overflow file's disk fills at 200 KiB: what did not fit is dropped
    as 'disk full', what fit is kept for the collector, and the ledger balances at every moment."""
    code = """
for step in range(40_000):
    report.log({"loss": step * 1.0, "acc": 0.5, "lr": 0.1, "gn": 1.5}, step=step)
    if step % 5000 == 0:
        checks.append(report.stats()["ledger"])
"""
    env = {
        "TUNEPLANE_JOB_ENDPOINT": f"http://127.0.0.1:{down_port}",
        "CASE_FSIZE": str(200 * 1024),
        "TUNEPLANE_REPORT_BUFFER_BYTES": str(256 * 1024),
        "CASE_FINISH": "0.2",
    }
    result = sdk(code, env, tmp_path)
    stats = result["stats"]
    assert all(c["balanced"] for c in result["checks"]) and balanced(stats)
    assert stats["logged_points"] == 160_000
    assert stats["dropped"].get("disk full", 0) > 0 and stats["delivered_points"] == 0
    kept = stats["pending_points"]
    assert kept > 0 and kept + stats["dropped_points"] == 160_000
    assert "no TUNEPLANE_OUT_DIR" not in result["stderr"] and "disk full" in result["stderr"]
    unsent = list((tmp_path / "out" / ".tuneplane").glob("report-unsent-*.jsonl"))
    assert len(unsent) == 1
    lines = unsent[0].read_bytes().splitlines()
    from tuneplane.collector.sources import unsent_points  # the reader that uploads them

    problems: dict[str, int] = {}
    # Whole lines only, exactly the kept.
    assert sum(len(values) for line in lines for _, _, values in unsent_points(line, problems)) == kept
    assert problems == {}
    # The collector uploads them afterwards: everything kept reaches the store.
    env_c = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env_c.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_RUN_ID": "run-sdk",
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, "run-sdk"),
            "TUNEPLANE_OUT_DIR": str(tmp_path / "out"),
            "TUNEPLANE_JOB_ENDPOINT": f"http://{rx.host}:{rx.port}",
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tuneplane.collector", "--once"],
        env=env_c,
        capture_output=True,
        text=True,
        timeout=CASE_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    got = summary(rx.db, "run-sdk")
    assert sum(v["count"] for v in got.values()) == kept
    assert not list((tmp_path / "out" / ".tuneplane").glob("report-unsent-*.jsonl"))


def test_ledger_balances_at_every_moment_against_a_healthy_receiver(tmp_path: Path, rx: Receiver) -> None:
    code = """
import math
for step in range(20_000):
    report.log({"loss": 1.0, "bad": math.nan if step % 7 == 0 else 1.0, "": 1.0}, step=step)
    if step % 1000 == 0:
        checks.append(report.stats()["ledger"])
"""
    result = sdk(code, {"TUNEPLANE_JOB_ENDPOINT": f"http://{rx.host}:{rx.port}"}, tmp_path, run="run-ledger")
    stats = result["stats"]
    assert all(c["balanced"] for c in result["checks"]), result["checks"]
    assert balanced(stats) and stats["pending_points"] == 0
    assert stats["dropped"]["non-finite value"] == len(range(0, 20_000, 7))
    assert stats["dropped"]["empty key"] == 20_000
    assert summary(rx.db, "run-ledger")["bad"]["count"] == 20_000 - len(range(0, 20_000, 7))


def test_more_than_ten_thousand_hparams_are_all_stored(tmp_path: Path, rx: Receiver) -> None:
    code = 'report.init(hparams={f"layer{i}.width": i for i in range(25_000)}, monitor_hardware=False)'
    result = sdk(code, {"TUNEPLANE_JOB_ENDPOINT": f"http://{rx.host}:{rx.port}"}, tmp_path, run="run-hp")
    assert result["stats"]["hparams_sent"] == 25_000 and result["stats"]["hparams_dropped"] == {}
    stored = hparams(rx.db, "run-hp")
    assert len(stored) == 25_000 and stored["layer24999.width"] == 24_999


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        ("bad = {}; bad['self'] = bad", "self-referencing value"),
        (
            "bad = {}\nnode = bad\nfor _ in range(5000):\n    node['x'] = {}\n    node = node['x']",
            "nested deeper than 16 levels",
        ),
    ],
)
def test_a_bad_hparam_is_dropped_alone(tmp_path: Path, rx: Receiver, build: str, reason: str) -> None:
    code = build + '\nreport.init(hparams={"lr": 0.1, "model": {"bad": bad, "name": "gpt"}}, monitor_hardware=False)'
    run = f"run-hp-{abs(hash(build)) % 1000}"
    result = sdk(code, {"TUNEPLANE_JOB_ENDPOINT": f"http://{rx.host}:{rx.port}"}, tmp_path, run=run)
    assert result["stats"]["hparams_dropped"] == {reason: 1}
    assert hparams(rx.db, run) == {"lr": 0.1, "model.name": "gpt"}


def test_hparams_split_on_413_like_metrics(tmp_path: Path, rx: Receiver) -> None:
    """The receiver under test caps points at 5000; its hparams cap is 10,000: a 20,000-key request
    would be refused, so the SDK's batches of 1000 are what get through (and 413 halves them)."""
    code = 'report.init(hparams={f"p{i}": "v" * 200 for i in range(12_000)}, monitor_hardware=False, batch_points=100)'
    result = sdk(code, {"TUNEPLANE_JOB_ENDPOINT": f"http://{rx.host}:{rx.port}"}, tmp_path, run="run-hp413")
    assert result["stats"]["hparams_sent"] == 12_000
    assert len(hparams(rx.db, "run-hp413")) == 12_000


def test_metrics_batch_over_the_receiver_point_cap_is_split(tmp_path: Path, rx: Receiver) -> None:
    code = """
for step in range(3000):
    report.log({f"k{i}": 1.0 for i in range(4)}, step=step)
"""
    env = {"TUNEPLANE_JOB_ENDPOINT": f"http://{rx.host}:{rx.port}", "TUNEPLANE_REPORT_BATCH_POINTS": "12000"}
    result = sdk(code, env, tmp_path, run="run-split")
    stats = result["stats"]
    assert stats["delivered_points"] == 12_000 and stats["refused_points"] == 0 and balanced(stats)
    assert summary(rx.db, "run-split")["k0"]["count"] == 3000


# ── text a column cannot hold ─────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    "body",
    [
        b'{"run_id": "run-adv", "points": [{"key": "loss\\ud800", "step": 1, "value": 1.0}]}',
        b'{"run_id": "run-adv", "points": [{"key": "loss", "step": 1, "value": 1.0, "ts": "\\udfff"}]}',
        b'{"run_id": "run-adv", "params": {"lr\\uDBFF": 1}}',
        b'{"run_id": "run-adv", "params": {"lr": "\\ud800"}}',
        b'{"run_id": "run-adv", "event": "running", "ts": "\\ud800"}',
        b'{"run_id": "run-adv", "samples": [{"gpu": "\\ud800"}]}',
        b'{"run_id": "run-adv", "blocks": [{"keys": ["k\\ud800"], "rows": ""}]}',
        b'{"run_id": "run-adv", "batch_id": "b\\ud800", "points": [{"key": "loss", "step": 1, "value": 1.0}]}',
    ],
)
def test_a_lone_surrogate_is_a_clear_422_not_an_internal_error(rx: Receiver, body: bytes) -> None:
    path = {b"params": "/hparams", b"event": "/lifecycle", b"samples": "/hardware"}.get(
        next((k for k in (b"params", b"event", b"samples") if k in body), b""), "/metrics"
    )
    status, answer = exchange(rx, post(path, body))
    assert status == 422 and "surrogate" in json.dumps(answer), answer
    # a valid pair is one character, and fine
    status, answer = exchange(
        rx,
        post("/metrics", b'{"run_id": "run-adv", "points": [{"key": "pair\\ud83d\\ude00", "step": 1, "value": 2.0}]}'),
    )
    assert status == 200, answer
    assert summary(rx.db, RUN)["pair\U0001f600"]["last"] == 2.0


def test_a_lone_surrogate_key_is_dropped_by_the_sdk_not_sent() -> None:
    from tuneplane.report._values import key_problem

    assert key_problem("loss\ud800") is not None and key_problem("pair\U0001f600") is None
