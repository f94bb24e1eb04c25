"""The benchmark runner module, run as a real process against a stand-in for lm-eval and EvalScope.

`TUNEPLANE_EVAL_PYTHON` points at a small executable written into tmp_path: called as `<it> -m lm_eval ...`
(or `-m evalscope.cli.cli eval ...`) it records its argv and writes result files in the runner's format,
or fails / writes nothing when `FAKE_MODE` asks it to.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuneplane.ingest import mint_token, start_server, summary
from tuneplane.lifecycle import flatconfig
from tuneplane.lifecycle.benchmark_common import BenchError

REPO = Path(__file__).resolve().parents[1]
TEMPLATE_CONFIG = REPO / "catalog" / "evalkit" / "benchmark" / "template" / "config.yaml"
MODULE = "tuneplane.lifecycle.benchmark_eval"
SECRET = b"benchmark-test-secret"

FAKE_RUNNER = r"""
import json, os, sys, time

LM_EVAL_RESULTS = {
    "gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.0993,
              "exact_match,flexible-extract": 0.35, "exact_match_stderr,flexible-extract": 0.1094},
    "arc_easy": {"alias": "arc_easy", "acc,none": 0.7, "acc_stderr,none": 0.1051,
                 "acc_norm,none": 0.65, "acc_norm_stderr,none": 0.1094},
    "ifeval": {"alias": "ifeval", "prompt_level_strict_acc,none": 0.4,
               "prompt_level_strict_acc_stderr,none": 0.1124, "inst_level_strict_acc,none": 0.5,
               "inst_level_strict_acc_stderr,none": "N/A"},
    "mmlu": {"acc,none": 0.55, "acc_stderr,none": 0.0041, "alias": "mmlu"},
}
SUBTASKS = {"mmlu": {"mmlu_humanities": {"acc,none": 0.5, "acc_stderr,none": 0.0072, "alias": " - humanities"}}}


def option(argv, name):
    return argv[argv.index(name) + 1]


def lm_eval(argv):
    tasks = option(argv, "--tasks").split(",")
    model = option(argv, "--model_args").split(",")[0].split("=", 1)[1]
    results, groups, subtasks = {}, {}, {}
    for task in tasks:
        if task in LM_EVAL_RESULTS:
            results[task] = LM_EVAL_RESULTS[task]
            subtasks[task] = sorted(SUBTASKS.get(task, {}))
            results.update(SUBTASKS.get(task, {}))
            if task in SUBTASKS:
                groups[task] = LM_EVAL_RESULTS[task]
    sanitized = model.replace("/", "__")
    folder = os.path.join(option(argv, "--output_path"), sanitized)
    os.makedirs(folder, exist_ok=True)
    document = {"results": results, "groups": groups, "group_subtasks": subtasks,
                "configs": {task: {"task": task} for task in results}, "versions": {t: 1.0 for t in results},
                "n-shot": {t: 0 for t in results}, "higher_is_better": {t: {} for t in results},
                "n-samples": {t: {"original": 100, "effective": 20} for t in results},
                "config": {"model": "hf", "model_args": option(argv, "--model_args"), "batch_size": "auto"},
                "git_hash": "0000000", "date": time.time(), "model_name": model, "model_name_sanitized": sanitized}
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S") + ".%06d" % (time.time_ns() // 1000 % 1000000)
    with open(os.path.join(folder, "results_" + stamp + ".json"), "w") as handle:
        json.dump(document, handle, indent=2)


def evalscope(argv):
    start = argv.index("--datasets") + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("--")), len(argv))
    model_id = option(argv, "--model").rstrip("/").split("/")[-1]
    folder = os.path.join(option(argv, "--work-dir"), "20250101_120000", "reports", model_id)
    os.makedirs(folder, exist_ok=True)
    for index, dataset in enumerate(argv[start:end]):
        report = {"name": model_id + "@" + dataset, "dataset_name": dataset, "model_name": model_id,
                  "score": 0.5 + index / 10, "num": 20,
                  "metrics": [{"name": "AverageAccuracy", "num": 20, "score": 0.5 + index / 10, "categories": []}]}
        with open(os.path.join(folder, dataset + ".json"), "w") as handle:
            json.dump(report, handle, indent=4)


def main():
    argv = sys.argv[1:]
    with open(os.environ["FAKE_ARGV_FILE"], "w") as handle:
        json.dump(argv, handle)
    print("fake runner: evaluating", flush=True)
    mode = os.environ.get("FAKE_MODE", "")
    if mode == "fail":
        print("fake runner: CUDA out of memory", file=sys.stderr)
        return 3
    if mode == "noresults":
        return 0
    if argv[:2] == ["-m", "lm_eval"]:
        lm_eval(argv[2:])
    elif argv[:3] == ["-m", "evalscope.cli.cli", "eval"]:
        evalscope(argv[3:])
    else:
        print("fake runner: unexpected argv", argv, file=sys.stderr)
        return 99
    return 0


sys.exit(main())
"""


@dataclass
class Bench:
    root: Path
    out: Path
    fake: Path
    argv_file: Path
    env: dict[str, str]

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", MODULE, *args],
            cwd=self.root,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def runner_argv(self) -> list[str]:
        argv: list[str] = json.loads(self.argv_file.read_text(encoding="utf-8"))
        return argv

    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / "eval" / "report.json").read_text(encoding="utf-8"))
        return data


@pytest.fixture()
def bench(tmp_path: Path) -> Bench:
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\n{FAKE_RUNNER}", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "out"
    argv_file = tmp_path / "runner-argv.json"
    env = {**os.environ, "TUNEPLANE_EVAL_PYTHON": str(fake), "FAKE_ARGV_FILE": str(argv_file)}
    return Bench(tmp_path, out, fake, argv_file, env)


def _args(
    bench: Bench,
    *,
    model: str | None = "org/model",
    suites: str | None = "gsm8k",
    config: Path | None = TEMPLATE_CONFIG,
    overrides: Mapping[str, Any] | None = None,
) -> list[str]:
    args = ["--output-dir", str(bench.out)]
    if model is not None:
        args += ["--model", model]
    if suites is not None:
        args += ["--suites", suites]
    if config is not None:
        args += ["--config", str(config)]
    if overrides is not None:
        args += ["--overrides-json", json.dumps(overrides)]
    return args


# ── the command line handed to the runner ─────────────────────────────────────────────────────────────


def test_template_defaults_make_a_greedy_full_lm_eval_run(bench: Bench):
    done = bench.run(*_args(bench))
    assert done.returncode == 0, done.stderr
    assert bench.runner_argv() == [
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        "pretrained=org/model",
        "--tasks",
        "gsm8k",
        "--output_path",
        str(bench.out / "eval" / "lm-eval"),
        "--batch_size",
        "auto",
        "--apply_chat_template",
        "--gen_kwargs",
        "max_gen_toks=512,temperature=0.0,do_sample=false",
        "--seed",
        "1234",
    ]


def test_overrides_and_config_shape_the_lm_eval_command(bench: Bench, tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text(TEMPLATE_CONFIG.read_text(encoding="utf-8") + "dtype: bfloat16\n", encoding="utf-8")
    overrides = {
        "limit": 20,
        "num_fewshot": 5,
        "apply_chat_template": False,
        "temperature": 0.7,
        "max_new_tokens": 256,
        "batch_size": "8",
        "seed": 7,
        "suites": "ignored-by-flag",
    }
    done = bench.run(*_args(bench, suites="gsm8k, arc_easy", config=config, overrides=overrides))
    assert done.returncode == 0, done.stderr
    assert bench.runner_argv() == [
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        "pretrained=org/model,dtype=bfloat16",
        "--tasks",
        "gsm8k,arc_easy",
        "--output_path",
        str(bench.out / "eval" / "lm-eval"),
        "--batch_size",
        "8",
        "--num_fewshot",
        "5",
        "--limit",
        "20",
        "--gen_kwargs",
        "max_gen_toks=256,temperature=0.7,do_sample=true",
        "--seed",
        "7",
    ]


def test_suites_and_model_fall_back_to_the_config(bench: Bench, tmp_path: Path):
    config = tmp_path / "config.yaml"
    config.write_text("model: local/ckpt   # from the config\nsuites: arc_easy,ifeval\nlimit: 3\n", encoding="utf-8")
    done = bench.run(*_args(bench, model=None, suites=None, config=config))
    assert done.returncode == 0, done.stderr
    argv = bench.runner_argv()
    assert argv[argv.index("--tasks") + 1] == "arc_easy,ifeval"
    assert argv[argv.index("--model_args") + 1] == "pretrained=local/ckpt"
    assert argv[argv.index("--limit") + 1] == "3"


# ── results, report.json and reported metrics ─────────────────────────────────────────────────────────


def test_report_json_holds_one_primary_score_per_suite(bench: Bench):
    done = bench.run(*_args(bench, suites="gsm8k,arc_easy,mmlu,ifeval"))
    assert done.returncode == 0, done.stderr
    assert "fake runner: evaluating" in done.stdout  # the runner's output streams through
    report = bench.report()
    assert report["runner"] == "lm-eval"
    assert report["model"] == "org/model"
    assert report["suites"] == {
        "gsm8k": {"metric": "exact_match,strict-match", "score": 0.25, "stderr": 0.0993},
        "arc_easy": {"metric": "acc_norm,none", "score": 0.65, "stderr": 0.1094},
        "mmlu": {"metric": "acc,none", "score": 0.55, "stderr": 0.0041},
        "ifeval": {"metric": "prompt_level_strict_acc,none", "score": 0.4, "stderr": 0.1124},
    }
    assert report["score"] == pytest.approx((0.25 + 0.65 + 0.55 + 0.4) / 4)
    results_file = bench.out / report["results_file"]
    assert report["results_file"].startswith("eval/lm-eval/org__model/results_")
    assert json.loads(results_file.read_text(encoding="utf-8"))["model_name"] == "org/model"
    assert "exact_match,strict-match" in done.stdout and "0.2500" in done.stdout  # the table
    assert not list((bench.out / "eval").glob(".report.json.*"))  # no temp file left behind


def test_newest_results_file_of_this_run_is_read(bench: Bench):
    assert bench.run(*_args(bench, suites="gsm8k")).returncode == 0
    first = bench.report()["results_file"]
    done = bench.run(*_args(bench, suites="arc_easy"))
    assert done.returncode == 0, done.stderr
    report = bench.report()
    assert report["results_file"] != first
    assert list(report["suites"]) == ["arc_easy"]


def test_scores_reach_the_ingest_receiver(bench: Bench, tmp_path: Path):
    db = tmp_path / "ingest.sqlite"
    url, stop = start_server(db, SECRET)
    try:
        env = {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": url,
            "TUNEPLANE_JOB_RUN_ID": "bench-1",
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, "bench-1"),
            "TUNEPLANE_OUT_DIR": str(bench.out),
        }
        done = bench.run(*_args(bench, suites="gsm8k,arc_easy"), env=env)
        assert done.returncode == 0, done.stderr
        seen = summary(db, "bench-1")
    finally:
        stop()
    assert seen["bench/gsm8k"]["last"] == pytest.approx(0.25)
    assert seen["bench/arc_easy"]["last"] == pytest.approx(0.65)
    assert seen["bench/score"]["last"] == pytest.approx(0.45)
    assert {row["last_step"] for row in seen.values()} == {0}


def test_evalscope_runner_command_and_reports(bench: Bench):
    overrides = {"runner": "evalscope", "limit": 5, "num_fewshot": 4, "batch_size": "16"}
    done = bench.run(*_args(bench, model="org/model", suites="gsm8k,arc", overrides=overrides))
    assert done.returncode == 0, done.stderr
    assert bench.runner_argv() == [
        "-m",
        "evalscope.cli.cli",
        "eval",
        "--model",
        "org/model",
        "--datasets",
        "gsm8k",
        "arc",
        "--work-dir",
        str(bench.out / "eval" / "evalscope"),
        "--seed",
        "1234",
        "--generation-config",
        "max_tokens=512,temperature=0.0,do_sample=false",
        "--limit",
        "5",
        "--eval-batch-size",
        "16",
        "--dataset-args",
        json.dumps({"gsm8k": {"few_shot_num": 4}, "arc": {"few_shot_num": 4}}),
    ]
    report = bench.report()
    assert report["runner"] == "evalscope"
    assert report["suites"] == {
        "gsm8k": {"metric": "AverageAccuracy", "score": 0.5, "stderr": None},
        "arc": {"metric": "AverageAccuracy", "score": 0.6, "stderr": None},
    }
    assert report["results_file"] == "eval/evalscope/20250101_120000/reports/model"


# ── failures ──────────────────────────────────────────────────────────────────────────────────────────


def test_runner_failure_exit_status_is_propagated(bench: Bench):
    done = bench.run(*_args(bench), env={"FAKE_MODE": "fail"})
    assert done.returncode == 3
    assert "CUDA out of memory" in done.stderr
    assert "lm-eval failed with exit status 3" in done.stderr
    assert not (bench.out / "eval" / "report.json").exists()


def test_success_without_results_is_an_error(bench: Bench):
    done = bench.run(*_args(bench), env={"FAKE_MODE": "noresults"})
    assert done.returncode == 2
    assert "wrote no results file" in done.stderr
    assert "Traceback" not in done.stderr


def test_results_of_an_earlier_attempt_are_not_reused(bench: Bench):
    assert bench.run(*_args(bench)).returncode == 0
    done = bench.run(*_args(bench), env={"FAKE_MODE": "noresults"})
    assert done.returncode == 2
    assert "wrote no results file" in done.stderr


def test_a_runner_that_cannot_start_is_a_clear_error(bench: Bench, tmp_path: Path):
    done = bench.run(*_args(bench), env={"TUNEPLANE_EVAL_PYTHON": str(tmp_path / "no-such-python")})
    assert done.returncode == 2
    assert "cannot start" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": None}, "no model to evaluate"),
        ({"model": ""}, "no model to evaluate"),
        ({"suites": " , "}, "no suites to run"),
        ({"overrides": {"runner": "helm"}}, "unknown runner 'helm'"),
        ({"overrides": {"limt": 5}}, "did you mean 'limit'?"),
        ({"overrides": {"limit": -1}}, "limit must be an integer >= 0"),
        ({"overrides": {"batch_size": "lots"}}, "batch_size must be"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(bench: Bench, change: dict[str, Any], message: str):
    done = bench.run(*_args(bench, **change))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not bench.argv_file.exists()  # the runner never started


def test_bad_overrides_json_is_a_clear_error(bench: Bench):
    done = bench.run(*_args(bench), "--overrides-json", "{not json")
    assert done.returncode == 2
    assert "--overrides-json is not valid JSON" in done.stderr


# ── config parsing without PyYAML ─────────────────────────────────────────────────────────────────────


def test_flat_parser_reads_the_template_config_as_pyyaml_does():
    text = TEMPLATE_CONFIG.read_text(encoding="utf-8")
    assert flatconfig.parse_flat_yaml(text) == yaml.safe_load(text)


def test_flat_parser_coerces_scalars_and_keeps_quoted_hashes():
    text = (
        "# leading comment\nlimit: 20\ntemperature: 0.5\napply_chat_template: false\n"
        "suites: 'gsm8k#v2'   # quoted hash stays\nnum_fewshot:\nname: \"two words\"\n"
    )
    assert flatconfig.parse_flat_yaml(text) == {
        "limit": 20,
        "temperature": 0.5,
        "apply_chat_template": False,
        "suites": "gsm8k#v2",
        "num_fewshot": None,
        "name": "two words",
    }


def test_flat_parser_refuses_nesting_instead_of_guessing():
    with pytest.raises(BenchError, match="config:2: expected a flat"):
        flatconfig.parse_flat_yaml("generation:\n  temperature: 0.5\n")


def test_config_without_pyyaml_in_a_real_process(bench: Bench, tmp_path: Path):
    """An image without PyYAML: a `yaml` that fails to import, first on the path."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "yaml.py").write_text("raise ImportError('PyYAML is not installed here')\n", encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text("suites: arc_easy  # comment\nlimit: 7\napply_chat_template: false\n", encoding="utf-8")
    pythonpath = os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH", "")]))
    done = bench.run(*_args(bench, suites=None, config=config), env={"PYTHONPATH": pythonpath})
    assert done.returncode == 0, done.stderr
    argv = bench.runner_argv()
    assert argv[argv.index("--tasks") + 1] == "arc_easy"
    assert argv[argv.index("--limit") + 1] == "7"
    assert "--apply_chat_template" not in argv
