"""The catalog's benchmark evaluation, run inside the job: score a model on benchmark suites with an
installed runner (lm-eval or evalscope), then write `eval/report.json` and report each suite's score.

Settings come from the experiment's config.yaml, then `--overrides-json`, then `--model`/`--suites`;
bad settings end with exit status 2 and a message naming the setting. The catalog's evalkit/benchmark
recipe names this module as its entrypoint, so its import path is kept.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from tuneplane.constants import OUT_DIR_ENV
from tuneplane.lifecycle.benchmark_common import BenchError, Settings, SuiteScore, warn
from tuneplane.lifecycle.benchmark_results import RESULT_PATTERNS, new_files, read_scores, snapshot
from tuneplane.lifecycle.flatconfig import BOOLS, load_config
from tuneplane.runtime.files import atomic_write

PROG = "python -m tuneplane.lifecycle.benchmark_eval"
EVAL_PYTHON_ENV = "TUNEPLANE_EVAL_PYTHON"  # the interpreter that has the runner installed
REPORT_PATH = Path("eval") / "report.json"


# The settings this program understands, with the defaults of the catalog's template config.
DEFAULTS: dict[str, object] = {
    "model": "",
    "runner": "lm-eval",
    "suites": "gsm8k",
    "num_fewshot": None,
    "limit": 0,
    "batch_size": "auto",
    "max_new_tokens": 512,
    "temperature": 0.0,
    "apply_chat_template": True,
    "seed": 1234,
    "dtype": None,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run the benchmark, and map a `BenchError` to exit status 2."""
    args = parse_args(argv)
    try:
        return run(args)
    except BenchError as exc:
        print(f"benchmark_eval: error: {exc}", file=sys.stderr)
        return 2


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description="Score a model on benchmark suites.")
    parser.add_argument("--model", help="Hub id or local directory of the model (default: config's model)")
    parser.add_argument("--suites", help="comma-separated suite names (default: config's suites)")
    parser.add_argument("--output-dir", help=f"where eval/ goes (default: ${OUT_DIR_ENV})")
    parser.add_argument("--config", type=Path, help="the experiment's config.yaml")
    parser.add_argument("--overrides-json", help="JSON object of setting -> value applied over the config")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    """Run the chosen runner, then turn its result files into report.json and reported metrics."""
    settings = resolve_settings(args)
    out_dir = output_dir(args.output_dir)
    runner_dir = out_dir / "eval" / settings.runner
    runner_dir.mkdir(parents=True, exist_ok=True)
    pattern = RESULT_PATTERNS[settings.runner]
    before = snapshot(runner_dir, pattern)
    code = run_runner(build_command(settings, eval_python(), runner_dir))
    if code != 0:
        print(f"benchmark_eval: {settings.runner} failed with exit status {code}; no scores recorded", file=sys.stderr)
        return code
    fresh = new_files(runner_dir, pattern, before)
    if not fresh:
        raise BenchError(
            f"{settings.runner} exited successfully but wrote no results file ({pattern}) under {runner_dir}"
        )
    scores, results_file = read_scores(settings, fresh)
    if not scores:
        raise BenchError(f"no scores found in {results_file}")
    report = build_report(settings, scores, results_file, out_dir)
    write_json_atomic(out_dir / REPORT_PATH, report)
    print(format_table(scores), flush=True)
    report_scores(settings, scores, report["score"])
    return 0


def output_dir(value: str | None) -> Path:
    chosen = value or os.environ.get(OUT_DIR_ENV, "")
    if not chosen:
        raise BenchError(f"no output directory: pass --output-dir or set {OUT_DIR_ENV}")
    return Path(chosen)


def resolve_settings(args: argparse.Namespace) -> Settings:
    """Defaults, then the config file, then the overrides, then `--model`/`--suites`."""
    config = load_config(args.config)
    overrides = parse_overrides(args.overrides_json)
    ignored = sorted(set(config) - set(DEFAULTS))
    if ignored:
        warn(f"ignoring unknown setting(s) in {args.config}: {', '.join(ignored)}")
    merged = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}, **overrides}
    if args.model is not None:
        merged["model"] = args.model
    if args.suites is not None:
        merged["suites"] = args.suites
    return build_settings(merged)


def build_settings(values: Mapping[str, object]) -> Settings:
    """Check and type each setting; the messages name the setting and what it accepts."""
    model = _text(values, "model")
    if not model:
        raise BenchError("no model to evaluate: pass --model (a Hub id or a local model directory)")
    runner = _text(values, "runner")
    if runner not in RESULT_PATTERNS:
        raise BenchError(f"unknown runner {runner!r}; choose one of: {', '.join(RESULT_PATTERNS)}")
    suites = split_suites(values.get("suites"))
    if not suites:
        raise BenchError("no suites to run: pass --suites (e.g. gsm8k,mmlu) or set suites in config.yaml")
    fewshot = values.get("num_fewshot")
    return Settings(
        model=model,
        runner=runner,
        suites=suites,
        num_fewshot=None if fewshot is None else _int(values, "num_fewshot", 0),
        limit=_int(values, "limit", 0),
        batch_size=_batch_size(values.get("batch_size")),
        max_new_tokens=_int(values, "max_new_tokens", 1),
        temperature=_float(values, "temperature"),
        apply_chat_template=_bool(values, "apply_chat_template"),
        seed=_int(values, "seed", 0),
        dtype=_text(values, "dtype") or None,
    )


def split_suites(value: object) -> tuple[str, ...]:
    """`gsm8k, mmlu` or a YAML list -> ('gsm8k', 'mmlu'), blanks and repeats dropped."""
    items = value if isinstance(value, list) else str(value or "").split(",")
    names = (str(item).strip() for item in items)
    return tuple(dict.fromkeys(name for name in names if name))


def _text(values: Mapping[str, object], key: str) -> str:
    value = values.get(key)
    return "" if value is None else str(value).strip()


def _int(values: Mapping[str, object], key: str, minimum: int) -> int:
    value = values.get(key)
    if value is None:
        value = DEFAULTS[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BenchError(f"setting {key} must be an integer >= {minimum}, not {value!r}")
    return value


def _float(values: Mapping[str, object], key: str) -> float:
    value = values.get(key)
    if value is None:
        value = DEFAULTS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise BenchError(f"setting {key} must be a number >= 0, not {value!r}")
    return float(value)


def _bool(values: Mapping[str, object], key: str) -> bool:
    value = values.get(key)
    if value is None:
        value = DEFAULTS[key]
    if isinstance(value, str) and value.strip().lower() in BOOLS:
        value = BOOLS[value.strip().lower()]
    if not isinstance(value, bool):
        raise BenchError(f"setting {key} must be true or false, not {value!r}")
    return value


def _batch_size(value: object) -> str:
    """A positive integer, `auto`, or `auto:N` (lm-eval's re-probing form)."""
    text = str(DEFAULTS["batch_size"] if value is None else value).strip()
    head, _, times = text.partition(":")
    if text.isdigit() and int(text) > 0 or head == "auto" and (not times or times.isdigit()):
        return text
    raise BenchError(f"setting batch_size must be a positive integer, auto or auto:N, not {value!r}")


def parse_overrides(text: str | None) -> dict[str, object]:
    """The `--overrides-json` object; a key this program does not know is an error, not a no-op."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchError(f"--overrides-json is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BenchError("--overrides-json must be a JSON object of setting -> value")
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise BenchError(
            f"unknown setting(s) in --overrides-json: {_with_suggestions(unknown)}; "
            f"known settings: {', '.join(sorted(DEFAULTS))}"
        )
    return data


def _with_suggestions(keys: Sequence[str]) -> str:
    parts = []
    for key in keys:
        close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(parts)


def eval_python() -> str:
    return os.environ.get(EVAL_PYTHON_ENV, "").strip() or sys.executable


def build_command(settings: Settings, python: str, runner_dir: Path) -> list[str]:
    if settings.runner == "lm-eval":
        return lm_eval_command(settings, python, runner_dir)
    return evalscope_command(settings, python, runner_dir)


def lm_eval_command(s: Settings, python: str, output_path: Path) -> list[str]:
    """lm-evaluation-harness's single-command form, which later versions still accept (as `run`)."""
    model_args = f"pretrained={s.model}" + (f",dtype={s.dtype}" if s.dtype else "")
    argv = [
        python,
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        model_args,
        "--tasks",
        ",".join(s.suites),
        "--output_path",
        str(output_path),
        "--batch_size",
        s.batch_size,
    ]
    if s.num_fewshot is not None:
        argv += ["--num_fewshot", str(s.num_fewshot)]
    if s.limit > 0:
        argv += ["--limit", str(s.limit)]
    if s.apply_chat_template:
        argv.append("--apply_chat_template")
    return [*argv, "--gen_kwargs", _generation(s, "max_gen_toks"), "--seed", str(s.seed)]


def _generation(s: Settings, length_key: str) -> str:
    # do_sample is explicit both ways: a suite's own YAML often says do_sample: false, which would
    # silently turn a temperature above 0 back into greedy decoding.
    sample = "true" if s.temperature > 0 else "false"
    return f"{length_key}={s.max_new_tokens},temperature={s.temperature},do_sample={sample}"


def evalscope_command(s: Settings, python: str, work_dir: Path) -> list[str]:
    """EvalScope's `eval` command; it writes reports/<model id>/<dataset>.json under a timestamped folder."""
    argv = [
        python,
        "-m",
        "evalscope.cli.cli",
        "eval",
        "--model",
        s.model,
        "--datasets",
        *s.suites,
        "--work-dir",
        str(work_dir),
        "--seed",
        str(s.seed),
        "--generation-config",
        _generation(s, "max_tokens"),
    ]
    if s.dtype and s.dtype != "auto":
        argv += ["--model-args", f"precision={s.dtype if '.' in s.dtype else 'torch.' + s.dtype}"]
    if s.limit > 0:
        argv += ["--limit", str(s.limit)]
    if s.batch_size.isdigit():  # EvalScope has no `auto`: it keeps its own default then
        argv += ["--eval-batch-size", s.batch_size]
    if s.num_fewshot is not None:
        argv += ["--dataset-args", json.dumps({suite: {"few_shot_num": s.num_fewshot} for suite in s.suites})]
    return argv


def run_runner(argv: Sequence[str]) -> int:
    """Run the runner with our stdout/stderr; its exit status, 128+N when killed by signal N."""
    print(f"benchmark_eval: running {shlex.join(argv)}", flush=True)
    sys.stderr.flush()
    try:
        code = subprocess.run(list(argv), check=False).returncode
    except OSError as exc:
        raise BenchError(
            f"cannot start {argv[0]!r}: {exc.strerror or exc} (set {EVAL_PYTHON_ENV} to the Python that has the runner)"
        ) from None
    return 128 - code if code < 0 else code


class BenchReport(TypedDict):
    """eval/report.json, as the dashboard and `tp job` read it."""

    runner: str
    model: str
    suites: dict[str, dict[str, object]]  # per suite: a SuiteScore's fields
    score: float  # the mean of the suites' scores
    results_file: str  # the runner's own results, relative to the output folder when inside it


def build_report(
    settings: Settings, scores: Mapping[str, SuiteScore], results_file: Path, out_dir: Path
) -> BenchReport:
    """report.json: per suite its metric, score and stderr; `score` is their mean."""
    try:
        shown = results_file.resolve().relative_to(out_dir.resolve()).as_posix()
    except ValueError:
        shown = str(results_file)
    mean = sum(score.score for score in scores.values()) / len(scores)
    return {
        "runner": settings.runner,
        "model": settings.model,
        "suites": {task: score.as_dict() for task, score in scores.items()},
        "score": mean,
        "results_file": shown,
    }


def write_json_atomic(path: Path, data: Mapping[str, object]) -> None:
    """A reader sees the old report or the new one, never half."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


def format_table(scores: Mapping[str, SuiteScore]) -> str:
    rows = [("suite", "metric", "score", "stderr")]
    rows += [
        (task, s.metric, f"{s.score:.4f}", "-" if s.stderr is None else f"{s.stderr:.4f}") for task, s in scores.items()
    ]
    widths = [max(len(row[col]) for row in rows) for col in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def report_scores(settings: Settings, scores: Mapping[str, SuiteScore], mean: float) -> None:
    """Each suite as `bench/<suite>` at step 0, the mean as `bench/score`; a no-op without a job token."""
    try:
        # lazy: the SDK starts only when the job reports
        from tuneplane import report
    except ImportError:  # an image without the SDK still has eval/report.json
        warn("tuneplane.report is not importable; the scores are in eval/report.json only")
        return
    metrics = {"bench/score": mean, **{f"bench/{task}": s.score for task, s in scores.items()}}
    hparams = {**settings.as_dict(), "suites": ",".join(settings.suites)}
    report.init(hparams=hparams, monitor_hardware=False)
    report.log(metrics, step=0)
    report.finish()


if __name__ == "__main__":
    sys.exit(main())
