"""Benchmark: a lab's git history after thousands of runs, and the bot's no-op cost over it.

    python bench/history.py [--runs 10000] [--batch 20] [--statuses 20000] [--repeat 5]

1. History: `--runs` runs go through the bot's own writer (`record.batch.Batch`, the code `tp bot`
   commits with) the way a busy lab makes them: a merge adds `--batch` run requests, a reconcile
   commits their `Submitted` statuses, a sync commits them `Succeeded` with metrics and a chart
   (`status/<exp>/<run-id>.svg`), over five experiments and a year of run ids, pushed once, the
   remote then maintained as a git host does (`git gc`: one pack, the pushed deltas reused, a
   reachability bitmap). Then a full clone of the bare
   remote over smart HTTP (`git http-backend`, tests/githttp.py, as CI clones from a git host): the
   size of its `.git` (target ≤ 10 MB) and the clone's wall time (target ≤ 2 s); the same clone over
   git's local transport is printed beside it, where the clone's bytes go (by kind of file), where
   its time goes (server pack, client index-pack, checkout) and two floors: a clone of one commit of
   the same paths, each a tiny file (the checkout and the work tree's index no history avoids), and
   the structure floor: the same history (commits, paths, trees, one distinct blob per file version)
   with every blob a tiny distinct text, served and cloned the same way (what the layout and the
   bot's commits cost with no content at all).
   Beside it, the bot's clone as the lab's workflow makes it (`fetch-depth: 1`: `git clone --depth 1`
   over smart HTTP): its `.git`, its wall time and its `--no-checkout` part, what a bot run pays.
   Then the bot's CI job at that size: its checkout plus a `tp bot reconcile --push` with nothing to do,
   as the workflow ran it before (`fetch-depth: 1`, every file checked out) and from the sparse checkout
   without the run files (`lab.runs.SPARSE_CHECKOUT`; target ≤ 3 s), median of `--repeat`.
2. No-op: a lab with `--statuses` finished runs (written in a few commits), one bot run to build its
   ledger, then `python -m tuneplane bot reconcile` and `… bot sync` as whole processes, median of
   `--repeat` (target ≤ 0.3 s each).

There is no peer with a GitOps bot; beside our figures the table prints what the issue measured on
main before this design (one commit per run, the whole dashboard rewritten each time).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
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
from peers import table  # noqa: E402
from support.repos import BRANCH, git, make_remote, seed_lab  # noqa: E402

TARGETS = {"git": 10.0, "clone": 2.0, "noop": 0.3, "ci": 3.0}
MAIN = {"git": "59 MB", "clone": "18 s", "noop": "1.3–1.7 s"}  # issue 14, measured on main
MAIN_CI = "14–18 s"  # issue 27: the bot's CI checkout plus a no-op pass at 10,000 runs, measured on main
EXPERIMENTS = ("sft-base", "sft-lora", "dpo", "grpo", "eval")


def run_ids(count: int, seed: int = 7) -> list[str]:
    """Time-ordered run ids spread over a year (about 27 a day), 10 hex digits like `tp` draws."""
    rng = random.Random(seed)
    start = time.mktime((2025, 1, 1, 0, 0, 0, 0, 0, 0))
    step = 365 * 86400 / max(1, count)
    out = []
    for i in range(count):
        t = time.gmtime(start + i * step + rng.random() * step * 0.5)
        out.append(time.strftime("%Y%m%d-%H%M%S", t) + f"-{rng.getrandbits(40):010x}")
    return out


def status(exp: str, run_id: str, phase: str, rng: random.Random, commit: str = "") -> object:
    """A run's status as the bot writes it in `phase`. What the job object and the submission fixed (the
    object's uid, the JobSpec digest, the commit) is drawn from the run id, so the Succeeded status keeps
    the Submitted one's, as `tp bot sync` does (it copies the status and changes phase, times, metrics)."""
    from tuneplane.models.run import Artifact, BackendObject, Provenance, RunStatus, Transition

    fixed = random.Random(run_id)
    uid, digest, drawn_commit = fixed.getrandbits(128), fixed.getrandbits(256), fixed.getrandbits(160)
    day = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}"
    t0, t1, t2 = f"{day}T{run_id[9:11]}:{run_id[11:13]}:{run_id[13:15]}Z", f"{day}T23:10:00Z", f"{day}T23:55:00Z"
    history = [Transition(phase="Submitted", at=t0)]
    fields: dict[str, object] = {}
    if phase == "Succeeded":
        history += [Transition(phase="Running", at=t1), Transition(phase="Succeeded", at=t2)]
        # as `observe.with_metrics` writes them: last values exact, the sparkline history to 4 digits
        loss = [float(f"{2.5 * math.exp(-i / 6) + rng.random() * 0.05:.4g}") for i in range(20)]
        fields = {
            "started_at": t1,
            "finished_at": t2,
            "exit_code": 0,
            "metrics": {
                "train/loss": loss[-1],
                "validation/loss": loss[-1] * 1.1,
                "train/token_accuracy": 0.6 + rng.random() * 0.3,
            },
            "metric_history": {"train/loss": loss, "validation/loss": [float(f"{v * 1.1:.4g}") for v in loss[::5]]},
            "artifacts": [
                Artifact(kind="checkpoint", path="checkpoints/step-200", format="dir", size_bytes=0, step=200)
            ],
        }
    return RunStatus(
        experiment=exp,
        run_id=run_id,
        method="trl/sft",
        profile="h200:8",
        phase=phase,  # type: ignore[arg-type]
        submitted_at=t0,
        history=history,
        backend=BackendObject(
            backend="kubernetes", kind="JobSet", name=f"{exp}-{run_id[-10:]}", namespace="tuneplane", uid=f"{uid:032x}"
        ),
        provenance=Provenance(
            commit=commit or f"{drawn_commit:040x}",
            recipe="trl/sft@1.0.0",
            recipe_digest="sha256:" + "a" * 64,
            image="ghcr.io/org/trl@sha256:" + "b" * 64,
            jobspec_digest=f"sha256:{digest:064x}",
            tool_version="0.6.0",
        ),
        out_dir=f"/mnt/runs/{exp}/{run_id}/out",
        **fields,
    )


def series(rng: random.Random, start: float = 1.7e9) -> dict[str, list[tuple[int, float, float | None]]]:
    """A TRL run's metrics as the ingest's timed read returns them: (step, value, epoch seconds)."""
    steps = range(1, 201)
    points = {
        "loss": [(s, 2.5 * math.exp(-s / 60) + rng.random() * 0.08) for s in steps],
        "mean_token_accuracy": [(s, 0.4 + 0.5 * (1 - math.exp(-s / 80)) + rng.random() * 0.02) for s in steps],
        "learning_rate": [(s, 2e-5 * (1 - s / 200)) for s in steps],
        "grad_norm": [(s, 1 + rng.random()) for s in steps],
        "eval_loss": [(s, 2.6 * math.exp(-s / 65)) for s in steps if s % 20 == 0],
    }
    return {k: [(s, v, start + 4.0 * s) for s, v in pts] for k, pts in points.items()}


def build_history(tmp: Path, runs: int, batch: int) -> tuple[Path, float]:
    from support.repos import request

    from tuneplane.lab.gitrepo import GitRepo
    from tuneplane.lab.runs import RunKey, dump_request
    from tuneplane.record.batch import Batch
    from tuneplane.views.runmetrics import chart_svg, vocabulary_of

    remote = make_remote(tmp)
    lab = seed_lab(remote, tmp / "lab", {e: "echo hi\n" for e in EXPERIMENTS}, backend="kubernetes", profile="h200:8")
    repo = GitRepo(lab)
    rng = random.Random(1)
    vocab = vocabulary_of("trl/sft")
    ids = run_ids(runs)
    started = time.perf_counter()
    for at in range(0, runs, batch):
        chunk = [(EXPERIMENTS[rng.randrange(len(EXPERIMENTS))], r) for r in ids[at : at + batch]]
        paths = []
        for exp, run_id in chunk:  # the merge of a pull request with `batch` run requests
            rel = RunKey(exp, run_id).request_rel
            (lab / rel).parent.mkdir(parents=True, exist_ok=True)
            (lab / rel).write_text(dump_request(request(exp, run_id, "h200:8")), encoding="utf-8")
            paths.append(rel)
        git(lab, "add", "--", *paths)
        git(lab, "commit", "-q", "-m", f"request {len(paths)} runs")
        head = git(lab, "rev-parse", "HEAD")  # what the jobs of this merge run
        for phase in ("Submitted", "Succeeded"):  # reconcile, then sync, each one commit
            writer = Batch(repo)
            for exp, run_id in chunk:
                writer.status(status(exp, run_id, phase, rng, head))  # type: ignore[arg-type]
                if phase == "Succeeded":
                    writer.chart(RunKey(exp, run_id), chart_svg(RunKey(exp, run_id), series(rng), vocab))
            writer.render([], [])
            writer.commit(f"tp bot: {phase.lower()} {len(chunk)} runs")
        if (at // batch) % 50 == 0:
            print(f"  {at + len(chunk)} runs, {time.perf_counter() - started:.0f} s", flush=True)
    git(lab, "push", "-q", "origin", f"HEAD:{BRANCH}")
    # the host's maintenance: one pack, the pushed deltas reused (no -f), and the reachability bitmap
    # that `git gc` writes in a bare repository (a git host keeps one too)
    git(remote, "gc", "-q")
    if not list((remote / "objects" / "pack").glob("*.bitmap")):
        raise RuntimeError("git gc wrote no bitmap in the bare remote")
    return remote, time.perf_counter() - started


def measure_clone(
    tmp: Path, remote: Path, repeat: int, structure: Path
) -> tuple[float, float, float, float, float, tuple[float, float, float, float], tuple[float, float, float]]:
    """Median wall time of a full clone over smart HTTP (`git http-backend`, as a git host serves CI) and
    over git's local transport (`--no-local`: the same upload-pack, no HTTP), the CPU seconds of one HTTP
    clone (every git process of it, server side included: a figure a loaded machine does not inflate),
    the clone's `.git` in MB (everything under it: pack, pack index, the work tree's index), and the
    median wall time of the same HTTP clone with `--no-checkout` (the history's part: writing the work
    tree's files costs what this filesystem makes it cost, whatever the history). Last, the same four
    figures of the bot's clone (`shallow_clone`), interleaved with these (first in every other round:
    a filesystem that discards deleted blocks gets slower as a run goes on), and the median wall time,
    CPU seconds and `.git` MB of the same full HTTP clone of `structure` (the structure floor), in the
    same rounds."""
    from githttp import GitHttpServer

    server = GitHttpServer(remote.parent).start()
    try:
        url = server.url(remote.name)
        times: dict[str, list[float]] = {"http": [], "local": [], "cpu": [], "bare": [], "floor": [], "floor-cpu": []}
        floor_size = 0.0
        shallow: list[tuple[float, float, float, float]] = []
        size = 0.0
        for i in range(repeat):
            if i % 2 == 0:
                shallow.append(shallow_clone(url, tmp / f"shallow-{i}"))
            start = time.perf_counter()
            subprocess.run(
                ["git", "clone", "-q", "--no-checkout", url, str(tmp / "clone-bare")], check=True, timeout=600
            )
            times["bare"].append(time.perf_counter() - start)
            shutil.rmtree(tmp / "clone-bare")
            for how, source in (("http", url), ("local", str(remote))):
                dest = tmp / f"clone-{how}-{i}"
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run(["git", "clone", "-q", "--no-local", source, str(dest)], check=True, timeout=600)
                times[how].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if how == "http":
                    times["cpu"].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                size = sum(p.stat().st_size for p in (dest / ".git").rglob("*") if p.is_file()) / 1e6
                if i or how != "http":
                    shutil.rmtree(dest)  # the first HTTP clone stays for `breakdown`
            dest = tmp / f"clone-structure-{i}"
            wall, cpu = cpu_of(["git", "clone", "-q", server.url(structure.name), str(dest)])
            times["floor"].append(wall)
            times["floor-cpu"].append(cpu)
            floor_size = sum(p.stat().st_size for p in (dest / ".git").rglob("*") if p.is_file()) / 1e6
            shutil.rmtree(dest)
            if i % 2 == 1:
                shallow.append(shallow_clone(url, tmp / f"shallow-{i}"))
        posts = [path for method, path, _status in server.requests if method == "POST"]
        if not any(path.endswith("/git-upload-pack") for path in posts):
            raise RuntimeError(f"the HTTP clone did not use the smart protocol: {server.requests[:5]}")
    finally:
        server.stop()
    medians = [statistics.median(times[k]) for k in ("http", "local", "cpu", "bare")]
    bot = (
        statistics.median(t[0] for t in shallow),
        statistics.median(t[1] for t in shallow),
        shallow[-1][2],
        statistics.median(t[3] for t in shallow),
    )
    floor = (statistics.median(times["floor"]), statistics.median(times["floor-cpu"]), floor_size)
    return medians[0], medians[1], medians[2], size, medians[3], bot, floor


def shallow_clone(url: str, dest: Path) -> tuple[float, float, float, float]:
    """The bot's clone as the lab's workflow makes it (`fetch-depth: 1`): `git clone --depth 1` of `url`
    (smart HTTP). Its wall time, CPU seconds (every git process, the server's included), its `.git` in
    MB, and the wall time of the same clone with `--no-checkout` (what the history still costs)."""
    start = time.perf_counter()
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--no-checkout", url, str(dest)], check=True, timeout=600)
    bare = time.perf_counter() - start
    shutil.rmtree(dest)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(["git", "clone", "-q", "--depth", "1", url, str(dest)], check=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if git(dest, "rev-list", "--count", "HEAD") != "1":
        raise RuntimeError("`git clone --depth 1` fetched more than one commit")
    size = sum(p.stat().st_size for p in (dest / ".git").rglob("*") if p.is_file()) / 1e6
    shutil.rmtree(dest)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, size, bare


def cpu_of(command: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (every child process) of one git command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, timeout=600, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - start, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def clone_phases(tmp: Path, remote: Path) -> list[list[str]]:
    """Where a full clone's time goes: the server's pack (what upload-pack runs), the client's
    index-pack of it, a `--no-checkout` clone (both, and the connectivity check), then the checkout
    of the work tree alone; and the history's raw bytes the two sides parse or hash."""
    pack = tmp / "phases.pack"
    with pack.open("wb") as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            ["git", "pack-objects", "--revs", "--all", "--stdout", "--delta-base-offset", "-q"],
            cwd=remote,
            stdin=subprocess.DEVNULL,
            stdout=out,
            check=True,
            timeout=600,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = (time.perf_counter() - start, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    git(tmp, "init", "-q", "--bare", "phases.git")
    with pack.open("rb") as data:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            ["git", "index-pack", "--stdin"],
            cwd=tmp / "phases.git",
            stdin=data,
            stdout=subprocess.DEVNULL,
            check=True,
            timeout=600,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = (time.perf_counter() - start, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    bare = cpu_of(["git", "clone", "-q", "--no-local", "--no-checkout", str(remote), str(tmp / "phases")])
    shutil.rmtree(tmp / "phases")
    full = cpu_of(["git", "clone", "-q", "--no-local", str(remote), str(tmp / "phases")])
    checkout = (full[0] - bare[0], full[1] - bare[1])  # clone's own checkout (a later `reset --hard` is slower)
    files = len(git(tmp / "phases", "ls-files").splitlines())
    sample = tmp / "phases.sample"
    sample.write_bytes(random.Random(0).randbytes(100_000_000))
    hashing = cpu_of(["git", "hash-object", str(sample)])
    sample.unlink()
    raw: dict[str, int] = {}
    listed = git(remote, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype) %(objectsize)")
    for line in listed.splitlines():
        kind, size = line.split()
        raw[kind] = raw.get(kind, 0) + int(size)
    shutil.rmtree(tmp / "phases")
    shutil.rmtree(tmp / "phases.git")
    pack.unlink()

    def shown(wall_cpu: tuple[float, float]) -> str:
        return f"{wall_cpu[0]:.2f} s wall, {wall_cpu[1]:.2f} s CPU"

    return [
        ["server: `git pack-objects` of the full clone (bitmap, deltas reused)", shown(server)],
        ["client: `git index-pack` of that pack (inflates, resolves, hashes)", shown(client)],
        ["`git clone --no-checkout` (local transport: both of these, one machine)", shown(bare)],
        [f"its checkout: {files} files (the full clone less the `--no-checkout` one)", shown(checkout)],
        [
            "raw bytes the history holds (what index-pack inflates and hashes)",
            " · ".join(f"{k}s {v / 1e6:.0f} MB" for k, v in sorted(raw.items())),
        ],
        ["for scale: `git hash-object` of 100 MB on this machine", shown(hashing)],
    ]


def history_entropy(remote: Path, preset: int = 9) -> int:
    """Bytes of every blob version the history holds, compressed by xz at `preset` (extreme) in one
    stream, the files in path order and each path's versions side by side, oldest first: what the
    content costs at the least, however it is packed (a git pack compresses each object alone, with
    zlib and deltas within a window, and stays above it)."""
    import lzma  # lazy: the breakdown alone needs it

    listed = git(remote, "rev-list", "--objects", "--all", "--reverse").splitlines()
    kinds = git(remote, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    blobs = {line.split()[0] for line in kinds.splitlines() if line.endswith(" blob")}
    found = sorted(
        (path, order, oid)
        for order, (oid, _, path) in enumerate(line.partition(" ") for line in listed)
        if oid in blobs
    )
    compressor = lzma.LZMACompressor(preset=preset | lzma.PRESET_EXTREME)
    reader = subprocess.Popen(["git", "cat-file", "--batch"], cwd=remote, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert reader.stdin is not None and reader.stdout is not None
    packed = 0
    try:
        for _path, _order, oid in found:
            reader.stdin.write(oid.encode() + b"\n")
            reader.stdin.flush()
            size = int(reader.stdout.readline().split()[2])
            packed += len(compressor.compress(reader.stdout.read(size + 1)[:size]))
    finally:
        reader.stdin.close()
        reader.wait(timeout=60)
    return packed + len(compressor.flush())


def structure_floor(remote: Path) -> tuple[Path, int]:
    """The structure floor beside `remote`: the same commits (authors, dates, messages, parents), the same
    paths and trees, one blob per file version as the history has them, but every blob a tiny distinct
    text (its number in hex), maintained as the host maintains `remote` (fresh deltas, one pack, a
    bitmap). No content in the files can make a clone cheaper than this one: what is left is the layout
    (files per run, the paths the contract fixes) and the bot's commits. Returns it and the bytes of
    its tiny blobs (content the floor holds that a lab's files would replace)."""
    floor_repo = remote.parent / "structure.git"
    git(remote.parent, "init", "-q", "--bare", floor_repo.name)
    export = subprocess.Popen(["git", "fast-export", "--all"], cwd=remote, stdout=subprocess.PIPE)
    load = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=floor_repo, stdin=subprocess.PIPE)
    assert export.stdout is not None and load.stdin is not None
    blobs, in_blob, tiny = 0, False, 0
    for line in export.stdout:  # fast-export's stream: only the blobs' data is replaced
        if line == b"blob\n":
            in_blob = True
        elif line.startswith((b"commit ", b"tag ", b"reset ")):
            in_blob = False
        if line.startswith(b"data "):
            data = export.stdout.read(int(line[5:]))
            if in_blob:
                blobs, in_blob = blobs + 1, False
                data = b"%x" % blobs
                tiny += len(data)
            load.stdin.write(b"data %d\n" % len(data) + data)
            continue
        load.stdin.write(line)
    load.stdin.close()
    if export.wait(timeout=600) or load.wait(timeout=600):
        raise RuntimeError("git fast-export | fast-import of the structure floor failed")
    git(floor_repo, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
    git(floor_repo, "repack", "-a", "-d", "-f", "-q")  # fast-import's deltas are its own: the host's are fresh
    git(floor_repo, "gc", "-q")
    if git(floor_repo, "rev-list", "--count", "--all") != git(remote, "rev-list", "--count", "--all"):
        raise RuntimeError("the structure floor does not have the history's commits")
    return floor_repo, tiny


def floor(tmp: Path, remote: Path) -> list[list[str]]:
    """What no history can go below: one commit holding the same paths, every file one tiny blob, cloned
    the same way (`--no-local`). Its clone time is the checkout of that many files on this
    filesystem, its `.git` mostly the work tree's index: the lab's layout (a request, a status and a
    chart per run, at paths the contract fixes) sets both."""
    paths = git(remote, "ls-tree", "-r", "--name-only", BRANCH).splitlines()
    repo = tmp / "floor.git"
    git(tmp, "init", "-q", "--bare", "floor.git")
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input="x\n", capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        ["git", "update-index", "--index-info"],
        cwd=repo,
        check=True,
        text=True,
        input="".join(f"100644 {blob}\t{p}\n" for p in paths),
        env={**os.environ, "GIT_INDEX_FILE": str(tmp / "floor.index")},
    )
    tree = subprocess.run(
        ["git", "write-tree"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GIT_INDEX_FILE": str(tmp / "floor.index")},
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.org", "commit-tree", tree, "-m", "floor"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git(repo, "update-ref", f"refs/heads/{BRANCH}", commit)
    git(repo, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
    wall, cpu = cpu_of(["git", "clone", "-q", "--no-local", str(repo), str(tmp / "floor")])
    dot_git = sum(p.stat().st_size for p in (tmp / "floor" / ".git").rglob("*") if p.is_file()) / 1e6
    index = (tmp / "floor" / ".git" / "index").stat().st_size / 1e6
    shutil.rmtree(tmp / "floor")
    shutil.rmtree(repo)
    (tmp / "floor.index").unlink()
    return [
        [
            f"floor: clone of one commit of the same {len(paths)} paths, each a 2-byte file (local transport)",
            f"{wall:.2f} s wall, {cpu:.2f} s CPU; .git {dot_git:.1f} MB, of which the index {index:.1f} MB",
        ]
    ]


def kind_of(kind: str, path: str) -> str:
    """What a packed object is, for the breakdown: the file it is a version of, by role."""
    if kind != "blob":
        return (
            kind
            if kind == "commit"
            else "tree (root)"
            if not path
            else (
                "tree status/<exp>"
                if path.startswith("status/")
                else "tree runs/<exp>"
                if path.startswith("runs/")
                else f"tree {path.split('/')[0]}"
            )
        )
    name = path.rsplit("/", 1)[-1]
    if path.startswith("runs/"):
        return "run requests"
    if not path.startswith("status/"):
        return "lab files"
    if path in ("status/index.json",):
        return "the ledger (status/index.json)"
    if path == "status/README.md":
        return "the index page"
    if name.endswith(".svg"):
        return "charts (<run>.svg)"
    if name.endswith(".json"):
        return "status files (<run>.json)"
    return "experiment pages (README.md)" if name == "README.md" else "month pages (<YYYY-MM>.md)"


def breakdown(clone: Path) -> list[list[str]]:
    """Where a clone's `.git` bytes go: each kind of packed object (versions, bytes), the pack index and
    the work tree's index, largest first (`git verify-pack -v` joined with `git rev-list --objects`)."""
    pack = next((clone / ".git" / "objects" / "pack").glob("*.idx"))
    listed = subprocess.run(
        ["git", "verify-pack", "-v", str(pack)], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    paths = {}
    for line in git(clone, "rev-list", "--objects", "--all").splitlines():
        oid, _, path = line.partition(" ")
        paths[oid] = path
    sizes: dict[str, list[int]] = {}
    for line in listed.splitlines():
        parts = line.split()
        if len(parts) >= 5 and len(parts[0]) == 40 and parts[1] in ("blob", "tree", "commit", "tag"):
            entry = sizes.setdefault(kind_of(parts[1], paths.get(parts[0], "")), [0, 0])
            entry[0] += 1
            entry[1] += int(parts[3])
    sizes["pack index (.idx)"] = [0, pack.stat().st_size]
    sizes["work tree index (.git/index)"] = [0, (clone / ".git" / "index").stat().st_size]
    total = sum(b for _, b in sizes.values())
    return [
        [kind, f"{n}" if n else "", f"{b / 1e6:.2f} MB", f"{100 * b / total:.0f} %"]
        for kind, (n, b) in sorted(sizes.items(), key=lambda kv: -kv[1][1])
        if b >= total / 500
    ]


def finished_lab(tmp: Path, n: int) -> Path:
    """`n` finished runs written in a few commits, then one bot run (it builds the ledger)."""
    from support.repos import request

    from tuneplane.lab.runs import RunKey, dump_request, status_text

    remote = make_remote(tmp)
    lab = seed_lab(remote, tmp / "lab", {e: "echo hi\n" for e in EXPERIMENTS}, backend="kubernetes", profile="h200:8")
    rng = random.Random(2)
    for at, run_id in enumerate(run_ids(n, seed=3)):
        exp = EXPERIMENTS[at % len(EXPERIMENTS)]
        key = RunKey(exp, run_id)
        for rel, text in (
            (key.request_rel, dump_request(request(exp, run_id, "h200:8"))),
            (key.status_rel, status_text(status(exp, run_id, "Succeeded", rng))),
        ):  # type: ignore[arg-type]
            (lab / rel).parent.mkdir(parents=True, exist_ok=True)
            (lab / rel).write_text(text, encoding="utf-8")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", f"{n} finished runs")
    bot(lab, "reconcile")  # the first run reads everything once and writes the ledger and the pages
    return lab


def bot(root: Path, verb: str, *args: str) -> float:
    return bot_times(root, verb, *args)[0]


def bot_times(root: Path, verb: str, *args: str) -> tuple[float, float]:
    """Wall time and CPU time (the process and its git children) of one `tp bot VERB ARGS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tuneplane", "bot", verb, *args], cwd=root, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"tp bot {verb} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ci_job(url: str, dest: Path, sparse: bool) -> tuple[float, float, int]:
    """The bot's CI job once: its checkout as the workflow makes it (the tip commit of `url`, smart HTTP;
    with `sparse`, without the run files: `lab.runs.SPARSE_CHECKOUT`), then `tp bot reconcile --push`
    with nothing to do. Wall seconds of the checkout and of the pass, and the files checked out."""
    from tuneplane.lab.runs import SPARSE_CHECKOUT

    start = time.perf_counter()
    if sparse:
        git(dest.parent, "clone", "-q", "--depth", "1", "--no-checkout", url, dest.name)
        git(dest, "sparse-checkout", "set", "--no-cone", *SPARSE_CHECKOUT)
        git(dest, "checkout", "-q", BRANCH)
    else:
        git(dest.parent, "clone", "-q", "--depth", "1", url, dest.name)
    checkout = time.perf_counter() - start
    head = git(dest, "rev-parse", "HEAD")
    noop = bot(dest, "reconcile", "--push")
    if git(dest, "rev-parse", "HEAD") != head or git(dest, "status", "--porcelain"):
        raise RuntimeError(f"the bot's pass in {dest} was no no-op: it committed or changed files")
    files = sum(1 for line in git(dest, "ls-files", "-t").splitlines() if not line.startswith("S "))
    shutil.rmtree(dest)
    return checkout, noop, files


def measure_ci(tmp: Path, remote: Path, repeat: int) -> dict[bool, tuple[float, float, int]]:
    """The bot's CI job over the history in `remote`, with every file checked out (False) and sparse (True):
    median checkout and pass seconds and the files checked out. A bot run in a full clone first takes the
    history's statuses as its own and pushes its record, as the first bot run of a lab does."""
    from githttp import GitHttpServer

    prime = tmp / "ci-prime"
    git(tmp, "clone", "-q", str(remote), prime.name)
    git(prime, "config", "user.name", "bench")
    git(prime, "config", "user.email", "bench@example.org")
    bot(prime, "reconcile", "--push")
    shutil.rmtree(prime)
    server = GitHttpServer(remote.parent).start()
    try:
        rounds: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
        for i in range(repeat):
            for sparse in (i % 2 == 0, i % 2 == 1):  # each first in every other round
                rounds[sparse].append(ci_job(server.url(remote.name), tmp / f"ci-{i}-{int(sparse)}", sparse))
    finally:
        server.stop()
    return {
        sparse: (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs),
            runs[-1][2],
        )
        for sparse, runs in rounds.items()
    }


def ci_rows(runs: int, repeat: int, measured: dict[bool, tuple[float, float, int]]) -> list[list[str]]:
    """The table's rows of `measure_ci`: the workflow's checkout before, and the sparse one."""
    rows = []
    for sparse, how in ((False, "every file checked out (`fetch-depth: 1`, as before)"), (True, "sparse checkout")):
        checkout, noop, files = measured[sparse]
        rows.append(
            [
                f"the bot's CI job after {runs} runs, {how}: checkout ({files} files) + a no-op "
                f"`tp bot reconcile --push` (median of {repeat})",
                f"{checkout + noop:.2f} s ({checkout:.2f} + {noop:.2f})",
                f"≤ {TARGETS['ci']:g} s" if sparse else "",
                MAIN_CI,
            ]
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--statuses", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-history-"))
    try:
        rows, ok = [], True
        print(f"building the history of {args.runs} runs ({args.batch} per merge) …", flush=True)
        remote, built = build_history(tmp / "history", args.runs, args.batch)
        commits = git(remote, "rev-list", "--count", BRANCH)
        structure, tiny = structure_floor(remote)
        (
            seconds,
            local,
            cpu,
            size,
            bare,
            (shallow_wall, shallow_cpu, shallow_size, shallow_bare),
            (floor_wall, floor_cpu, floor_size),
        ) = measure_clone(tmp, remote, args.repeat, structure)
        ok &= size <= TARGETS["git"] and seconds <= TARGETS["clone"]
        rows.append(
            [
                f".git of a full clone after {args.runs} runs ({commits} commits)",
                f"{size:.1f} MB",
                f"≤ {TARGETS['git']:g} MB",
                MAIN["git"],
            ]
        )
        rows.append(
            [
                f"full clone over smart HTTP after {args.runs} runs (median of {args.repeat})",
                f"{seconds:.2f} s wall, {cpu:.2f} s CPU",
                f"≤ {TARGETS['clone']:g} s",
                MAIN["clone"],
            ]
        )
        rows.append(["  the same, git's local transport (no HTTP)", f"{local:.2f} s", "", ""])
        rows.append(["  the same over HTTP with `--no-checkout` (the history's part)", f"{bare:.2f} s", "", ""])
        rows.append(
            [
                f"the bot's clone (workflow `fetch-depth: 1`): `git clone --depth 1` over smart HTTP "
                f"(median of {args.repeat})",
                f"{shallow_wall:.2f} s wall, {shallow_cpu:.2f} s CPU",
                "",
                "",
            ]
        )
        rows.append(["  its .git", f"{shallow_size:.1f} MB", "", ""])
        rows.append(
            ["  the same with `--no-checkout` (what a bot run pays for history)", f"{shallow_bare:.2f} s", "", ""]
        )
        ci_at = len(rows)  # the CI job's rows follow the bot's clone, measured once the history is read
        print(table(breakdown(tmp / "clone-http-0"), ["where the clone's .git goes", "versions", "bytes", "share"]))
        shutil.rmtree(tmp / "clone-http-0")
        content = history_entropy(remote) / 1e6
        print(
            table(
                clone_phases(tmp, remote)
                + floor(tmp, remote)
                + [
                    [
                        "content floor: `xz -9e` of every file version the history holds, in one stream by path",
                        f"{content:.2f} MB",
                    ]
                ],
                ["where the clone's time goes", "measured"],
            )
        )
        ci = measure_ci(tmp, remote, args.repeat)  # its first bot run pushes a commit: after the figures above
        ok &= sum(ci[True][:2]) <= TARGETS["ci"]
        rows[ci_at:ci_at] = ci_rows(args.runs, args.repeat, ci)
        rows.append(
            [
                "structure floor: the same history, every file version a tiny distinct blob — its .git",
                f"{floor_size:.1f} MB",
                f"≤ {TARGETS['git']:g} MB",
                "",
            ]
        )
        rows.append(
            [
                "  its tiny blobs' bytes replaced by the content floor (what no packing of this history goes below)",
                f"{floor_size - tiny / 1e6 + content:.1f} MB",
                f"≤ {TARGETS['git']:g} MB",
                "",
            ]
        )
        rows.append(
            [
                f"  its full clone over smart HTTP (median of {args.repeat}, the same rounds)",
                f"{floor_wall:.2f} s wall, {floor_cpu:.2f} s CPU",
                f"≤ {TARGETS['clone']:g} s",
                "",
            ]
        )
        print(f"  built in {built:.0f} s; building a lab of {args.statuses} finished runs …", flush=True)
        lab = finished_lab(tmp / "noop", args.statuses)
        for verb in ("reconcile", "sync"):
            times = [bot_times(lab, verb) for _ in range(args.repeat)]
            median = statistics.median(t for t, _ in times)
            cpu = statistics.median(c for _, c in times)
            ok &= median <= TARGETS["noop"]
            rows.append(
                [
                    f"no-op `tp bot {verb}` over {args.statuses} statuses (whole process, median)",
                    f"{median:.3f} s wall, {cpu:.3f} s CPU",
                    f"≤ {TARGETS['noop']:g} s",
                    MAIN["noop"],
                ]
            )
        if git(lab, "status", "--porcelain"):
            raise RuntimeError("a no-op bot run changed the lab")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tuneplane", "--help"], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rows.append(
            [
                "for scale, on this machine now: `tp --help`",
                f"{time.perf_counter() - start:.3f} s wall, {cpu:.3f} s CPU",
                "",
                "",
            ]
        )
        print(table(rows, ["case", "ours", "target", "main (issue 14; the CI job: issue 27)"]))
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
