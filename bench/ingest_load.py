"""Receiver load: 1, 16 and 64 concurrent senders, our receiver beside the same receiver with the
listen backlog of 5 it used to have, and beside a floor: a bare HTTP answerer (no parsing, no
store) with the same backlog, measured with the same senders in the same run.

    python bench/ingest_load.py [--senders 1,16,64] [--requests 40] [--points 200] [--load N]

Each sender is its own process and opens a new connection per request (the worst case for the
accept queue). Printed per configuration: connect time p50/p99, request time p99, points/s, failed
requests, the store's bytes per point, and how often the kernel's accept queue overflowed during the
run (`ListenOverflows`, machine-wide: a stall the receiver caused shows there; a connect slowed only
because the machine is busy does not). `--load N` keeps N busy-looping processes running during the
measurements, a loaded machine on purpose. Targets: connect p99 <= 100 ms at 64 senders,
<= 30 B/point; the floor row says how close to that the machine itself lets anyone get.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRET = "bench-load-secret-bench-load-secret"
RECEIVER = r"""
import sys
from tuneplane.ingest import server as srv
srv._Server.request_queue_size = int(sys.argv[3])
s = srv.IngestServer(sys.argv[1], sys.argv[2].encode())
print(s.url, flush=True)
try:
    s.serve_forever()
except KeyboardInterrupt:
    pass
"""
FLOOR = r"""
import socket, sys, threading
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n" \
         b'{"ok":true}'
def serve(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk
        conn.sendall(ANSWER)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(int(sys.argv[3]))
print(f"http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
try:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
except KeyboardInterrupt:
    pass
"""
BUSY = "import time\nend = time.time() + float(__import__('sys').argv[1])\nwhile time.time() < end:\n    pass\n"
SENDER = r"""
import http.client, json, socket, sys, time
from tuneplane.ingest import mint_token
host, port, run = sys.argv[1], int(sys.argv[2]), sys.argv[3]
requests, points, start_at = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
token = mint_token(sys.argv[7].encode(), run)
while time.time() < start_at:
    time.sleep(0.001)
connects, totals, failed = [], [], 0
for r in range(requests):
    body = json.dumps({"run_id": run, "points": [{"key": f"k{i % 8}", "step": r * points + i, "value": 0.5,
                       "ts": "2026-01-01T00:00:00.000000+00:00"} for i in range(points)]})
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.connect()
        t1 = time.perf_counter()
        conn.request("POST", "/metrics", body, {"X-TunePlane-Token": token, "X-TunePlane-Run": run})
        resp = conn.getresponse(); resp.read(); conn.close()
        if resp.status != 200:
            failed += 1
    except OSError:
        failed += 1
        t1 = time.perf_counter()
    connects.append(t1 - t0); totals.append(time.perf_counter() - t0)
print(json.dumps({"connects": connects, "totals": totals, "failed": failed}))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def listen_overflows() -> int:
    """The kernel's count of connections dropped because an accept queue was full (0 when unknown)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(table.get("ListenOverflows", 0))
    return 0


def run_config(server: str, backlog: int, senders: int, requests: int, points: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "ingest.sqlite"
        rx = subprocess.Popen(
            [sys.executable, "-c", server, str(db), SECRET, str(backlog)], stdout=subprocess.PIPE, text=True
        )
        assert rx.stdout is not None
        url = rx.stdout.readline().strip()
        host, port = url[len("http://") :].split(":")
        overflows = listen_overflows()
        start_at = time.time() + 1.5 + senders * 0.03  # every sender starts at the same instant
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    SENDER,
                    host,
                    port,
                    f"run-{i}",
                    str(requests),
                    str(points),
                    str(start_at),
                    SECRET,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(senders)
        ]
        results = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
        elapsed = time.time() - start_at
        overflows = listen_overflows() - overflows
        rx.send_signal(2)
        rx.wait(30)
        if db.exists():
            con = sqlite3.connect(db)
            stored = con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
            con.execute("VACUUM")
            size = con.execute("PRAGMA page_count").fetchone()[0] * con.execute("PRAGMA page_size").fetchone()[0]
            con.close()
        else:  # the floor stores nothing
            stored = (senders * requests - sum(r["failed"] for r in results)) * points
            size = 0
    connects = [c for r in results for c in r["connects"]]
    totals = [t for r in results for t in r["totals"]]
    return {
        "connect_p50_ms": pct(connects, 0.5) * 1000,
        "connect_p99_ms": pct(connects, 0.99) * 1000,
        "request_p99_ms": pct(totals, 0.99) * 1000,
        "points_per_s": stored / elapsed,
        "failed": sum(r["failed"] for r in results),
        "bytes_per_point": size / max(1, stored),
        "stored": stored,
        "overflows": overflows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--senders", default="1,16,64")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--load", type=int, default=0, help="busy-looping processes kept running meanwhile")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY, "900"]) for _ in range(max(0, args.load))]
    try:
        report(args)
    finally:
        for proc in busy:  # ours, by pid
            proc.kill()
            proc.wait(10)
    return 0


def report(args: argparse.Namespace) -> None:
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, {args.load} busy processes; "
        f"each sender: {args.requests} requests x {args.points} points, new connection each"
    )
    print(
        f"{'receiver':<22}{'senders':>8}{'conn p50':>10}{'conn p99':>10}{'req p99':>10}{'points/s':>11}"
        f"{'failed':>8}{'B/point':>9}{'overflows':>10}"
    )
    configs = (
        ("ours (backlog 1024)", RECEIVER, 1024),
        ("old backlog 5", RECEIVER, 5),
        ("floor: bare answerer", FLOOR, 1024),
    )
    for senders in [int(x) for x in args.senders.split(",")]:
        for name, server, backlog in configs:
            row = run_config(server, backlog, senders, args.requests, args.points)
            per_point = f"{row['bytes_per_point']:>9.1f}" if row["bytes_per_point"] else f"{'-':>9}"
            print(
                f"{name:<22}{senders:>8}{row['connect_p50_ms']:>9.1f}m{row['connect_p99_ms']:>9.1f}m"
                f"{row['request_p99_ms']:>9.1f}m{row['points_per_s']:>11.0f}{row['failed']:>8}"
                f"{per_point}{row['overflows']:>10}",
                flush=True,
            )
    print(
        "targets: connect p99 <= 100 ms at 64 senders; <= 30 B per stored point (ms = milliseconds);\n"
        "overflows: connections the kernel dropped from a full accept queue during that run (machine-wide)"
    )


if __name__ == "__main__":
    sys.exit(main())
