"""What a resumed run leaves behind, read the way the tests of a run interrupted twice check it.

A run's out dir holds its checkpoints (`newest_step`), its run dir the launcher's attempt records
(`ended`), its log each attempt's own lines (`attempt_logs`), and git the bot's status commits
(`committed_attempts`). `tiny_causal_lm` builds the small model and data set the TRL runs train on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from support.repos import git
from tuneplane.constants import epoch_of
from tuneplane.report.checkpoints import CHECKPOINTS_DIR, complete_checkpoints
from tuneplane.runtime import attempts


def newest_step(out: Path) -> int:
    """The step of the newest complete checkpoint under the out dir (0 when there is none)."""
    return max((step for step, _ in complete_checkpoints(out / CHECKPOINTS_DIR)), default=0)


def ended(run_dir: Path, attempt: int) -> bool:
    """Whether the launcher recorded the end of `attempt` (node rank 0): its trainer has exited."""
    records = attempts.read_all(run_dir).get(attempt) or []
    return any(r.get("node_rank", 0) == 0 and "finished_at" in r for r in records)


def attempt_logs(text: str, started: str) -> dict[int, str]:
    """A log holding every attempt, split at each attempt's first line (`started` with `(\\d+)` where
    the attempt's number is): number → that attempt's lines."""
    pieces = re.split(f"^{started}$", text, flags=re.MULTILINE)
    return {int(number): body for number, body in zip(pieces[1::2], pieces[2::2], strict=True)}


def committed_attempts(root: Path, status_rel: str) -> list[int]:
    """How many attempts each committed version of a status file holds, oldest commit first."""
    revs = git(root, "log", "--reverse", "--format=%H", "--", status_rel).split()
    return [len(json.loads(git(root, "show", f"{rev}:{status_rel}")).get("attempts") or []) for rev in revs]


def assert_gpu_seconds(status: dict[str, Any], gpus: int) -> None:
    """Every attempt held `gpus` GPUs and spent that many times its own wall time; the run's GPU-seconds
    (its GPU-hours on the pages) are their sum."""
    from tuneplane.lab.runs import unchecked_from
    from tuneplane.views.dashboard import gpu_seconds

    spent = status["attempts"]
    for attempt in spent:
        start, end = epoch_of(attempt["started_at"]), epoch_of(attempt["finished_at"])
        assert start is not None and end is not None and end > start, attempt
        assert attempt["gpus"] == gpus, attempt
        assert attempt["gpu_seconds"] == round(gpus * (end - start), 1), attempt
    assert gpu_seconds(unchecked_from(status)) == sum(a["gpu_seconds"] for a in spent) > 0


def tiny_causal_lm(root: Path) -> Path:
    """A one-layer Qwen2 with a word-level tokenizer, saved under `root/model`, and SFT rows in
    `root/sft.jsonl` (the caller checks that torch and TRL are installed)."""
    rows = [(f"what is {a} plus {b}", str(a + b)) for a in range(4) for b in range(4)]
    save_tiny_qwen(root / "model", " ".join(f"{p} {c}" for p, c in rows).split(), max_positions=64)
    (root / "sft.jsonl").write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in rows))
    return root


def save_tiny_qwen(model_dir: Path, words: Iterable[str], max_positions: int = 128) -> Path:
    """A randomly initialised one-layer Qwen2 (seed 0) and a word-level tokenizer knowing `words`, saved
    in `model_dir`: what the tests train on CPU in seconds, with no hub."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for word in words:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    fast.save_pretrained(model_dir)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=max_positions,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(model_dir)
    return model_dir
