"""The receiver's connection threads: reused when idle, bounded, shrinking after a burst, closed."""

from __future__ import annotations

import http.client
import threading
from pathlib import Path

from support.wait import wait_until

from tuneplane.ingest import mint_token
from tuneplane.ingest.server import IngestServer
from tuneplane.ingest.workers import Workers

SECRET = b"t" * 32


def test_connections_reuse_idle_threads(tmp_path: Path) -> None:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    try:
        host, port = server.url[len("http://") :].split(":")
        token = mint_token(SECRET, "r")
        for step in range(40):  # a new connection per request, one after the other
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request(
                "POST",
                "/metrics",
                f'{{"run_id": "r", "points": [{{"key": "k", "step": {step}, "value": 1.0}}]}}',
                {"X-TunePlane-Token": token},
            )
            assert conn.getresponse().status == 200
            conn.close()
        assert server.httpd.workers.started <= 4  # not one thread per connection
    finally:
        server.stop()
    wait_until(lambda: server.httpd.workers.count == 0, 10, 0.01, "stop() left connection threads running")


def test_the_pool_is_bounded_and_shrinks_after_a_burst() -> None:
    release = threading.Event()
    served: list[int] = []

    def serve(request: int, _address: object) -> None:
        release.wait(10)
        served.append(request)

    workers = Workers(serve, limit=5, keep=1, idle=0.05)
    assert all(workers.submit(i, None) for i in range(5))
    assert not workers.submit(5, None)  # five busy threads: the sixth connection is refused
    assert workers.count == 5
    release.set()
    wait_until(lambda: sorted(served) == [0, 1, 2, 3, 4], 10, 0.01, lambda: f"served {served}, not 0-4")
    wait_until(lambda: workers.count == 1, 10, 0.01, "idle threads above `keep` did not end")
    assert workers.submit(6, None)
    wait_until(lambda: 6 in served, 10, 0.01, "the kept thread did not serve the later connection")
    assert workers.started == 5  # the kept thread served the later connection
    workers.close()
    wait_until(lambda: workers.count == 0, 10, 0.01, "close() left threads running")
    assert not workers.submit(7, None)


def test_a_served_receiver_hands_the_interpreter_over_every_millisecond(tmp_path: Path) -> None:
    import sys

    before = sys.getswitchinterval()
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        wait_until(
            lambda: sys.getswitchinterval() == 0.001, 10, 0.01, lambda: f"switch interval {sys.getswitchinterval()}"
        )
    finally:
        server.httpd.shutdown()
        thread.join(10)
    assert sys.getswitchinterval() == before  # restored when the receiver stops
