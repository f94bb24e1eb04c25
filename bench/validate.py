"""Benchmark: `tp --help`, `tp new`, `tp validate EXP` and `tp validate --all` over 1,000 experiments,
ours beside the upstream client (tuneplane==0.4.0 under python3.12) measured in the same run.

    python bench/validate.py [--experiments 1000] [--runs 7]

Prints whole-process median wall times and ratios (upstream / ours). Targets on a 2-core machine:
`tp validate --all` over 1,000 experiments ≤ 2 s; `tp --help` and `tp validate EXP` ≤ 0.25 s;
at least 6× faster than upstream for `tp new` and `tp validate EXP`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import table, time_command, upstream_venv

TARGETS = {"tp --help": 0.25, "tp validate EXP": 0.25, "tp validate --all (1,000)": 2.0}


def ours_tp() -> list[str]:
    exe = shutil.which("tp", path=str(Path(sys.executable).parent)) or shutil.which("tp")
    return [exe] if exe else [sys.executable, "-m", "tuneplane"]


def build_lab(tp: list[str], root: Path, n: int, init_args: list[str]) -> Path:
    lab = root / "lab"
    subprocess.run([*tp, "init", str(lab), *init_args], check=True, capture_output=True)
    subprocess.run([*tp, "new", "exp0000", "--method", "custom/custom"], cwd=lab, check=True, capture_output=True)
    seed = lab / "experiments" / "exp0000"
    for i in range(1, n):
        shutil.copytree(seed, lab / "experiments" / f"exp{i:04d}")
    return lab


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-validate-"))
    try:
        return _run(tmp, args.experiments, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(tmp: Path, n: int, runs: int) -> int:
    ours = ours_tp()
    print(f"building a lab of {n} experiments for each tool …")
    lab = build_lab(ours, tmp / "ours", n, ["--no-git", "--yes"])
    results: dict[str, dict[str, float | None]] = {}

    def measure(label: str, ours_argv: list[str], ours_cwd: Path, up_argv: list[str] | None, up_cwd: Path | None,
                ours_setup=None, up_setup=None) -> None:
        entry: dict[str, float | None] = {"ours": time_command(ours_argv, ours_cwd, runs, setup=ours_setup)}
        entry["upstream"] = time_command(up_argv, up_cwd, runs, setup=up_setup) if up_argv and up_cwd else None
        results[label] = entry
        print(f"  {label}: ours {entry['ours']:.3f} s" +
              (f", upstream {entry['upstream']:.3f} s" if entry["upstream"] else ""))

    up_env = upstream_venv()
    up_tp = [str(up_env / "bin" / "tp")] if up_env else None
    up_lab = None
    if up_tp:
        up_lab = tmp / "up" / "lab"
        up_lab.parent.mkdir(parents=True)
        subprocess.run([*up_tp, "init", str(up_lab), "--yes", "--no-git"], check=True, capture_output=True)
        subprocess.run([*up_tp, "new", "exp0000", "--method", "custom/custom"], cwd=up_lab, check=True,
                       capture_output=True)

    def clean(lab_dir: Path | None):
        def setup(i: int) -> None:
            if lab_dir is not None:
                shutil.rmtree(lab_dir / "experiments" / "bench-new", ignore_errors=True)
        return setup

    measure("tp --help", [*ours, "--help"], lab, up_tp and [*up_tp, "--help"], up_lab)
    measure("tp new", [*ours, "new", "bench-new", "--method", "custom/custom"], lab,
            up_tp and [*up_tp, "new", "bench-new", "--method", "custom/custom"], up_lab,
            ours_setup=clean(lab), up_setup=clean(up_lab))
    clean(lab)(0)
    measure("tp validate EXP", [*ours, "validate", "exp0000"], lab, up_tp and [*up_tp, "validate", "exp0000"], up_lab)
    measure("tp validate --all (1,000)" if n == 1000 else f"tp validate --all ({n})", [*ours, "validate", "--all"],
            lab, None, None)
    rows = []
    for label, entry in results.items():
        o, u = entry["ours"], entry["upstream"]
        target = TARGETS.get(label)
        ratio = f"{u / o:.1f}×" if u and o else "n/a (no such command upstream)" if "--all" in label else "n/a"
        ok = "" if target is None else ("ok" if o is not None and o <= target else "MISSED") + f" (≤ {target} s)"
        if label in ("tp new", "tp validate EXP") and u and o:
            ok += f"{'; ' if ok else ''}{'ok' if u / o >= 6 else 'MISSED'} (≥ 6×)"
        rows.append([label, f"{o:.3f} s" if o is not None else "-", f"{u:.3f} s" if u else "-", ratio, ok])
    print()
    print(table(rows, ["command", "ours", "upstream", "upstream / ours", "target"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
