"""What a client without a valid token can cost the receiver, all connections together, and what
`--secret-file` may be. A real `tp ingest serve` process, spoken to over sockets on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ingest import ServeProcess
from support.wait import until

from tuneplane.ingest import mint_token, summary
from tuneplane.ingest.server import IngestServer, Limits

SECRET = b"p" * 32
FLOOD_CONNECTIONS = 96
FLOOD_BODY = 8 * 1024 * 1024
BAD_TOKEN = "0" * 64


class Serve(ServeProcess):
    """`tp ingest serve` in its own process; `peak()` is its peak resident memory (VmHWM)."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, SECRET)

    def peak(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")


@pytest.fixture()
def serve(tmp_path: Path) -> Iterator[Serve]:
    server = Serve(tmp_path)
    yield server
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.communicate()


def _flood(serve: Serve, sent: list[int]) -> None:
    """One connection: headers with a well-formed but wrong token, then 8 MiB with no run id up front."""
    head = (
        f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {FLOOD_BODY}\r\n"
        f"X-TunePlane-Token: {BAD_TOKEN}\r\nContent-Type: application/json\r\n\r\n"
    ).encode()
    chunk = b" " * (256 * 1024)
    total = 0
    try:
        with socket.create_connection((serve.host, serve.port), timeout=30) as sock:
            sock.sendall(head)
            while total < FLOOD_BODY:
                sock.sendall(chunk)
                total += len(chunk)
    except OSError:
        pass  # the receiver closed early: what this test wants
    sent.append(total)


def _healthy(serve: Serve, run: str) -> int:
    conn = http.client.HTTPConnection(serve.host, serve.port, timeout=30)
    body = json.dumps({"run_id": run, "points": [{"key": "loss", "step": 1, "value": 0.5}]})
    conn.request("POST", "/metrics", body, {"X-TunePlane-Token": mint_token(SECRET, run)})
    status = conn.getresponse().status
    conn.close()
    return status


def test_bodies_without_a_valid_token_share_one_memory_budget(serve: Serve) -> None:
    """96 connections, a wrong token each and 8 MiB of body: the receiver keeps one budget for what it
    buffers before authentication, so it never holds the 768 MiB they send, and a job with a good
    token is served meanwhile and after."""
    base = serve.peak()
    sent: list[int] = []
    threads = [threading.Thread(target=_flood, args=(serve, sent)) for _ in range(FLOOD_CONNECTIONS)]
    for thread in threads:
        thread.start()
    during = _healthy(serve, "run-healthy")
    for thread in threads:
        thread.join(120)
    assert len(sent) == FLOOD_CONNECTIONS
    assert during == 200 and _healthy(serve, "run-healthy") == 200
    grown = serve.peak() - base
    assert grown < 64 * 1024 * 1024, f"the receiver grew by {grown / 2**20:.0f} MiB under the flood"
    err = serve.stop()
    assert "Traceback" not in err
    assert summary(serve.db, "run-healthy")["loss"]["count"] == 1


# ── --secret-file ─────────────────────────────────────────────────────────────────────────────
def _serve_with_secret(tmp_path: Path, secret: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneplane",
            "ingest",
            "serve",
            "--port",
            "0",
            "--db",
            str(tmp_path / "ingest.sqlite"),
            "--secret-file",
            str(secret),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_fifo_as_the_secret_file_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "secret.fifo"
    os.mkfifo(fifo)
    result = _serve_with_secret(tmp_path, fifo)
    assert result.returncode == 2, result.stderr
    assert str(fifo) in result.stderr and "not a regular file" in result.stderr and "hint:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_as_the_secret_file_is_refused_unread(tmp_path: Path, path: str) -> None:
    result = _serve_with_secret(tmp_path, Path(path))
    assert result.returncode == 2, result.stderr
    assert path in result.stderr and "not a regular file" in result.stderr and "Traceback" not in result.stderr


def test_a_folder_as_the_secret_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    folder.mkdir()
    result = _serve_with_secret(tmp_path, folder)
    assert result.returncode == 2, result.stderr
    assert str(folder) in result.stderr and "not a regular file" in result.stderr


def test_a_large_file_as_the_secret_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "secret"
    big.write_bytes(b"x" * (1024 * 1024))
    result = _serve_with_secret(tmp_path, big)
    assert result.returncode == 2, result.stderr
    assert str(big) in result.stderr and "bytes" in result.stderr and "hint:" in result.stderr


def test_past_the_budget_new_bodies_get_503_and_a_job_that_names_its_run_is_served(tmp_path: Path) -> None:
    """Slow clients with a wrong token hold the whole budget: a body whose token can only be checked
    once it is read waits (503, Retry-After); a request that names its run in X-TunePlane-Run (as our
    SDK does) is verified before its body and never needs the budget."""
    limits = Limits(preauth_bytes=4 * 64 * 1024, body_timeout=20.0)
    with IngestServer(tmp_path / "ingest.sqlite", SECRET, limits=limits) as server:
        host, port = server.url[len("http://") :].split(":")
        holders = []
        for _ in range(4):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(
                (
                    f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {FLOOD_BODY}\r\n"
                    f"X-TunePlane-Token: {BAD_TOKEN}\r\n\r\n"
                ).encode()
                + b" " * 100
            )
            holders.append(sock)
        body = json.dumps({"run_id": "run-ok", "points": [{"key": "loss", "step": 1, "value": 0.5}]})
        token = mint_token(SECRET, "run-ok", "exp")

        def unnamed() -> tuple[int, str | None, dict[str, str]]:
            """The body on a new connection, its run not named: (status, Retry-After, answer)."""
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                conn.request("POST", "/metrics", body, {"X-TunePlane-Token": token})
                response = conn.getresponse()
                return response.status, response.getheader("Retry-After"), json.loads(response.read())
            finally:
                conn.close()

        # until the four holders have reached the budget (they are read in threads)
        status, retry_after, answer = until(
            unnamed, lambda seen: seen[0] == 503, 10, "the holders never took the budget (no 503)", 0.1
        )
        assert status == 503 and retry_after == "1", answer
        assert "token is not verified yet" in answer["error"]
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/metrics", body, {"X-TunePlane-Token": token, "X-TunePlane-Run": "run-ok"})
        assert conn.getresponse().status == 200
        conn.close()
        for sock in holders:
            sock.close()
        assert summary(server.store.path, "run-ok", experiment="exp")["loss"]["count"] == 1


def test_the_sdk_is_served_while_slow_clients_hold_the_whole_budget(tmp_path: Path) -> None:
    limits = Limits(preauth_bytes=2 * 64 * 1024, body_timeout=30.0)
    with IngestServer(tmp_path / "ingest.sqlite", SECRET, limits=limits) as server:
        host, port = server.url[len("http://") :].split(":")
        holders = []
        for _ in range(4):  # two hold the budget; the others are refused it
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(
                (
                    f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {FLOOD_BODY}\r\n"
                    f"X-TunePlane-Token: {BAD_TOKEN}\r\n\r\n"
                ).encode()
                + b" " * 100
            )
            holders.append(sock)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
        env.update(
            {
                "TUNEPLANE_JOB_ENABLED": "1",
                "TUNEPLANE_JOB_RUN_ID": "run-sdk",
                "TUNEPLANE_JOB_ENDPOINT": server.url,
                "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, "run-sdk", "exp"),
            }
        )
        code = (
            "import json, tuneplane.report as r\nfor s in range(500):\n    r.log({'loss': 1.0 / (s + 1)}, step=s)\n"
            "r.finish(timeout=20)\nprint(json.dumps(r.stats()))"
        )
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        for sock in holders:
            sock.close()
        assert proc.returncode == 0, proc.stderr
        stats = json.loads(proc.stdout.strip().splitlines()[-1])
        assert stats["delivered_points"] == 500 and stats["retries"] == 0, (stats, proc.stderr)
        assert summary(server.store.path, "run-sdk", experiment="exp")["loss"]["count"] == 500
