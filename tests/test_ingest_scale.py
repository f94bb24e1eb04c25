"""The receiver under many jobs: compact storage, a clean close on SIGTERM, concurrent senders served."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tuneplane.ingest import mint_token, series, summary
from tuneplane.ingest.store import MetricStore

SECRET = b"m" * 32


def test_a_stored_point_costs_at_most_30_bytes(tmp_path: Path) -> None:
    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    keys = [f"train/metric_{i}" for i in range(10)]
    for start in range(0, 20_000, 1000):
        points = [
            (key, step, step * 0.001 + i, f"2026-01-01T00:{(step // 60) % 60:02d}:{step % 60:02d}.123456+00:00")
            for step in range(start, start + 1000)
            for i, key in enumerate(keys)
        ]
        store.add_points("run-with-a-realistic-id-20260101-abcdef", points)
    store.close()
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("VACUUM")
    pages = con.execute("PRAGMA page_count").fetchone()[0] * con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    per_point = pages / 200_000
    assert per_point <= 30, f"{per_point:.1f} bytes per point"
    assert series(db, "run-with-a-realistic-id-20260101-abcdef", keys[3])[:2] == [(0, 3.0), (1, 3.001)]


def test_an_old_database_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE points (run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL, "
        "value REAL NOT NULL, ts TEXT, PRIMARY KEY (run_id, key, step)) WITHOUT ROWID"
    )
    rows = [("r", "loss", s, 1.0 / (s + 1), "t") for s in range(5)]
    rows = [("r", "loss", s, 1.0 / (s + 1), "t") for s in range(5)]
    con.executemany("INSERT INTO points VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    MetricStore(db).close()
    assert summary(db, "r")["loss"] == {"last": 0.2, "min": 0.2, "max": 1.0, "count": 5, "last_step": 4}


def test_sigterm_closes_cleanly_with_no_wal_left(tmp_path: Path) -> None:
    db = tmp_path / "ingest.sqlite"
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuneplane",
            "ingest",
            "serve",
            "--port",
            "0",
            "--db",
            str(db),
            "--secret-file",
            str(secret),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    url = line.split("listening on ")[1].split()[0]
    host, port = url[len("http://") :].split(":")
    errors: list[str] = []

    def sender(index: int) -> None:
        run = f"run-{index}"
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        for batch in range(20):
            body = json.dumps(
                {"run_id": run, "points": [{"key": "loss", "step": batch * 50 + i, "value": 1.0} for i in range(50)]}
            )
            conn.request("POST", "/metrics", body, {"X-TunePlane-Token": mint_token(SECRET, run)})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                errors.append(str(response.status))
        conn.close()

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert os.path.exists(f"{db}-wal")  # it was in WAL mode while serving
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert not errors
    assert not os.path.exists(f"{db}-wal") and not os.path.exists(f"{db}-shm")
    assert sum(summary(db, f"run-{i}")["loss"]["count"] for i in range(16)) == 16 * 1000
    assert "Traceback" not in err


def test_sigterm_in_the_middle_of_writes_keeps_every_acknowledged_point(tmp_path: Path) -> None:
    """Senders still posting when SIGTERM arrives: every point answered 200 is in the store, the
    others were refused or cut (the client retries them), and no -wal or -shm file is left."""
    db = tmp_path / "ingest.sqlite"
    (tmp_path / "secret").write_bytes(SECRET)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuneplane",
            "ingest",
            "serve",
            "--port",
            "0",
            "--db",
            str(db),
            "--secret-file",
            str(tmp_path / "secret"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    url = proc.stderr.readline().split("listening on ")[1].split()[0]
    host, port = url[len("http://") :].split(":")
    acknowledged: dict[str, set[int]] = {}
    stop, lock = threading.Event(), threading.Lock()
    sent = threading.Semaphore(0)

    def sender(index: int) -> None:
        run = f"run-{index}"
        for batch in range(10_000):  # bounded; the SIGTERM ends it long before
            if stop.is_set():
                return
            steps = range(batch * 100, batch * 100 + 100)
            body = json.dumps({"run_id": run, "points": [{"key": "loss", "step": s, "value": 0.5} for s in steps]})
            try:
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                conn.request("POST", "/metrics", body, {"X-TunePlane-Token": mint_token(SECRET, run)})
                response = conn.getresponse()
                response.read()
                conn.close()
            except OSError:  # cut by the shutdown, or refused once it closed: not acknowledged
                return
            if response.status == 200:
                with lock:
                    acknowledged.setdefault(run, set()).update(steps)
                sent.release()

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for _ in range(40):  # writes are under way
        assert sent.acquire(timeout=30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "internal error" not in err
    assert not os.path.exists(f"{db}-wal") and not os.path.exists(f"{db}-shm")
    assert sum(len(steps) for steps in acknowledged.values()) >= 40 * 100
    for run, steps in acknowledged.items():
        assert steps <= {step for step, _ in series(db, run, "loss")}, run
