"""The receiver's peak memory under hostile load, beside the same receiver under healthy load.

    python bench/ingest_memory.py [--seconds 10]

Three fresh receivers (separate processes), the peak RSS (VmHWM) of each:
  * healthy: 8 senders posting 2,000-point batches for --seconds;
  * hostile: 8 concurrent attackers for --seconds, cycling through a 64 KiB-class gzip of 64 MiB of
    `[],` with no token, the same bomb with a valid token, 100,000-deep JSON, and slow clients that
    send headers a byte at a time, while one healthy client keeps posting (its answers and latency
    are printed: it must keep being served);
  * flood: --connections (96) connections at once, each with a well-formed but wrong token sending
    an 8 MiB body with no run id up front, again and again for --seconds, while one healthy client
    keeps posting. The receiver's one budget for bytes held before a token is verified
    (Limits.preauth_bytes) is what keeps this flat: a per-request limit alone let it hold every body.
Target: peak RSS under 200 MB under attack and flood, with the healthy client served throughout.
Then, with --names N (default 1,000,000): one run posting N distinct metric names in requests of
50,000 points; the receiver's peak RSS, the points it left out past its per-run limit of names, and
the size of the default summary answer (one page).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SECRET = b"bench-memory-secret-bench-memory"
RECEIVER = r"""
import sys
from tuneplane.ingest.server import IngestServer
s = IngestServer(sys.argv[1], sys.argv[2].encode())
print(s.url, flush=True)
try:
    s.serve_forever()
except KeyboardInterrupt:
    pass
"""


def token(run: str) -> str:
    from tuneplane.ingest import mint_token

    return mint_token(SECRET, run)


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def start(tmp: str) -> tuple[subprocess.Popen[str], str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, str(Path(tmp) / "ingest.sqlite"), SECRET.decode()],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    host, port = proc.stdout.readline().strip()[len("http://") :].split(":")
    return proc, host, int(port)


def healthy(host: str, port: int, run: str, until: float, stats: dict[str, list[float]]) -> None:
    step = 0
    while time.time() < until:
        body = json.dumps(
            {"run_id": run, "points": [{"key": "loss", "step": step + i, "value": 0.5} for i in range(2000)]}
        )
        step += 2000
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            conn.request("POST", "/metrics", body, {"X-TunePlane-Token": token(run), "X-TunePlane-Run": run})
            response = conn.getresponse()
            response.read()
            conn.close()
            stats.setdefault("ok" if response.status == 200 else "refused", []).append(time.perf_counter() - t0)
        except OSError:
            stats.setdefault("failed", []).append(time.perf_counter() - t0)


def attack(host: str, port: int, kind: int, until: float, bombs: dict[str, bytes], counts: dict[str, int]) -> None:
    while time.time() < until:
        try:
            with socket.create_connection((host, port), timeout=30) as sock:
                if kind == 3:  # slowloris: a header byte at a time until the receiver gives up on us
                    sock.sendall(b"POST /metrics HTTP/1.1\r\n")
                    while time.time() < until:
                        sock.sendall(b"X")
                        time.sleep(0.5)
                    continue
                name = ("bomb-no-token", "bomb-valid-token", "deep-json")[kind]
                sock.sendall(bombs[name])
                answer = sock.recv(64)
                counts[answer[9:12].decode() or "closed"] = counts.get(answer[9:12].decode() or "closed", 0) + 1
        except OSError:
            counts["reset"] = counts.get("reset", 0) + 1


def flood(host: str, port: int, until: float, counts: dict[str, int]) -> None:
    """One connection after another: a wrong token and 8 MiB of body with no run id up front."""
    head = (
        f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {FLOOD_BODY}\r\nX-TunePlane-Token: {'0' * 64}\r\n\r\n"
    ).encode()
    chunk = b" " * (256 * 1024)
    while time.time() < until:
        sent = 0
        try:
            with socket.create_connection((host, port), timeout=30) as sock:
                sock.sendall(head)
                while sent < FLOOD_BODY:
                    sock.sendall(chunk)
                    sent += len(chunk)
                answer = sock.recv(64)
                counts[answer[9:12].decode() or "closed"] = counts.get(answer[9:12].decode() or "closed", 0) + 1
        except OSError:
            counts["cut early"] = counts.get("cut early", 0) + 1


FLOOD_BODY = 8 * 1024 * 1024


def names_phase(names: int) -> None:
    """One run posting `names` distinct metric names: what the receiver holds and answers."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, host, port = start(tmp)
        headers = {"X-TunePlane-Token": token("names"), "X-TunePlane-Run": "names"}
        left_out = 0
        conn = http.client.HTTPConnection(host, port, timeout=300)
        for start_at in range(0, names, 50_000):
            chunk = range(start_at, min(names, start_at + 50_000))
            body = json.dumps(
                {"run_id": "names", "points": [{"key": f"metric/{i}", "step": 0, "value": 1.0} for i in chunk]}
            )
            conn.request("POST", "/metrics", body, headers)
            left_out += json.loads(conn.getresponse().read()).get("over_limit", 0)
        t0 = time.perf_counter()
        conn.request("GET", "/api/runs/names/summary", headers=headers)
        answer = conn.getresponse().read()
        took = time.perf_counter() - t0
        conn.close()
        rss = peak_rss(proc.pid)
        proc.send_signal(2)
        proc.wait(60)
    print(
        f"names: {names} posted, {left_out} left out past the per-run limit; peak RSS {rss / 2**20:.1f} MB; "
        f"default summary answer {len(answer) / 1024:.0f} KiB in {took:.2f} s"
    )


def request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    return (head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode() + body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=96, help="flood connections at once")
    parser.add_argument("--names", type=int, default=1_000_000, help="metric names one run posts (0: skip)")
    args = parser.parse_args()
    unit = b"[]," * 1024
    bomb = gzip.compress(b'{"points":[' + unit * (64 * 1024 * 1024 // len(unit)) + b"[]]}", compresslevel=9)
    deep = b'{"run_id": "atk", "params": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    bombs = {
        "bomb-no-token": request("/metrics", bomb, {"Content-Encoding": "gzip"}),
        "bomb-valid-token": request(
            "/metrics", bomb, {"Content-Encoding": "gzip", "X-TunePlane-Run": "atk", "X-TunePlane-Token": token("atk")}
        ),
        "deep-json": request("/hparams", deep, {"X-TunePlane-Token": token("atk")}),
    }
    print(f"gzip bomb: {len(bomb) / 1024:.0f} KiB on the wire, 64 MiB inflated; deep JSON: 100,000 levels")
    rows = []
    for phase in ("healthy", "hostile", "flood"):
        with tempfile.TemporaryDirectory() as tmp:
            proc, host, port = start(tmp)
            until = time.time() + args.seconds
            stats: dict[str, list[float]] = {}
            counts: dict[str, int] = {}
            workers = [
                threading.Thread(target=healthy, args=(host, port, f"h{i}", until, stats))
                for i in range(8 if phase == "healthy" else 1)
            ]
            if phase == "hostile":
                workers += [
                    threading.Thread(target=attack, args=(host, port, i % 4, until, bombs, counts)) for i in range(8)
                ]
            if phase == "flood":
                workers += [
                    threading.Thread(target=flood, args=(host, port, until, counts)) for _ in range(args.connections)
                ]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(args.seconds + 60)
            rss = peak_rss(proc.pid)
            proc.send_signal(2)
            proc.wait(30)
            ok = stats.get("ok", [])
            p99 = sorted(ok)[int(0.99 * (len(ok) - 1))] * 1000 if ok else float("nan")
            rows.append(
                (phase, rss, len(ok), len(stats.get("refused", [])) + len(stats.get("failed", [])), p99, counts)
            )
    print(f"{'load':<9}{'peak RSS':>11}{'healthy ok':>12}{'not ok':>8}{'p99 ms':>9}  hostile answers")
    for phase, rss, served, bad, p99, counts in rows:
        print(f"{phase:<9}{rss / 2**20:>9.1f}MB{served:>12}{bad:>8}{p99:>9.0f}  {counts or '-'}")
    for phase, rss, served, bad, _, _ in rows[1:]:
        print(
            f"target: peak RSS under {phase} load < 200 MB: {'met' if rss < 200 * 2**20 else 'NOT met'} "
            f"({rss / rows[0][1]:.2f}x the healthy figure); healthy client served: "
            f"{'yes' if served > 0 and bad == 0 else 'NO'}"
        )
    if args.names:
        names_phase(args.names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
