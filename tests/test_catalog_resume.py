"""The catalog's templates resume from the newest complete checkpoint on every new attempt.

Each run goes through the real launcher with the job's environment and reports to a real `tp ingest
serve`; it is stopped with SIGTERM twice after writing a checkpoint, and attempts 2 and 3 start on the
same out dir. Each must resume at the step of the newest complete checkpoint the attempt before left
(the trainer says so itself), attempt 3 must finish, and the stored metric series must have every step
once, from 1 to the last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_resume import Job, Receiver

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
REQUIRED = os.environ.get("CI") == "true"  # in CI a missing framework is a failure, not a skip


def _require(module: str) -> Any:
    if REQUIRED:
        return __import__(module)
    return pytest.importorskip(module, reason=f"{module} is not installed")


@pytest.fixture()
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    server = Receiver(tmp_path)
    yield server
    server.stop()


def _resumes_twice(job: Job, said: Callable[[int], str]) -> list[int]:
    """Attempts 1 and 2 stopped, 2 and 3 resumed (the trainer's output holds `said(step)`); the steps
    resumed at."""
    _, step = job.interrupted(1)
    resumed = []
    for attempt in (2, 3):
        newest = job.newest_step()
        assert newest == step
        if attempt == 2:
            output, step = job.interrupted(2)
        else:
            code, output = job.run(3)
            assert code == 0, output[-4000:]
        assert f"launcher: attempt {attempt} resumes from " in output, output[-3000:]
        assert said(newest) in output, output[-3000:]
        resumed.append(newest)
    assert resumed[0] < resumed[1]
    return resumed


# ── TRL ─────────────────────────────────────────────────────────────────────────────────────────────


def _tiny_causal_lm(root: Path) -> Path:
    """A one-layer Qwen2 with a word-level tokenizer, saved under `root/model`, and SFT rows."""
    torch = _require("torch")
    _require("trl")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    rows = [(f"what is {a} plus {b}", str(a + b)) for a in range(4) for b in range(4)]
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for word in " ".join(f"{p} {c}" for p, c in rows).split():
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    fast.save_pretrained(root / "model")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(root / "model")
    (root / "sft.jsonl").write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rows))
    return root


@pytest.mark.slow
def test_trl_sft_resumes_from_its_newest_checkpoint_twice(tmp_path: Path, receiver: Receiver) -> None:
    assets = _tiny_causal_lm(tmp_path / "assets")
    template = CATALOG / "trl" / "sft" / "template"
    max_steps = 24
    overrides = {
        "max_steps": max_steps,
        "save_steps": 2,
        "save_total_limit": 2,
        "logging_steps": 1,
        "bf16": False,
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "max_length": 16,
        "warmup_steps": 0,
    }
    job = Job(
        tmp_path,
        [
            sys.executable,
            str(template / "train.py"),
            "--config",
            str(template / "config.yaml"),
            "--model",
            str(assets / "model"),
            "--train-data",
            str(assets / "sft.jsonl"),
            "--output-dir",
            str(tmp_path / "run" / "out"),
            "--overrides-json",
            json.dumps(overrides),
        ],
        receiver,
        TRANSFORMERS_VERBOSITY="info",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        HF_DATASETS_CACHE=str(tmp_path / "hf-datasets"),
    )

    # transformers' own line (at info level) names the step its Trainer state was restored at
    _resumes_twice(job, lambda step: f"and global step {step}\n")

    state = json.loads((job.out / "checkpoints" / f"checkpoint-{max_steps}" / "trainer_state.json").read_text())
    assert state["global_step"] == max_steps
    assert (job.out / "checkpoints" / "final" / "config.json").is_file()
    receiver.stop()
    assert receiver.steps("train/loss") == list(range(1, max_steps + 1))


# ── PyTorch ─────────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.slow
def test_pytorch_template_resumes_from_its_newest_checkpoint_twice(tmp_path: Path, receiver: Receiver) -> None:
    torch = _require("torch")
    template = CATALOG / "pytorch" / "image-classification" / "template"
    epochs, per_epoch = 12, 4
    overrides = {
        "epochs": epochs,
        "synthetic_train_samples": 16 * per_epoch,
        "synthetic_val_samples": 16,
        "batch_size": 16,
        "log_interval": 1,
    }
    job = Job(
        tmp_path,
        [
            sys.executable,
            str(template / "train.py"),
            "--config",
            str(template / "config.yaml"),
            "--output-dir",
            str(tmp_path / "run" / "out"),
            "--overrides-json",
            json.dumps(overrides),
        ],
        receiver,
    )

    resumed = _resumes_twice(job, lambda step: f'"step": {step}}}')
    assert all(step % per_epoch == 0 for step in resumed)  # an epoch's end, where this loop saves

    total = epochs * per_epoch
    state = torch.load(job.out / "checkpoints" / f"epoch-{epochs}" / "state.pt", map_location="cpu", weights_only=False)
    assert (state["epoch"], state["step"]) == (epochs, total)
    summary = json.loads((job.out / "logs" / "summary.json").read_text())
    assert summary["steps"] == total
    receiver.stop()
    assert receiver.steps("train/loss") == list(range(1, total + 1))
    assert receiver.steps("validation/loss") == list(range(per_epoch, total + 1, per_epoch))
    mirrored = [
        json.loads(line)["step"]
        for line in (job.out / "logs" / "metrics.jsonl").read_text().splitlines()
        if "train/loss" in line
    ]
    assert mirrored == list(range(1, total + 1))  # the local mirror holds each step once too


# ── the job-side flag renderer (ms-swift) ──────────────────────────────────────────────────────────


ECHO = "import json, sys\nprint('ARGV=' + json.dumps(sys.argv[1:]))\n"


def _rendered(tmp_path: Path, resume_from: str | None, *options: str) -> list[str]:
    (tmp_path / "echo.py").write_text(ECHO)
    (tmp_path / "config.yaml").write_text("learning_rate: 1.0e-4\n")
    env = {k: v for k, v in os.environ.items() if k != "TUNEPLANE_RESUME_FROM"}
    if resume_from is not None:
        env["TUNEPLANE_RESUME_FROM"] = resume_from
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneplane.lifecycle.cli_flags",
            "--style",
            "flat",
            "--config",
            str(tmp_path / "config.yaml"),
            "--platform-json",
            '{"output_dir": "/out/checkpoints"}',
            *options,
            "--",
            str(tmp_path / "echo.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("ARGV="))
    return list(json.loads(line[5:]))


def test_the_flag_renderer_passes_the_resume_checkpoint_only_when_there_is_one(tmp_path: Path) -> None:
    flag = ("--resume-flag", "resume_from_checkpoint")
    resumed = _rendered(tmp_path, "/out/checkpoints/checkpoint-40", *flag)
    assert resumed == [
        "--learning_rate",
        "1.0e-4",
        "--output_dir",
        "/out/checkpoints",
        "--resume_from_checkpoint",
        "/out/checkpoints/checkpoint-40",
    ]
    assert "--resume_from_checkpoint" not in _rendered(tmp_path, None, *flag)  # a first attempt starts afresh
    assert "--resume_from_checkpoint" not in _rendered(tmp_path, "", *flag)
    # an entrypoint that declares no resume flag is never given one
    assert "--resume_from_checkpoint" not in _rendered(tmp_path, "/out/checkpoints/checkpoint-40")
