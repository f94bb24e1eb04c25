"""Whole-process time of `tp render` for one run request and for 1,000, beside `tp validate --all`.

    python bench/render.py [--runs 1000] [--repeat 3]

Builds a lab under bench/.work/render-lab (a kubernetes-backend lab with one experiment per catalog
recipe and --runs run requests spread over them, a third of them multi-node), then times, as separate
processes started the way a user starts them (`python -m tuneplane …`, this checkout built as a wheel
into bench/.work/ours with its bytecode cached, as bench/validate.py measures it; `--editable`
measures this environment's own install instead):

    tp render runs/<exp>/<run>.yaml        one run request       target ≤ 0.3 s
    tp render --all -o DIR                 every run request     target ≤ 3 s for 1,000
    tp validate --all                      the same lab, for comparison

Machines are noisy: each command runs --repeat times and the best and median are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
sys.path.insert(0, str(HERE))
from peers import bytecode_env, ours_installed  # noqa: E402

SETTINGS = """\
apiVersion: tuneplane/project/v1
name: bench-lab
profiles:
  h200: {gpus_per_node: 8, max_nodes: 8, node_selector: {nvidia.com/gpu.product: NVIDIA-H200},
         tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}],
         cpu: "96", memory: 1Ti, shm_size: 64Gi}
images:
  defaults: {pytorch: example/pytorch:2.5, trl: example/trl:1.10, verl: example/verl:0.5,
             nemo-rl: example/nemo-rl:0.4, evalkit: example/evalkit:1}
cluster:
  backend: kubernetes
  namespace: ml
  queue: team-a
  user: bench
  repo: {url: "https://git.example.com/bench-lab.git", credentials_secret: lab-git}
  ingest: {endpoint: "http://ingest.tuneplane:8080"}
"""

RECIPES = {
    "custom-exp": (
        "custom/custom",
        {"image": "registry.example.com/me/trainer:1", "observability_url": "https://wandb.example/p"},
    ),
    "pytorch-exp": ("pytorch/image-classification", {"set": {"learning_rate": 0.01}}),
    "trl-exp": (
        "trl/sft",
        {"inputs": {"model": "Qwen/Qwen3-0.6B", "train_data": "data/train.jsonl", "validation_data": "data/val.jsonl"}},
    ),
    "verl-exp": (
        "verl/grpo",
        {
            "inputs": {
                "model": "Qwen/Qwen3-0.6B",
                "train_data": "data/train.parquet",
                "validation_data": "data/val.parquet",
            }
        },
    ),
    "evalkit-exp": ("evalkit/benchmark", {"inputs": {"model": "Qwen/Qwen3-0.6B"}}),
}


PYTHON = [sys.executable]  # the interpreter whose `tuneplane` is measured (main() picks it)


def tp(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in bytecode_env().items() if not k.startswith(("TUNEPLANE_", "GIT_"))}
    return subprocess.run(
        [*PYTHON, "-m", "tuneplane", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def git(cwd: Path, *args: str) -> None:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.org",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.org",
    )
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def build_lab(runs: int) -> Path:
    from tuneplane.lab.runs import dump_request
    from tuneplane.models.run import RunRequest

    root = WORK / "render-lab"
    shutil.rmtree(root, ignore_errors=True)
    WORK.mkdir(parents=True, exist_ok=True)
    done = tp("init", str(root), "--name", "bench-lab", cwd=WORK)
    if done.returncode:
        raise SystemExit(f"tp init failed: {done.stderr}")
    for name, (method, _) in RECIPES.items():
        made = tp("new", name, "--method", method, cwd=root)
        if made.returncode:
            raise SystemExit(f"tp new {name} failed: {made.stderr}")
    (root / "tuneplane.yaml").write_text(SETTINGS, encoding="utf-8")
    names = list(RECIPES)
    for i in range(runs):
        name = names[i % len(names)]
        shape = "h200:16" if i % 3 == 0 and name != "evalkit-exp" else "h200:8"
        run_id = f"20250101-{i // 60:04d}{i % 60:02d}-{i:06x}"
        request = RunRequest.model_validate(
            {"experiment": name, "run_id": run_id, "profile": shape, **RECIPES[name][1]}
        )
        path = root / "runs" / name / f"{request.run_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_request(request), encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "bench lab")
    return root


def timed(label: str, args: list[str], cwd: Path, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = tp(*args, cwd=cwd)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{label} failed ({done.returncode}): {done.stderr[-2000:]}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--editable", action="store_true", help="measure this environment's tuneplane")
    args = parser.parse_args()
    env_dir = None if args.editable else ours_installed()
    if env_dir is not None:
        PYTHON[:] = [str(env_dir / "bin" / "python")]
    print(f"measuring: {PYTHON[0]} -m tuneplane")
    root = build_lab(args.runs)
    one = sorted((root / "runs" / "trl-exp").glob("*.yaml"))[0]
    out = WORK / "render-out"
    rows = [
        ("tp render <one run request>", ["render", str(one.relative_to(root))], 0.3),
        (f"tp render --all -o DIR ({args.runs} run requests)", ["render", "--all", "-o", str(out)], 3.0),
        (f"tp validate --all ({args.runs} run requests)", ["validate", "--all"], None),
    ]
    print(f"{'command':<52} {'best':>8} {'median':>8}  target")
    written = 0
    for label, argv, target in rows:
        shutil.rmtree(out, ignore_errors=True)
        times = timed(label, argv, root, args.repeat)
        written = max(written, sum(1 for _ in out.rglob("*.yaml")) if out.exists() else 0)
        goal = f"≤ {target:.1f} s {'ok' if min(times) <= target else 'MISSED'}" if target else "(peer)"
        print(f"{label:<52} {min(times):>7.3f}s {statistics.median(times):>7.3f}s  {goal}")
    print(f"(tp render --all wrote {written} manifest files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
