"""Benchmark: the GitOps bot as CI runs it, whole process (`python -m tuneplane bot reconcile`).

    python bench/bot.py [--requests 200] [--statuses 2000] [--runs 5]

1. 200 new run requests submitted to the fake Kubernetes API server (tests/fakekube.py, real client,
   real HTTP on 127.0.0.1), status files written and committed; with and without `--push` to a bare
   remote. Target ≤ 20 s.
2. A no-op reconcile over a lab with 2,000 finished runs (2,000 requests, 2,000 status files), the
   common case of a merge that adds no run request, after the bot's first run there (which learns
   that every request has a status and commits its ledger). Target ≤ 1 s.
3. 100 new run requests (`--slurm 100`) submitted to a real two-node Slurm cluster started here
   (tests/slurm_cluster.py: munged, slurmctld, two slurmd; needs root and slurm-wlm): one `sbatch`
   per run plus staging the lab into each run's directory; time per submission printed beside the
   Kubernetes twin's. Skipped with the reason where the cluster cannot start.

The upstream client has no GitOps bot, so there is no peer to compare with; targets are absolute.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from fakekube import FakeKube  # noqa: E402
from peers import table  # noqa: E402
from support.repos import (  # noqa: E402
    BRANCH,
    add_requests,
    clone,
    git,
    kubeconfig,
    make_remote,
    run_ids,
    seed_lab,
)

TARGETS = {"submit": 20.0, "noop": 1.0}
NOOP_TRAIN = "#!/usr/bin/env bash\necho ok\n"


def bot(root: Path, *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane", "bot", "reconcile", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"tp bot reconcile failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return elapsed


def submit_round(tmp: Path, n: int, push: bool, validate: bool = True) -> tuple[float, int]:
    """One fresh lab with `n` requests; returns (seconds, jobs created). `validate`: the twin checks every
    write against the real schemas (as a cluster does); off only to show what that check costs."""
    kube = FakeKube()
    kube.validate = validate
    kube.start()
    try:
        remote = make_remote(tmp)
        seed_lab(
            remote,
            tmp / "seed",
            {"demo": "echo hi\n"},
            backend="kubernetes",
            runs=[("demo", r) for r in run_ids(n)],
            profile="h200:8",
        )
        lab = clone(remote, tmp / "bot")
        config = kubeconfig(tmp / "kubeconfig", kube.url)
        seconds = bot(lab, "--kubeconfig", str(config), *(["--push"] if push else []))
        created = sum(c for (kind, _, _), c in kube.creations.items() if kind == "Job")
        return seconds, created
    finally:
        kube.stop()


def slurm_round(tmp: Path, n: int) -> tuple[float, int] | str:
    """`n` requests through the bot to the real Slurm cluster; (seconds, jobs submitted) or why not."""
    import slurm_cluster
    from support.slurm import make_slurm_lab, request_run

    reason = slurm_cluster.missing_reason()
    if reason:
        return reason
    with slurm_cluster.running_cluster(tmp / "cluster") as cluster:
        lab = make_slurm_lab(tmp / "lab", cluster, tmp / "shared", {"demo": {"train.sh": NOOP_TRAIN}})
        for run_id in run_ids(n):
            request_run(lab, "demo", run_id, "cpu", commit=False)
        git(lab, "add", "-A")
        git(lab, "commit", "-q", "-m", f"request {n} runs")
        try:
            seconds = bot(lab)
            listed = cluster.command("squeue", "--noheader", "--states=all", "--format=%k")
            submitted = sum(1 for line in listed.splitlines() if line.startswith("tuneplane-run="))
        finally:
            cluster.command("scancel", "--user=root", check=False)
        return seconds, submitted


def finished_lab(tmp: Path, n: int) -> Path:
    """A lab of `n` finished runs, written as the bot would have written them."""
    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.lab.runs import write_status
    from tuneplane.models.run import BackendObject, RunStatus, Transition
    from tuneplane.record.batch import refresh_dashboard

    remote = make_remote(tmp)
    lab = seed_lab(remote, tmp / "lab", {"demo": "echo hi\n"}, backend="kubernetes", profile="h200:8")
    ids = run_ids(n)
    add_requests(lab, [("demo", r) for r in ids], profile="h200:8", commit=False)
    for i, run_id in enumerate(ids):
        write_status(
            lab,
            RunStatus(
                experiment="demo",
                run_id=run_id,
                method="custom/custom",
                profile="h200:8",
                phase="Succeeded",
                submitted_at="2025-01-02T10:00:00Z",
                started_at="2025-01-02T10:01:00Z",
                finished_at="2025-01-02T11:00:00Z",
                exit_code=0,
                backend=BackendObject(backend="kubernetes", kind="Job", name=f"demo-{i:010x}", namespace="tuneplane"),
                metrics={"loss": 1.0 / (i + 1)},
                metric_history={"loss": [3.0, 2.0, 1.0, 1.0 / (i + 1)]},
                history=[
                    Transition(phase="Submitted", at="2025-01-02T10:00:00Z"),
                    Transition(phase="Succeeded", at="2025-01-02T11:00:00Z"),
                ],
            ),
        )
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "2,000 finished runs")
    refresh_dashboard(GitRepo(lab))  # the pages and the bot's ledger, as a first bot run writes them
    git(lab, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot(lab, "--push")  # the bot's first run: it learns that every request has a status (the ledger)
    return lab


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--statuses", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slurm", type=int, default=100, help="runs submitted to the real Slurm cluster (0: skip)")
    parser.add_argument(
        "--compare-validation",
        action="store_true",
        help="also time the submit round with the twin's schema validation off",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-bot-"))
    try:
        return _run(tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(tmp: Path, args: argparse.Namespace) -> int:
    rows = []
    ok = True
    kube_per_run = 0.0
    for push in (False, True):
        times = []
        for i in range(max(1, args.runs // 2)):
            seconds, created = submit_round(tmp / f"submit-{push}-{i}", args.requests, push)
            if created != args.requests:
                raise RuntimeError(f"{created} jobs created for {args.requests} requests")
            times.append(seconds)
        median = statistics.median(times)
        kube_per_run = kube_per_run or median / args.requests
        ok &= median <= TARGETS["submit"]
        label = f"reconcile: submit {args.requests} runs" + (" + push" if push else "")
        rows.append(
            [
                label,
                f"{median:.2f} s",
                f"≤ {TARGETS['submit']:g} s",
                f"{median / args.requests * 1000:.0f} ms",
            ]
        )
    if args.slurm:
        rows.append(_slurm_row(tmp / "slurm", args.slurm, kube_per_run))
    if args.compare_validation:
        seconds, _ = submit_round(tmp / "submit-unvalidated", args.requests, False, validate=False)
        rows.append(
            [
                f"reconcile: submit {args.requests} runs, twin validation off (for comparison)",
                f"{seconds:.2f} s",
                "",
                f"{seconds / args.requests * 1000:.0f} ms",
            ]
        )
    print(f"building a lab of {args.statuses} finished runs …")
    lab = finished_lab(tmp / "noop", args.statuses)
    for label, extra in (("", ()), (" --push", ("--push",))):
        times = [bot(lab, *extra) for _ in range(args.runs)]
        median = statistics.median(times)
        ok &= median <= TARGETS["noop"]
        rows.append(
            [
                f"reconcile: no-op over {args.statuses} statuses{label}",
                f"{median:.2f} s",
                f"≤ {TARGETS['noop']:g} s",
                "",
            ]
        )
    if git(lab, "status", "--porcelain"):
        raise RuntimeError("a no-op reconcile changed the lab")
    print(table(rows, ["case (whole process, median)", "time", "target", "per run"]))
    return 0 if ok else 1


def _slurm_row(tmp: Path, n: int, kube_per_run: float) -> list[str]:
    result = slurm_round(tmp, n)
    label = f"reconcile: submit {n} runs to real Slurm"
    if isinstance(result, str):
        return [label, "skipped", result, ""]
    seconds, submitted = result
    if submitted != n:
        raise RuntimeError(f"{submitted} Slurm jobs for {n} requests")
    per_run = seconds / n
    return [
        label,
        f"{seconds:.2f} s",
        f"Kubernetes twin {kube_per_run * 1000:.0f} ms/run",
        f"{per_run * 1000:.0f} ms ({per_run / kube_per_run:.1f}x the twin)"
        if kube_per_run
        else f"{per_run * 1000:.0f} ms",
    ]


if __name__ == "__main__":
    sys.exit(main())
