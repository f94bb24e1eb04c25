"""The ingest receiver: wire protocol, auth, limits, idempotency, read API, CLI, views, manifests."""

from __future__ import annotations

import gzip
import http.client
import json
import re
import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tuneplane.ingest import (
    hparams,
    lifecycle,
    mint_token,
    series,
    start_server,
    summary,
    timed_series,
    verify_token,
)
from tuneplane.ingest.server import IngestServer, Limits
from tuneplane.ingest.tokens import ensure_secret, load_secret
from tuneplane.views.charts import render_svg, render_table, sparkline
from tuneplane.views.charts_axes import nice_ticks

SECRET = b"s" * 32


@pytest.fixture()
def receiver(tmp_path: Path):
    server = IngestServer(
        tmp_path / "ingest.sqlite", SECRET, limits=Limits(max_body=64 * 1024, max_decoded=256 * 1024)
    ).start()
    yield server
    server.stop()


def request(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["X-TunePlane-Token"] = token
    conn.request(method, path, body=data, headers=hdrs)
    response = conn.getresponse()
    payload = json.loads(response.read() or b"{}")
    conn.close()
    return response.status, payload


def metrics_body(run_id: str, points: list[tuple[str, int, float]], **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "points": [{"key": k, "step": s, "value": v, "ts": "2025-01-01T00:00:00+00:00"} for k, s, v in points],
        **extra,
    }


# ── tokens ────────────────────────────────────────────────────────────────────────────────────
def test_tokens_are_per_run_hmac() -> None:
    token = mint_token(SECRET, "run-1")
    assert len(token) == 64 and int(token, 16) >= 0
    assert verify_token(SECRET, "run-1", token)
    assert verify_token(SECRET, "run-1", token.upper())
    assert not verify_token(SECRET, "run-2", token)
    assert not verify_token(b"t" * 32, "run-1", token)
    assert not verify_token(SECRET, "run-1", "")
    assert mint_token(SECRET, "run-1") == token  # deterministic: no database needed


def test_secret_file_is_created_private_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ingest.secret"
    secret, created = ensure_secret(path)
    assert created and len(secret) >= 32
    assert path.stat().st_mode & 0o777 == 0o600
    again, created_again = ensure_secret(path)
    assert again == secret and not created_again
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(Exception, match="shorter than 16"):
        load_secret(tmp_path / "short")


# ── wire protocol ─────────────────────────────────────────────────────────────────────────────
def test_upstream_metrics_hparams_lifecycle_are_stored(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    body = metrics_body("r1", [("loss", 1, 2.0), ("loss", 2, 1.0)])
    status, body = request(receiver.url, "POST", "/metrics", body, token=token)
    assert (status, body["stored"]) == (200, 2)
    status, _ = request(
        receiver.url,
        "POST",
        "/api/ingest/hparams",
        {"run_id": "r1", "params": {"lr": 0.001, "model.name": "gpt"}},
        headers={"x-tuneplane-token": token},
    )  # header name is case-insensitive
    assert status == 200
    status, _ = request(
        receiver.url, "POST", "/lifecycle", {"run_id": "r1", "event": "running", "ts": "t"}, token=token
    )
    assert status == 200
    db = receiver.store.path
    assert summary(db, "r1") == {"loss": {"last": 1.0, "min": 1.0, "max": 2.0, "count": 2, "last_step": 2}}
    assert series(db, "r1", "loss") == [(1, 2.0), (2, 1.0)]
    assert hparams(db, "r1") == {"lr": 0.001, "model.name": "gpt"}
    assert [e["event"] for e in lifecycle(db, "r1")] == ["running"]


def test_upsert_on_run_key_step(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    for value in (5.0, 7.0):  # an upstream retry without batch id
        request(receiver.url, "POST", "/metrics", metrics_body("r1", [("loss", 3, value)]), token=token)
    assert summary(receiver.store.path, "r1")["loss"]["count"] == 1
    assert series(receiver.store.path, "r1", "loss") == [(3, 7.0)]


def test_gzip_and_batch_id_make_a_retry_a_no_op(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    body = gzip.compress(json.dumps(metrics_body("r1", [("acc", 1, 0.5)], batch_id="b-1")).encode())
    headers = {"Content-Encoding": "gzip"}
    first = request(receiver.url, "POST", "/metrics", raw=body, token=token, headers=headers)
    again = request(receiver.url, "POST", "/metrics", raw=body, token=token, headers=headers)
    assert first == (200, {"ok": True, "stored": 1, "duplicate": False})
    assert again == (200, {"ok": True, "stored": 0, "duplicate": True})
    # The header form of the batch id is honoured too.
    by_header = json.dumps(metrics_body("r1", [("acc", 2, 0.6)])).encode()
    h = {"X-TunePlane-Batch": "b-2"}
    for expected in (False, True):
        answer = request(receiver.url, "POST", "/metrics", raw=by_header, token=token, headers=h)
        assert answer[1]["duplicate"] is expected


def test_ranked_points_are_kept_apart(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    body = {
        "run_id": "r1",
        "points": [
            {"key": "loss", "step": 1, "value": 1.0, "ts": "t", "rank": 0},
            {"key": "loss", "step": 1, "value": 2.0, "ts": "t", "rank": 3},
        ],
    }
    assert request(receiver.url, "POST", "/metrics", body, token=token)[0] == 200
    assert set(summary(receiver.store.path, "r1")) == {"loss@rank0", "loss@rank3"}


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("0" * 64, 403), ("other", 403)])
def test_bad_tokens_are_refused(receiver: IngestServer, token: str | None, status: int) -> None:
    if token == "other":
        token = mint_token(SECRET, "another-run")
    code, body = request(receiver.url, "POST", "/metrics", metrics_body("r1", [("x", 1, 1.0)]), token=token)
    assert code == status and "token" in body["error"].lower()
    assert summary(receiver.store.path, "r1") == {}


def test_malformed_bodies_get_clear_4xx(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    url = receiver.url
    assert request(url, "POST", "/metrics", raw=b"{not json", token=token)[0] == 400
    not_object = request(url, "POST", "/metrics", raw=b"[1]", token=token)
    assert not_object[1]["error"] == "body must be a JSON object"
    code, body = request(
        url,
        "POST",
        "/metrics",
        {
            "run_id": "r1",
            "points": [
                {"key": "ok", "step": 1, "value": 1.0, "ts": "t"},
                {"key": "", "step": 1, "value": 1.0},
                {"key": "x", "step": "one", "value": 1.0},
                {"key": "x", "step": 1, "value": "NaN"},
                {"key": "x", "step": True, "value": 1.0},
                {"key": "x", "step": 1, "value": False},
            ],
        },
        token=token,
    )
    assert code == 422 and body["problem_count"] == 5
    assert any("points[2].step" in p for p in body["problems"])
    assert summary(receiver.store.path, "r1") == {}  # all or nothing
    assert request(url, "POST", "/metrics", {"points": []}, token=token)[0] == 422
    assert request(url, "POST", "/lifecycle", {"run_id": "r1", "event": "exploded"}, token=token)[0] == 422
    assert request(url, "POST", "/nope", {"run_id": "r1"}, token=token)[0] == 404
    bad_gzip = {"Content-Encoding": "gzip"}
    assert request(url, "POST", "/metrics", raw=b"plain", token=token, headers=bad_gzip)[0] == 400
    brotli = {"Content-Encoding": "br"}
    assert request(url, "POST", "/metrics", raw=b"{}", token=token, headers=brotli)[0] == 415


def test_non_finite_points_are_left_out_said_in_each_answer_and_once_on_stderr(
    receiver: IngestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """fp16 overflow: the loss goes NaN for a few steps. Every finite point is stored, each answer
    counts what it left out, the operator reads one line per run, and no NULL or stand-in is stored."""
    token = mint_token(SECRET, "r1")
    for step in range(1, 6):
        raw = (
            f'{{"run_id": "r1", "points": [{{"key": "loss", "step": {step}, "value": NaN}}, '
            f'{{"key": "lr", "step": {step}, "value": 0.1}}, {{"key": "loss", "step": {step + 100}, '
            f'"value": null}}]}}'
        ).encode()
        code, body = request(receiver.url, "POST", "/metrics", raw=raw, token=token)
        assert code == 200 and (body["stored"], body["dropped"]) == (1, 2), body
        assert body["dropped_points"] == [
            f"points[0] 'loss' step {step}: NaN",
            f"points[2] 'loss' step {step + 100}: null",
        ]
    lines = [line for line in capsys.readouterr().err.splitlines() if "not stored" in line]
    assert len(lines) == 1 and "'r1'" in lines[0] and "points[0] 'loss' step 1: NaN" in lines[0], lines
    assert summary(receiver.store.path, "r1") == {"lr": summary(receiver.store.path, "r1")["lr"]}
    assert series(receiver.store.path, "r1", "lr") == [(s, 0.1) for s in range(1, 6)]
    assert series(receiver.store.path, "r1", "loss") == []  # nothing stored as NULL for the NaN steps
    clean = request(receiver.url, "POST", "/metrics", metrics_body("r1", [("lr", 9, 0.2)]), token=token)
    assert clean == (200, {"ok": True, "stored": 1, "duplicate": False})  # no drop keys when none


def test_past_its_bound_the_stderr_notice_says_it_goes_quiet(
    receiver: IngestServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs named on stderr are bounded; the bound is said once, so later silence is not read as
    "no more drops", and each answer still counts its own."""
    import tuneplane.ingest.server as server

    monkeypatch.setattr(server, "DROPPED_RUNS_SAID", 2)
    for number in range(5):
        run = f"r{number}"
        raw = f'{{"run_id": "{run}", "points": [{{"key": "loss", "step": 1, "value": NaN}}]}}'.encode()
        code, body = request(receiver.url, "POST", "/metrics", raw=raw, token=mint_token(SECRET, run))
        assert code == 200 and body["dropped"] == 1, body
    err = capsys.readouterr().err.splitlines()
    assert [line.split("'")[1] for line in err if "not stored" in line] == ["r0", "r1"], err
    assert len([line for line in err if "more than 2 runs" in line]) == 1, err


def test_oversized_bodies_and_gzip_bombs_are_refused(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    code, body = request(receiver.url, "POST", "/metrics", raw=b" " * (65 * 1024), token=token)
    assert code == 413 and "limit" in body["error"]
    bomb = gzip.compress(b" " * (10 * 1024 * 1024))  # ~10 KiB on the wire, 10 MiB inflated
    assert len(bomb) < 64 * 1024
    code, body = request(receiver.url, "POST", "/metrics", raw=bomb, token=token, headers={"Content-Encoding": "gzip"})
    assert code == 413 and "decompressed" in body["error"]


def test_missing_content_length_is_refused(receiver: IngestServer) -> None:
    parts = urlsplit(receiver.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 411")


def test_upstream_side_channels_are_accepted(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r1")
    for path in ("/hardware", "/observations", "/environment/nodes"):
        assert request(receiver.url, "POST", path, {"run_id": "r1", "points": []}, token=token)[0] == 202


def test_read_endpoints(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "run/with space")
    request(
        receiver.url,
        "POST",
        "/metrics",
        metrics_body("run/with space", [("a", 1, 1.0), ("a", 2, 3.0), ("b", 1, 5.0)]),
        token=token,
    )
    run = "run%2Fwith%20space"
    code, body = request(receiver.url, "GET", f"/api/runs/{run}/summary", token=token)
    assert code == 200
    assert body["summary"]["a"] == {"last": 3.0, "min": 1.0, "max": 3.0, "count": 2, "last_step": 2}
    code, body = request(receiver.url, "GET", f"/api/runs/{run}/metrics?key=a", token=token)
    assert body["series"] == {"a": [[1, 1.0], [2, 3.0]]}
    assert request(receiver.url, "GET", f"/api/runs/{run}/summary")[0] == 401
    assert request(receiver.url, "GET", "/api/runs/x/summary", token=token)[0] == 403
    assert request(receiver.url, "GET", "/healthz")[0] == 200
    assert request(receiver.url, "GET", "/api/else")[0] == 404


def test_the_read_path_returns_each_points_time(receiver: IngestServer) -> None:
    token = mint_token(SECRET, "r-timed")
    body = {
        "run_id": "r-timed",
        "points": [
            {"key": "hw/cpu", "step": 0, "value": 1.0, "ts": "2025-01-01T00:00:00+00:00"},
            {"key": "hw/cpu", "step": 1, "value": 2.0, "ts": "2025-01-01T00:00:30.250+00:00"},
            {"key": "hw/cpu", "step": 2, "value": 3.0, "ts": "2025-01-01T01:00:00+00:00"},
            {"key": "loss", "step": 5, "value": 0.5},
        ],
    }  # no ts: the time the receiver got it
    before = time.time()
    assert request(receiver.url, "POST", "/metrics", body, token=token)[0] == 200
    t0 = 1735689600.0  # 2025-01-01T00:00:00Z
    assert timed_series(receiver.store.path, "r-timed", "hw/cpu") == [
        (0, 1.0, t0),
        (1, 2.0, t0 + 30.25),
        (2, 3.0, t0 + 3600),
    ]
    [(step, value, got)] = timed_series(receiver.store.path, "r-timed", "loss")
    assert (step, value) == (5, 0.5) and got is not None and before - 1 <= got <= time.time() + 1
    code, answer = request(receiver.url, "GET", "/api/runs/r-timed/metrics?key=hw/cpu&times=1", token=token)
    assert code == 200
    assert answer["series"] == {"hw/cpu": [[0, 1.0], [1, 2.0], [2, 3.0]]}  # the shape old clients read
    assert answer["times"] == {"hw/cpu": [t0, t0 + 30.25, t0 + 3600]}
    assert "times" not in request(receiver.url, "GET", "/api/runs/r-timed/metrics?key=loss", token=token)[1]
    from tuneplane.ingest.client import fetch_timed_series

    assert fetch_timed_series(receiver.url, "r-timed", "hw/cpu", token)[1] == (1, 2.0, t0 + 30.25)


def test_tp_job_metrics_plots_hardware_against_wall_time(receiver: IngestServer, tmp_path: Path, cli: Any) -> None:
    token = mint_token(SECRET, "r-hw")
    points = [{"key": "train/loss", "step": s, "value": 1.0 / (s + 1)} for s in range(10)]
    # samples numbered 0..9, 45 s apart, starting two minutes into the hour
    points += [
        {
            "key": "hw/gpu_util",
            "step": s,
            "value": float(s % 3),
            "ts": f"2025-01-01T00:{2 + (45 * s) // 60:02d}:{(45 * s) % 60:02d}+00:00",
        }
        for s in range(10)
    ]
    assert request(receiver.url, "POST", "/metrics", {"run_id": "r-hw", "points": points}, token=token)[0] == 200
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET)
    for source in (["--db", str(receiver.store.path)], ["--endpoint", receiver.url, "--secret-file", str(secret_file)]):
        plot = tmp_path / "hw.svg"
        result = cli("job", "metrics", "r-hw", *source, "--plot", str(plot))
        assert result.exit_code == 0, result.output
        texts = [t.text for t in ET.fromstring(plot.read_text()).iter("{http://www.w3.org/2000/svg}text")]
        assert "hw/gpu_util (wall time)" in texts and "time since the first sample" in texts
        # 405 s of samples: ticks on whole minutes from the first sample, not sample numbers
        assert [t for t in texts if re.fullmatch(r"\d+m(\d\ds)?|\d+s", t or "")] == ["0m", "2m", "4m", "6m"], texts


def test_start_server_returns_url_and_stop(tmp_path: Path) -> None:
    url, stop = start_server(tmp_path / "db.sqlite", SECRET)
    assert url.startswith("http://127.0.0.1:")
    assert request(url, "GET", "/healthz")[0] == 200
    stop()
    parts = urlsplit(url)
    with pytest.raises(OSError):
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()


def test_read_api_on_missing_database(tmp_path: Path) -> None:
    assert summary(tmp_path / "none.sqlite", "r") == {}
    assert series(tmp_path / "none.sqlite", "r", "k") == []


# ── CLI ───────────────────────────────────────────────────────────────────────────────────────
@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str]):
    """Run `tp` in-process through its real entry point (exit-code mapping included)."""
    from tuneplane.cli.main import run

    def invoke(*args: str) -> SimpleNamespace:
        code = run(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(exit_code=code, stdout=out.out, output=out.out + out.err)

    return invoke


def test_tp_job_metrics_table_and_svg(receiver: IngestServer, tmp_path: Path, cli: Any) -> None:
    token = mint_token(SECRET, "r1")
    points = [("train/loss", s, 2.0 / (s + 1)) for s in range(50)] + [("acc", s, s / 50) for s in range(50)]
    request(receiver.url, "POST", "/metrics", metrics_body("r1", points), token=token)
    plot = tmp_path / "chart.svg"
    result = cli("job", "metrics", "r1", "--db", str(receiver.store.path), "--plot", str(plot))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["key", "last", "min", "max", "count", "last_step", "trend"]
    loss = next(line for line in lines if line.startswith("train/loss"))
    assert loss.split()[1:6] == ["0.04", "0.04", "2", "50", "49"]
    assert loss.split()[6][0] == "█" and loss.split()[6][-1] == "▁"  # falling curve
    root = ET.fromstring(plot.read_text())
    assert root.tag.endswith("svg")
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) == 2  # train/loss and acc (as train/acc)
    # Remote read, token minted from the secret file.
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET)
    remote = cli("job", "metrics", "r1", "--endpoint", receiver.url, "--secret-file", str(secret_file), "--key", "acc")
    assert remote.exit_code == 0, remote.output
    assert [line.split()[0] for line in remote.stdout.splitlines()] == ["key", "acc"]


def test_tp_job_metrics_errors(receiver: IngestServer, cli: Any) -> None:
    result = cli("job", "metrics", "nope", "--db", str(receiver.store.path))
    assert result.exit_code == 2 and "no metrics stored for run 'nope'" in result.output
    result = cli("job", "metrics", "r1", "--endpoint", receiver.url, "--token", "bad")
    assert result.exit_code == 2 and "HTTP 403" in result.output
    token = mint_token(SECRET, "r1")
    for endpoint in ("notaurl", "ftp://127.0.0.1/x", "http://"):  # a usage error, not an internal one
        result = cli("job", "metrics", "r1", "--endpoint", endpoint, "--token", token)
        assert result.exit_code == 2 and "http:// or https://" in result.output, result.output


@pytest.mark.parametrize("verb", ["metrics", "compare"])
def test_tp_job_metrics_outside_a_lab_says_so(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNEPLANE_INGEST_DB", raising=False)
    result = cli("job", verb, "r1", *(["r2"] if verb == "compare" else []))
    assert result.exit_code == 2
    assert f"not inside a TunePlane lab: no tuneplane.yaml in {tmp_path.resolve()} or above" in result.output
    assert "--db PATH or --endpoint URL" in result.output, result.output


def test_tp_job_metrics_reads_the_labs_store_from_any_folder_of_the_lab(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lab's receiver keeps `.tuneplane/ingest.sqlite` at the lab's root, not in the folder tp runs in."""
    lab = tmp_path / "lab"
    (lab / "experiments" / "demo").mkdir(parents=True)
    (lab / "tuneplane.yaml").write_text("version: tuneplane/v1\nname: lab\n")
    server = IngestServer(lab / ".tuneplane" / "ingest.sqlite", SECRET).start()
    try:
        request(
            server.url, "POST", "/metrics", metrics_body("r1", [("train/loss", 1, 0.5)]), token=mint_token(SECRET, "r1")
        )
    finally:
        server.stop()
    monkeypatch.chdir(lab / "experiments" / "demo")
    monkeypatch.delenv("TUNEPLANE_INGEST_DB", raising=False)
    result = cli("job", "metrics", "r1")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["key", "train/loss"]


def test_tp_job_metrics_from_an_endpoint_that_is_not_a_receiver(cli: Any) -> None:
    from support.httpd import answering

    def body(path: str) -> bytes:
        if "summary" in path:
            return b'{"summary": {"loss": {"last": 1, "min": 1, "max": 1, "count": 1, "last_step": 0}}}'
        return b'{"series": {"loss": [["x", 1]]}}'

    with answering(body) as port:
        url = f"http://127.0.0.1:{port}"
        result = cli("job", "metrics", "r1", "--endpoint", url, "--token", mint_token(SECRET, "r1"))
        assert result.exit_code == 2 and "wrong shape" in result.output, result.output


def test_tp_ingest_serve_refuses_a_busy_port(tmp_path: Path, receiver: IngestServer, cli: Any) -> None:
    port = urlsplit(receiver.url).port
    result = cli(
        "ingest",
        "serve",
        "--port",
        str(port),
        "--db",
        str(tmp_path / "x.sqlite"),
        "--secret-file",
        str(tmp_path / "secret"),
    )
    assert result.exit_code == 2 and "cannot listen" in result.output


# ── views ─────────────────────────────────────────────────────────────────────────────────────
def test_sparkline_shapes() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3.0] * 5) == "▄▄▄▄▄"
    assert len(sparkline(list(range(1000)), width=10)) == 10
    assert sparkline([]) == ""
    assert sparkline([float("nan"), 1.0, 2.0]) == "▁█"


def test_table_and_svg_escape_and_scale() -> None:
    table = render_table(
        {"a<b": {"last": 1.5, "min": 1.0, "max": 2.0, "count": 3, "last_step": 9}},
        {"a<b": [(1, 1.0), (2, 2.0), (9, 1.5)]},
    )
    assert "a<b" in table and "1.5" in table
    svg = render_svg(
        {"a<b": [(s, float(s * s)) for s in range(5000)], "flat": [(1, 2.0)], "dot": [(3, 1.0), (3, 2.0)]},
        title="x & y",
    )
    root = ET.fromstring(svg)  # escaped text keeps it well-formed
    ns = "{http://www.w3.org/2000/svg}"
    line = root.find(f".//{ns}path")
    assert line is not None
    x, y = map(float, re.match(r"M(-?\d+) (-?\d+)", line.get("d", "")).groups())  # type: ignore[union-attr]
    coords = [(x, y)]
    for dx, dy in re.findall(r"l(-?\d+) ?(-?\d+)", line.get("d", "")):
        x, y = x + float(dx), y + float(dy)
        coords.append((x, y))
    assert len(coords) <= 1500
    width = float(root.get("width", "0"))
    assert all(0 <= x <= width for x, _ in coords)
    assert "flat = 2" in "".join(root.itertext())  # a constant is a value, not a panel
    assert nice_ticks(0, 1, 5) == [0.0, 0.25, 0.5, 0.75, 1.0]


# ── manifests ─────────────────────────────────────────────────────────────────────────────────
def test_ingest_templates_render_to_valid_manifests() -> None:
    from tuneplane.render.templating import render

    values = dict(
        name="tp-ingest",
        namespace="ml",
        image="registry.example/tp:0.5",
        port=8765,
        storage="5Gi",
        secret_name="tuneplane-ingest",
        secret_key="secret",
        cpu="250m",
        memory="512Mi",
    )
    docs = {t: yaml.safe_load(render(f"ingest/{t}.yaml.j2", **values)) for t in ("deployment", "service", "pvc")}
    container = docs["deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:3] == ["tp", "ingest", "serve"] and "8765" in container["args"]
    assert all(isinstance(a, str) for a in container["args"])
    assert docs["service"]["spec"]["ports"][0]["port"] == 8765
    assert docs["pvc"]["spec"]["resources"]["requests"]["storage"] == "5Gi"
    volumes = docs["deployment"]["spec"]["template"]["spec"]["volumes"]
    (claim,) = [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]
    assert claim == docs["pvc"]["metadata"]["name"]
    # A hostile value stays one scalar.
    evil = dict(values, name="x\nkind: Secret")
    assert yaml.safe_load(render("ingest/service.yaml.j2", **evil))["kind"] == "Service"
    kv = pytest.importorskip("kubernetes_validate")
    for doc in docs.values():
        kv.validate(doc, "1.29", strict=True)
