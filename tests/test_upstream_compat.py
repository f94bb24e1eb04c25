"""The upstream client (`tuneplane==0.4.0`, Python 3.12) reports to our receiver, unchanged.

The upstream package runs in its own venv: `TUNEPLANE_UPSTREAM_PYTHON` when set, otherwise one this
test creates (once) under pytest's cache directory. Without python3.12 or the package, it skips and
says why. The upstream script records every request its client reported as delivered, and the test
checks that each of those points is stored with its value.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuneplane.ingest import hparams, lifecycle, mint_token, series, summary
from tuneplane.ingest.server import IngestServer

UPSTREAM = "tuneplane==0.4.0"
SECRET = b"u" * 32
STEPS = 300

UPSTREAM_SCRIPT = r"""
import json, os, sys
import tuneplane.reporter as reporter

delivered = []
original = reporter.Reporter._post

def recording(self, path, payload):
    ok = original(self, path, payload)
    if ok:
        delivered.append([path, payload])
    return ok

reporter.Reporter._post = recording

from tuneplane.report import TunePlaneCallback, finish, init, log

init(hparams={"lr": 3e-4, "model": {"name": "tiny"}}, monitor_hardware=False)
steps = int(sys.argv[2])
for step in range(steps):
    log({"loss": 1.0 / (step + 1), "acc": step / steps}, step=step)
log({"nested": {"x": 1.5}, "text": "not a number"}, step=steps)
callback = TunePlaneCallback(monitor_hardware=False)
class State: global_step = steps + 1
callback.on_evaluate(None, State(), None, metrics={"eval_loss": 0.25})
finish()
client = reporter.Reporter(os.environ["TUNEPLANE_JOB_ENDPOINT"], os.environ["TUNEPLANE_JOB_RUN_ID"],
                           os.environ["TUNEPLANE_JOB_TOKEN"])
client.lifecycle("succeeded")
with open(sys.argv[1], "w") as handle:
    json.dump(delivered, handle)
"""


def find_python312() -> str | None:
    """python3.12 on PATH, else one of pyenv's; each candidate must actually run (shims may not)."""
    candidates = [shutil.which("python3.12")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += [str(p) for p in sorted(Path(root or ".", "versions").glob("3.12*/bin/python"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"], capture_output=True, text=True
        )
        if probe.stdout.strip() == "True":
            return candidate
    return None


def upstream_python(cache_dir: Path) -> str:
    """A python with the upstream client, made once and reused; pytest.skip when impossible."""
    given = os.environ.get("TUNEPLANE_UPSTREAM_PYTHON")
    if given:
        return given
    base = find_python312()
    if base is None:
        pytest.skip("python3.12 is not available, so the upstream client (Python >=3.12) cannot run")
    venv = cache_dir / "venv"
    python = venv / "bin" / "python"
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers may arrive together
        if not (venv / ".ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            made = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True)
            if made.returncode != 0:
                pytest.skip(f"cannot create a python3.12 venv: {made.stderr.strip()[-300:]}")
            pip = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", UPSTREAM], capture_output=True, text=True, timeout=600
            )
            if pip.returncode != 0:
                pytest.skip(f"cannot install {UPSTREAM}: {pip.stderr.strip()[-300:]}")
            (venv / ".ready").touch()
    return str(python)


@pytest.fixture(scope="module")
def upstream(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    cache = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`
    where = cache.mkdir("tuneplane-upstream-0.4.0") if cache else tmp_path_factory.mktemp("upstream")
    return upstream_python(Path(where))


def test_upstream_client_points_are_all_stored(upstream: str, tmp_path: Path) -> None:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    run_id = "upstream-run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_") and k not in ("RANK", "LOCAL_RANK")}
    env.update(
        TUNEPLANE_JOB_ENABLED="1",
        TUNEPLANE_JOB_ENDPOINT=server.url,
        TUNEPLANE_JOB_RUN_ID=run_id,
        TUNEPLANE_JOB_TOKEN=mint_token(SECRET, run_id),
        PYTHONPATH="",
    )
    record = tmp_path / "delivered.json"
    try:
        done = subprocess.run(
            [upstream, "-c", UPSTREAM_SCRIPT, str(record), str(STEPS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    assert sys.executable != upstream
    delivered = json.loads(record.read_text())
    sent = [p for path, payload in delivered if path == "metrics" for p in payload["points"]]
    # Upstream delivered everything this paced script logged (2 keys x STEPS, nested, validation).
    assert len(sent) == 2 * STEPS + 2
    got = summary(server.store.path, run_id)
    by_key: dict[str, dict[int, float]] = {}
    for point in sent:
        by_key.setdefault(point["key"], {})[point["step"]] = point["value"]
    assert set(got) == set(by_key) == {"loss", "acc", "nested.x", "validation/eval_loss"}
    for key, points in by_key.items():
        assert got[key]["count"] == len(points)
        assert got[key]["last"] == points[max(points)]
        assert got[key]["min"] == min(points.values()) and got[key]["max"] == max(points.values())
    assert hparams(server.store.path, run_id) == {"lr": 3e-4, "model.name": "tiny"}
    assert [e["event"] for e in lifecycle(server.store.path, run_id)] == ["succeeded"]
    assert "rejected" not in done.stdout + done.stderr and "failed" not in done.stdout + done.stderr


NAN_SCRIPT = r"""
import json, math, os, sys, time
import tuneplane.reporter as reporter
from tuneplane.report import _MetricBuffer

answers = []
original = reporter.Reporter._post

def recording(self, path, payload):
    try:
        ok = original(self, path, payload)
    except Exception:
        answers.append([path, False, payload])
        raise
    answers.append([path, ok, payload])
    return ok

reporter.Reporter._post = recording
# The upstream queue that framework bridges and `log()` feed; it keeps a refused batch and resends it.
buffer = _MetricBuffer.from_env()
buffer.flush_interval = 0.05
steps = int(sys.argv[2])
for step in range(steps):
    loss = {steps // 3: math.nan, steps // 2: math.inf, steps // 2 + 1: -math.inf}.get(step, 1.0 / (step + 1))
    buffer.enqueue_metrics([{"key": "loss", "step": step, "value": loss, "ts": "2026-01-01T00:00:00+00:00"},
                            {"key": "lr", "step": step, "value": None if step == 7 else 0.1,
                             "ts": "2026-01-01T00:00:00+00:00"}])
    buffer.kick()
    time.sleep(0.002)
buffer.stop(timeout=20)
with open(sys.argv[1], "w") as handle:
    json.dump(answers, handle)
"""


def test_upstream_client_sending_nan_mid_run_loses_no_finite_point(upstream: str, tmp_path: Path) -> None:
    """The upstream client writes NaN and Infinity as Python's json does and, once a batch is refused
    with a 4xx, resends that batch forever: every later point of the run would be lost. Our receiver
    stores every finite point, before and after, and the client never sees a refusal."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    run_id = "upstream-nan"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_") and k not in ("RANK", "LOCAL_RANK")}
    env.update(
        TUNEPLANE_JOB_ENABLED="1",
        TUNEPLANE_JOB_ENDPOINT=server.url,
        TUNEPLANE_JOB_RUN_ID=run_id,
        TUNEPLANE_JOB_TOKEN=mint_token(SECRET, run_id),
        PYTHONPATH="",
    )
    record = tmp_path / "answers.json"
    try:
        done = subprocess.run(
            [upstream, "-c", NAN_SCRIPT, str(record), str(STEPS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(record.read_text())
    sent = [p for path, _, payload in answers if path == "metrics" for p in payload["points"]]
    assert any(p["value"] is not None and not math.isfinite(p["value"]) for p in sent)  # NaN went on the wire
    assert all(ok for _, ok, _ in answers) and "rejected" not in done.stdout + done.stderr, done.stdout[-2000:]
    bad_loss = {STEPS // 3, STEPS // 2, STEPS // 2 + 1}
    db = server.store.path
    assert series(db, run_id, "loss") == [(s, 1.0 / (s + 1)) for s in range(STEPS) if s not in bad_loss]
    assert series(db, run_id, "lr") == [(s, 0.1) for s in range(STEPS) if s != 7]
