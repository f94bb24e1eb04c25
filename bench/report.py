"""Benchmark `tuneplane.report` against its peers, all measured in the same run.

    python bench/report.py [--calls 100000] [--peers upstream,wandb,mlflow] [--json out.json]

For each SDK, in its own process (and its own venv under bench/.work/ for the peers):
  * per-call `log()` overhead with 4 float keys: the median over chunks of 100 calls (>= --calls calls
    in all), minus the same loop without the call; also the plain mean per call (loop wall time over
    calls), which includes the SDK's background work competing for the GIL; and the CPU per call of the
    whole process, all threads, over the loop and finish() together (what the SDK costs in all, even
    when its sender does most of its work after the loop, as it may with a loop this short);
  * with no token (wandb: mode="disabled"; mlflow has no such mode) and enabled against a healthy
    local receiver (ours and upstream: our ingest receiver in a separate process; wandb: offline mode;
    mlflow: a local file store);
  * points delivered out of points logged (read back from the receiver's database or mlflow's files;
    wandb offline writes a binary log we do not parse);
  * `import` time in a fresh interpreter (median of 5);
  * the same enabled loop while a second process keeps one CPU busy: the delivered share after
    finish(), and for ours also after the collector's pass over what finish() left in the out dir;
  * the step-loop slowdown: 1 ms sleep + ~2 ms of matmul per step, with and without one log(), in
    rounds of plain, logged, logged, plain blocks; the median of per-round ratios with a bootstrap
    interval, beside the same measure of plain against plain (the noise), and a verdict that says
    "within noise" only when the interval is inside that noise, or that it cannot tell.
Peers that cannot be installed are skipped with a message. Targets for ours: <= 0.3 us with no
token, <= 2 us enabled (chunked median), <= 1 us plain mean, 100 % delivered, import <= 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / ".work"
SECRET = b"bench-secret-bench-secret-bench!"
TARGETS = {"no_token_us": 0.3, "enabled_us": 2.0, "mean_us": 1.0, "delivered_pct": 100.0, "import_ms": 20.0}
BURNER = "while True:\n    pass\n"  # the second process that loads the machine

PEERS = {  # name: (packages, python needed, module to import)
    "upstream": (["tuneplane==0.4.0"], "3.12", "tuneplane.report"),
    "wandb": (["wandb"], None, "wandb"),
    "mlflow": (["mlflow-skinny"], None, "mlflow"),
}

RUNNER = r'''
import json, os, statistics, sys, time
sdk, mode, workdir = sys.argv[1], sys.argv[2], sys.argv[4]
calls, budget_s = int(sys.argv[3]), float(sys.argv[5])
CHUNK = 100
pc = time.perf_counter_ns

def build():
    if sdk in ("ours", "upstream"):
        import tuneplane.report as r
        if mode == "enabled":
            r.init(monitor_hardware=False)
        return r.log, r.finish
    if sdk == "wandb":
        import wandb
        run = wandb.init(mode="offline" if mode == "enabled" else "disabled", dir=workdir, project="bench")
        return (lambda d, step: run.log(d, step=step)), run.finish
    if sdk == "mlflow":
        import mlflow
        mlflow.set_tracking_uri("file:" + os.path.join(workdir, "mlruns"))
        mlflow.start_run()
        def log(d, step):
            mlflow.log_metrics(d, step=step, synchronous=False)
        return log, mlflow.end_run
    raise SystemExit(f"unknown sdk {sdk}")

# 100 prepared dicts of 4 floats, reused: the loop then costs the same with or without logging, so
# "baseline" (the loop alone) subtracts cleanly and what remains is the call into the SDK.
DICTS = [{"loss": 1.0 / (j + 1), "acc": j * 0.5, "lr": 3e-4, "grad_norm": j + 1.5} for j in range(CHUNK)]

def timed(fn, chunks, start):
    out, i = [], start
    deadline = time.monotonic() + budget_s
    for _ in range(chunks):
        t = pc()
        for d in DICTS:
            fn(d, step=i)
            i += 1
        out.append(pc() - t)
        if time.monotonic() > deadline:
            break
    return out, i

def baseline(chunks):
    out, i = [], 1
    for _ in range(chunks):
        t = pc()
        for d in DICTS:
            i += 1
        out.append(pc() - t)
    return out

def work(size=24):
    """~2 ms of matrix multiplication in plain Python (peers' venvs have no numpy)."""
    a = [[(i * size + j) % 7 / 7 for j in range(size)] for i in range(size)]
    return [[sum(a[i][k] * a[k][j] for k in range(size)) for j in range(size)] for i in range(size)]

def calibrate():
    t = pc()
    for _ in range(10):
        work()
    return max(1, round(2e6 / ((pc() - t) / 10)))

def step_loop(fn, steps, reps, first):
    """A training step: 1 ms of sleep (data loading) and ~2 ms of matmul, then one log() call."""
    t = pc()
    for i in range(first, first + steps):
        time.sleep(0.001)
        for _ in range(reps):
            work()
        if fn is not None:
            fn({"loss": 1.0 / (i + 1), "acc": 0.5, "lr": 3e-4, "grad_norm": 1.5}, step=i)
    return (pc() - t) / steps

def median_ci(values, rounds=2000):
    """The median and a 95 % bootstrap interval for it (fixed seed: the same data gives the same text)."""
    import random
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return statistics.median(values), medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]

if mode == "steps":
    # Rounds of four blocks in the order plain, logged, logged, plain (ABBA: a drift in the machine's
    # speed during a round hits both sides alike). Each round gives one ratio, logged over plain; the
    # slowdown is the median ratio with a bootstrap interval. The same is done for plain against
    # plain (the first block of a round against its last), which is what the measure reads when
    # there is nothing to find: its interval is the noise the slowdown must be told apart from.
    reps = calibrate()
    log, finish = build()
    log({"loss": 0.0, "acc": 0.0, "lr": 3e-4, "grad_norm": 1.0}, step=0)  # warm-up, as below: lazy set-up
    rounds = max(4, min(40, calls // 200))
    block = max(10, calls // (4 * rounds))
    ratios, control, plain, logged, step = [], [], [], [], 1
    for _ in range(rounds):
        a1 = step_loop(None, block, reps, step)
        b1 = step_loop(log, block, reps, step)
        step += block
        b2 = step_loop(log, block, reps, step)
        step += block
        a2 = step_loop(None, block, reps, step)
        ratios.append((b1 + b2) / (a1 + a2))
        control.append(a1 / a2)
        plain += [a1, a2]
        logged += [b1, b2]
    finish()
    mid, low, high = median_ci(ratios)
    noise_mid, noise_low, noise_high = median_ci(control)
    quartiles = statistics.quantiles(ratios, n=4)
    print(json.dumps({"plain_step_ms": statistics.median(plain) / 1e6,
                      "logged_step_ms": statistics.median(logged) / 1e6,
                      "slowdown_pct": 100 * (mid - 1), "ci_pct": [100 * (low - 1), 100 * (high - 1)],
                      "spread_pct": [100 * (quartiles[0] - 1), 100 * (quartiles[2] - 1)],
                      "noise_pct": [100 * (noise_low - 1), 100 * (noise_high - 1)],
                      "noise_median_pct": 100 * (noise_mid - 1),
                      "rounds": rounds, "block_steps": block, "calls": 2 * rounds * block,
                      "logged_points": 4 * 2 * rounds * block}))
    raise SystemExit(0)

log, finish = build()
log({"loss": 0.0, "acc": 0.0, "lr": 3e-4, "grad_norm": 1.0}, step=0)  # warm-up: lazy set-up, caches
base = baseline(max(1, calls // CHUNK))
cpu = time.process_time()
wall = time.perf_counter()
times, end = timed(log, max(1, calls // CHUNK), 1)
wall = time.perf_counter() - wall
t = time.perf_counter()
finish()
finish_s = time.perf_counter() - t
cpu = time.process_time() - cpu
per_call = statistics.median(times) / CHUNK
baseline = statistics.median(base) / CHUNK
print(json.dumps({"calls": end - 1, "logged_points": 4 * end, "median_ns": per_call - baseline,
                  "raw_median_ns": per_call, "baseline_ns": baseline, "mean_ns": wall * 1e9 / (end - 1),
                  "cpu_ns": cpu * 1e9 / (end - 1), "finish_s": finish_s}))
'''

RECEIVER = r"""
import sys
from tuneplane.ingest.server import IngestServer
server = IngestServer(sys.argv[1], sys.argv[2].encode()).start()
print(server.url, flush=True)
sys.stdin.read()
server.stop()
"""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ── environments ──────────────────────────────────────────────────────────────────────────────
def find_python(version: str | None) -> str | None:
    """The interpreter for a peer: this one when any will do, else pythonX.Y on PATH or from pyenv."""
    if version is None:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += [str(p) for p in sorted(Path(root or ".", "versions").glob(f"{version}*/bin/python"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.stdout.strip() == version:
            return candidate
    return None


def peer_python(name: str) -> str | None:
    """A venv under bench/.work/ with the peer installed (made once); None with a message if impossible."""
    packages, version, _ = PEERS[name]
    venv = WORK / f"venv-{name}"
    python = venv / "bin" / "python"
    if (venv / ".ready").exists():
        return str(python)
    base = find_python(version)
    if base is None:
        say(f"skip {name}: python{version} not found")
        return None
    say(f"setting up {name} in {venv.relative_to(REPO)} ...")
    shutil.rmtree(venv, ignore_errors=True)
    steps = [[base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", *packages]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            say(f"skip {name}: {' '.join(step[2:5])} failed: {done.stderr.strip()[-400:]}")
            return None
    (venv / ".ready").touch()
    return str(python)


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TUNEPLANE_", "WANDB_", "MLFLOW_"))
        and k not in ("PYTHONPATH", "RANK", "LOCAL_RANK", "PYTHONDONTWRITEBYTECODE")
    }  # import: cached bytecode
    env.update(
        WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off", MLFLOW_ALLOW_FILE_STORE="true"
    )  # the peer measured is the local file store
    env.update(extra)
    return env


# ── measurements ──────────────────────────────────────────────────────────────────────────────
class Receiver:
    """Our ingest receiver in its own process, so its CPU is not charged to the SDK under test."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, str(db), SECRET.decode()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=clean_env({"PYTHONPATH": str(REPO)}),
            cwd=WORK,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def run_sdk(sdk: str, python: str, mode: str, calls: int, receiver: Receiver | None, budget_s: float) -> dict[str, Any]:
    from tuneplane.ingest import mint_token

    workdir = WORK / "runs" / f"{sdk}-{mode}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    extra = {"PYTHONPATH": str(REPO)} if sdk == "ours" else {}
    run_id = f"{sdk}-{mode}-{time.time_ns()}"
    if mode in ("enabled", "loaded", "steps") and receiver is not None:
        extra.update(
            TUNEPLANE_JOB_ENABLED="1",
            TUNEPLANE_JOB_ENDPOINT=receiver.url,
            TUNEPLANE_JOB_RUN_ID=run_id,
            TUNEPLANE_JOB_TOKEN=mint_token(SECRET, run_id),
            TUNEPLANE_OUT_DIR=str(workdir),
        )
    burner = subprocess.Popen([sys.executable, "-c", BURNER]) if mode == "loaded" else None
    try:
        done = subprocess.run(
            [
                python,
                "-c",
                RUNNER,
                sdk,
                "enabled" if mode == "loaded" else mode,
                str(calls),
                str(workdir),
                str(budget_s),
            ],
            capture_output=True,
            text=True,
            env=clean_env(extra),
            cwd=workdir,
            timeout=900,
        )
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    if done.returncode != 0:
        raise RuntimeError(f"{sdk} {mode} failed: {done.stderr.strip()[-800:]}")
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    result["delivered"] = delivered(sdk, mode, workdir, receiver, run_id)
    if sdk == "ours" and mode == "loaded":
        # What finish() could not send in its bounded time waits in the out dir; the collector (or the
        # backend after the job) uploads it: this is the delivered share after that pass.
        subprocess.run(
            [sys.executable, "-m", "tuneplane.collector", "--once"],
            env=clean_env(extra),
            cwd=workdir,
            capture_output=True,
            timeout=600,
        )
        result["delivered_after_collector"] = delivered(sdk, mode, workdir, receiver, run_id)
    return result


def delivered(sdk: str, mode: str, workdir: Path, receiver: Receiver | None, run_id: str) -> int | None:
    if mode not in ("enabled", "loaded"):
        return None
    if sdk in ("ours", "upstream") and receiver is not None:
        from tuneplane.ingest import summary

        return sum(v["count"] for v in summary(receiver.db, run_id).values())
    if sdk == "mlflow":
        files = [f for f in workdir.glob("mlruns/*/*/metrics/*") if f.is_file()]
        return sum(len(f.read_text().splitlines()) for f in files)
    return None


def import_ms(python: str, module: str, sdk: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = clean_env({"PYTHONPATH": str(REPO)} if sdk == "ours" else {})
    runs = [
        float(
            subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=WORK, check=True).stdout
        )
        for _ in range(5)
    ]
    return statistics.median(runs) * 1000


# ── report ────────────────────────────────────────────────────────────────────────────────────
def us(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1000:.3f}"


def pct(row: dict[str, Any]) -> str:
    got, logged = row.get("delivered"), row.get("logged_points")
    if got is None or not logged:
        return "n/a"
    return f"{got}/{logged} ({100 * got / logged:.1f}%)"


def table(rows: dict[str, dict[str, Any]]) -> str:
    header = (
        f"{'sdk':<10} {'import ms':>9} {'no-token us':>11} {'enabled us':>10} {'mean us':>8} "
        f"{'cpu us':>7} {'calls':>7} {'finish s':>8}  delivered"
    )
    lines = [header, "-" * len(header)]
    for name, row in rows.items():
        off, on = row.get("off") or {}, row.get("on") or {}
        lines.append(
            f"{name:<10} {row.get('import_ms', 0):>9.1f} {us(off.get('median_ns')):>11} "
            f"{us(on.get('median_ns')):>10} {us(on.get('mean_ns')):>8} {us(on.get('cpu_ns')):>7} "
            f"{on.get('calls', 0):>7} "
            f"{on.get('finish_s', 0):>8.2f}  {pct(on)}"
        )
    lines.append("")
    lines.append("machine loaded by a second (CPU-bound) process, enabled:")
    for name, row in rows.items():
        loaded = row.get("loaded") or {}
        if loaded:
            after = loaded.get("delivered_after_collector")
            tail = (
                (
                    f"; after the collector's pass {after}/{loaded['logged_points']} "
                    f"({100 * after / loaded['logged_points']:.1f}%)"
                )
                if after is not None
                else ""
            )
            lines.append(
                f"  {name:<10} mean {us(loaded.get('mean_ns'))} us, finish {loaded.get('finish_s', 0):.2f} s, "
                f"delivered {pct(loaded)}{tail}"
            )
    lines.append("")
    lines.append(
        "step-loop slowdown (1 ms sleep + 2 ms matmul per step, one log() of 4 floats; median of "
        "per-round ratios, 95 % interval; plain against plain is the measure's own noise):"
    )
    for name, row in rows.items():
        steps = row.get("steps") or {}
        if steps:
            lines.append(
                f"  {name:<10} {steps['plain_step_ms']:.3f} ms -> {steps['logged_step_ms']:.3f} ms per step: "
                f"{steps['slowdown_pct']:+.1f}% ({steps['ci_pct'][0]:+.1f}..{steps['ci_pct'][1]:+.1f}%; "
                f"quartiles {steps['spread_pct'][0]:+.1f}..{steps['spread_pct'][1]:+.1f}%), "
                f"plain vs plain {steps['noise_pct'][0]:+.1f}..{steps['noise_pct'][1]:+.1f}%, "
                f"{steps['rounds']} rounds of 4x{steps['block_steps']} steps: {step_verdict(steps)}"
            )
    ours = rows.get("ours", {})
    lines.append("")
    lines.append("ratios (peer / ours; higher means ours is faster):")
    for name, row in rows.items():
        if name == "ours":
            continue
        parts = []
        for label, side in (("no-token", "off"), ("enabled", "on"), ("mean", "on"), ("cpu", "on")):
            field = {"mean": "mean_ns", "cpu": "cpu_ns"}.get(label, "median_ns")
            a, b = (row.get(side) or {}).get(field), (ours.get(side) or {}).get(field)
            if a and b and b > 0:
                parts.append(f"{label} x{a / b:.1f}")
        if row.get("import_ms") and ours.get("import_ms"):
            parts.append(f"import x{row['import_ms'] / ours['import_ms']:.1f}")
        lines.append(f"  {name:<10} " + ", ".join(parts))
    return "\n".join(lines)


def step_verdict(steps: dict[str, Any]) -> str:
    """What the step-loop measure can say: a slowdown only when its interval clears both zero and the
    measure's own noise (plain against plain); otherwise that it cannot tell, and how wide the noise is."""
    low, high = steps["ci_pct"]
    noise_low, noise_high = steps["noise_pct"]
    noise = max(abs(noise_low), abs(noise_high))
    if low > 0 and low > noise_high:
        return f"slower, by {low:.1f}% at least"
    if high < 0 and high < noise_low:
        return f"faster, by {-high:.1f}% at least (the loop, not the SDK: check the machine)"
    if max(abs(low), abs(high)) <= noise:
        return f"within noise (cannot tell it from 0; the noise here is +-{noise:.1f}%)"
    return (
        f"cannot tell: the interval overlaps the noise (+-{noise:.1f}%) without lying inside it; "
        "rerun with more --steps"
    )


def verdict(ours: dict[str, Any]) -> str:
    on, off = ours.get("on") or {}, ours.get("off") or {}
    got, logged = on.get("delivered") or 0, on.get("logged_points") or 1
    checks = [
        ("log() with no token", off.get("median_ns", 1e9) / 1000, TARGETS["no_token_us"], "us"),
        ("log() enabled (chunked median)", on.get("median_ns", 1e9) / 1000, TARGETS["enabled_us"], "us"),
        ("log() enabled (plain mean, sender included)", on.get("mean_ns", 1e9) / 1000, TARGETS["mean_us"], "us"),
        ("import tuneplane.report", ours.get("import_ms", 1e9), TARGETS["import_ms"], "ms"),
    ]
    lines = [
        f"  {'ok ' if value <= limit else 'MISS'} {label}: {value:.3f} {unit} (target <= {limit} {unit})"
        for label, value, limit, unit in checks
    ]
    share = 100 * got / logged
    mark = "ok " if share >= TARGETS["delivered_pct"] else "MISS"
    lines.append(f"  {mark} delivered: {share:.1f}% (target 100%)")
    return "targets for ours:\n" + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000, help="log() calls per measurement")
    parser.add_argument("--peers", default="upstream,wandb,mlflow", help="comma-separated; empty for none")
    parser.add_argument(
        "--peer-seconds",
        type=float,
        default=60.0,
        help="stop a slow peer's loop after this long (its call count is reported)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=8000,
        help="steps of the step-loop slowdown measurement, logged and plain together (rounds of "
        "four blocks: plain, logged, logged, plain)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))

    sdks = {"ours": sys.executable}
    for name in filter(None, args.peers.split(",")):
        if name not in PEERS:
            parser.error(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
        python = peer_python(name)
        if python:
            sdks[name] = python
    db = WORK / "bench-ingest.sqlite"
    for stale in WORK.glob("bench-ingest.sqlite*"):
        stale.unlink()
    receiver = Receiver(db)
    rows: dict[str, dict[str, Any]] = {}
    try:
        for name, python in sdks.items():
            module = "tuneplane.report" if name in ("ours", "upstream") else PEERS[name][2]
            say(f"measuring {name} ...")
            row: dict[str, Any] = {"import_ms": import_ms(python, module, name)}
            budget = 1e9 if name == "ours" else args.peer_seconds
            try:
                if name != "mlflow":
                    row["off"] = run_sdk(name, python, "off", args.calls, receiver, budget)
                row["on"] = run_sdk(name, python, "enabled", args.calls, receiver, budget)
                if name in ("ours", "upstream"):
                    row["loaded"] = run_sdk(name, python, "loaded", args.calls, receiver, budget)
                row["steps"] = run_sdk(name, python, "steps", args.steps, receiver, budget)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                say(f"  {name}: {exc}")
            rows[name] = row
    finally:
        receiver.stop()
    print(table(rows))
    print()
    print(verdict(rows.get("ours", {})))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
