"""Reading lm-eval's and EvalScope's result files into one score per suite. Standard library only."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from tuneplane.lifecycle.benchmark_common import BenchError, Settings, SuiteScore, warn

# Where each runner leaves its result files, relative to its directory under $OUT/eval/.
RESULT_PATTERNS = {"lm-eval": "**/results_*.json", "evalscope": "**/reports/*/*.json"}


# lm-eval metrics that best stand for a suite, most preferred first.
PREFERRED_METRICS = ("exact_match,strict-match", "acc_norm,none", "acc,none")


def snapshot(root: Path, pattern: str) -> dict[Path, int]:
    """Result files and their mtimes, so files left by an earlier attempt are not read as this run's."""
    return {path: path.stat().st_mtime_ns for path in root.glob(pattern) if path.is_file()}


def new_files(root: Path, pattern: str, before: Mapping[Path, int]) -> list[Path]:
    """Files created or rewritten since `before`, oldest first."""
    after = snapshot(root, pattern)
    fresh = [path for path, mtime in after.items() if before.get(path) != mtime]
    return sorted(fresh, key=lambda path: (after[path], str(path)))


def read_scores(settings: Settings, fresh: Sequence[Path]) -> tuple[dict[str, SuiteScore], Path]:
    """Scores per suite and the file (lm-eval) or folder (EvalScope) they came from."""
    newest = fresh[-1]
    if settings.runner == "lm-eval":
        return lm_eval_scores(_read_json(newest), settings.suites), newest
    return evalscope_scores(fresh), newest.parent


def lm_eval_scores(results: Mapping[str, object], suites: Sequence[str]) -> dict[str, SuiteScore]:
    """One score per requested suite (a group such as mmlu counts as one); every task if none matches."""
    tasks = results.get("results")
    groups = results.get("groups")
    table = {**(groups if isinstance(groups, dict) else {}), **(tasks if isinstance(tasks, dict) else {})}
    wanted = [suite for suite in suites if suite in table]
    missing = [suite for suite in suites if suite not in table]
    if missing and wanted:
        warn(f"no results for suite(s) {', '.join(missing)}")
    scores: dict[str, SuiteScore] = {}
    for task in wanted or list(tasks if isinstance(tasks, dict) else {}):
        entry = table[task]
        found = primary_metric(entry) if isinstance(entry, dict) else None
        if found is not None:
            scores[task] = found
    return scores


def primary_metric(entry: Mapping[str, object]) -> SuiteScore | None:
    """The preferred metric, else the first `metric,filter` value, else any number (not a stderr)."""
    named = [key for key in entry if "," in key]
    for name in (*PREFERRED_METRICS, *named, *entry):
        value = _number(entry.get(name))
        if value is not None and "stderr" not in name:
            return SuiteScore(name, value, _stderr(entry, name))
    return None


def _stderr(entry: Mapping[str, object], name: str) -> float | None:
    metric, sep, filter_name = name.partition(",")
    return _number(entry.get(f"{metric}_stderr{sep}{filter_name}"))


def _number(value: object) -> float | None:
    """A finite number; lm-eval writes "N/A" where a stderr is unknown."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def evalscope_scores(paths: Sequence[Path]) -> dict[str, SuiteScore]:
    """EvalScope reports: `score` is its first metric's score over the dataset."""
    scores: dict[str, SuiteScore] = {}
    for path in paths:
        data = _read_json(path)
        score = _number(data.get("score"))
        if score is None:
            continue
        metrics = data.get("metrics")
        first = metrics[0] if isinstance(metrics, list) and metrics and isinstance(metrics[0], dict) else {}
        name = str(data.get("dataset_name") or path.stem)
        scores[name] = SuiteScore(str(first.get("name") or "score"), score, None)
    return scores


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read results {path}: {exc}") from None
    if not isinstance(data, dict):
        raise BenchError(f"{path}: expected a JSON object of results")
    return data
