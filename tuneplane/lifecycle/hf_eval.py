"""Score a Hugging Face causal LM on held-out data and write a JSON report (`tp eval`).

The catalog's trl, verl and nemo-rl templates ship an `eval.py` that calls `main()` here; an
experiment that needs another evaluation replaces its own `eval.py`. Runs in the job: the standard
library at import, `datasets`, `torch` and `transformers` only inside the functions that use them.

    python -m tuneplane.lifecycle.hf_eval --data <file|folder|hub name> \\
        --report $TUNEPLANE_OUT_DIR/eval/report.json [--model DIR]

The model defaults to <output-dir>/hf_export (run `tp export` first). Each row is read as one of:
  messages                  the last message is the reference reply to the ones before it
  prompt + completion       the completion is the reference reply
  prompt + answer           a short final answer (also `solution` or `ground_truth`)
  input + output            the output is both the reference reply and the final answer
  text                      plain text, scored by loss only
Reported: `loss` and `perplexity` of the reference replies given their prompts, `exact_match` of
greedy generations against them, and `answer_accuracy` when rows carry a final answer.

A reward model (a sequence classifier, as trl/rm trains) is scored on preference pairs instead:
rows of `chosen` and `rejected` (and optionally `prompt`), joined as TRL's RewardTrainer joins
them; reported are `accuracy` (the share of pairs whose chosen reply scores higher), `margin` (the
mean score of chosen minus rejected) and `pairs`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from tuneplane.lifecycle import answers
from tuneplane.lifecycle.answers import normalise
from tuneplane.lifecycle.outputs import output_dir
from tuneplane.lifecycle.trl_export import load_model as load_checkpoint
from tuneplane.lifecycle.trl_export import load_tokenizer
from tuneplane.runtime.files import atomic_write

ANSWER_KEYS = ("answer", "solution", "ground_truth")
_DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="evaluate a model on held-out data")
    parser.add_argument("--data", required=True, help="evaluation data: file, folder or Hub name")
    parser.add_argument("--report", type=Path, help="report path (default: <output-dir>/eval/report.json)")
    parser.add_argument("--model", help="model folder or Hub id (default: <output-dir>/hf_export)")
    parser.add_argument("--output-dir", help="run output folder (default: $TUNEPLANE_OUT_DIR)")
    parser.add_argument("--max-samples", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    return parser.parse_args()


def load_rows(source: str) -> Any:
    """Rows of a local .jsonl/.json/.parquet/.csv file or folder, else a Hub data set's test split."""
    # lazy: a training-image library, absent where tp runs
    from datasets import load_dataset

    path = Path(source).expanduser()
    files = sorted(p for p in path.iterdir() if p.suffix in _DATA_SUFFIXES) if path.is_dir() else [path]
    if path.exists():
        if not files or files[0].suffix not in _DATA_SUFFIXES:
            raise SystemExit(f"{path}: expected .jsonl, .json, .parquet or .csv data")
        builder = _DATA_SUFFIXES[files[0].suffix]
        return load_dataset(builder, data_files=[str(p) for p in files], split="train")
    return load_dataset(source, split="test")


def as_text(value: Any, tokenizer: Any, generation_prompt: bool) -> str:
    """A string as is; a list of chat messages through the tokenizer's chat template."""
    if isinstance(value, str):
        return value
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(value, tokenize=False, add_generation_prompt=generation_prompt))
    plain = "\n".join(f"{m['role']}: {m['content']}" for m in value)
    return plain + "\nassistant:" if generation_prompt else plain


def split_row(row: dict[str, Any], tokenizer: Any) -> tuple[str, str | None, str | None]:
    """(prompt, reference reply or None, final answer or None) for one row."""
    answer = next((str(row[k]) for k in ANSWER_KEYS if row.get(k) is not None), None)
    if row.get("messages"):
        messages = row["messages"]
        return as_text(messages[:-1], tokenizer, True), str(messages[-1]["content"]), answer
    if row.get("prompt") is not None:
        completion = row.get("completion")
        if isinstance(completion, list):
            completion = completion[-1]["content"] if completion else None
        return as_text(row["prompt"], tokenizer, True), completion, answer
    if row.get("input") is not None and row.get("output") is not None:
        return as_text(row["input"], tokenizer, True), str(row["output"]), answer or str(row["output"])
    if row.get("text") is not None:
        return "", str(row["text"]), answer
    raise SystemExit(f"cannot read an evaluation row with keys {sorted(row)}")


def final_answer(text: str) -> str:
    """The last \\boxed{...} or, failing that, the last number in `text`, normalised (all of the text
    when it has neither)."""
    found = answers.final_answer(text)
    return normalise(text) if found is None else found


def reference_loss(model: Any, tokenizer: Any, prompt: str, reference: str) -> tuple[float, int]:
    """Summed negative log-likelihood of the reference tokens given the prompt, and their count."""
    # lazy: a training-image library, absent where tp runs
    import torch

    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    reference_ids = tokenizer(reference, add_special_tokens=False)["input_ids"]
    if not reference_ids:
        return 0.0, 0
    ids = torch.tensor([prompt_ids + reference_ids], device=model.device)
    labels = ids.clone()
    labels[0, : len(prompt_ids)] = -100
    with torch.no_grad():
        mean = model(input_ids=ids, labels=labels).loss
    scored = len(reference_ids) - (0 if prompt_ids else 1)  # the first token has no context
    return float(mean) * max(scored, 1), max(scored, 1)


def generate(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int) -> str:
    # lazy: a training-image library, absent where tp runs
    import torch

    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(model.device)
    with torch.no_grad():
        output = model.generate(
            **encoded,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )
    return str(tokenizer.decode(output[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True))


def evaluate(model: Any, tokenizer: Any, rows: Any, max_new_tokens: int) -> dict[str, Any]:
    nll, tokens, exact, compared, answered, correct = 0.0, 0, 0, 0, 0, 0
    for row in rows:
        prompt, reference, answer = split_row(row, tokenizer)
        if reference is not None:
            row_nll, row_tokens = reference_loss(model, tokenizer, prompt, reference)
            nll, tokens = nll + row_nll, tokens + row_tokens
        if not prompt:
            continue
        text = generate(model, tokenizer, prompt, max_new_tokens)
        if reference is not None:
            compared += 1
            exact += normalise(text) == normalise(reference)
        if answer is not None:
            answered += 1
            correct += final_answer(text) == final_answer(answer)
    metrics: dict[str, float] = {}
    if tokens:
        metrics["loss"] = nll / tokens
        metrics["perplexity"] = math.exp(min(nll / tokens, 50.0))
    if compared:
        metrics["exact_match"] = exact / compared
    if answered:
        metrics["answer_accuracy"] = correct / answered
    return metrics


def load_model(model_path: str) -> tuple[Any, Any]:
    """(model, tokenizer): a folder as the class it was trained as (LoRA merged), else a Hub causal LM."""
    if Path(model_path).is_dir():
        checkpoint = Path(model_path)
        return load_checkpoint(checkpoint), load_tokenizer(checkpoint)
    # lazy: a training-image library, absent where tp runs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path)


def is_reward_model(model: object) -> bool:
    """A sequence classifier (its class, not its config: a merged LoRA model keeps its base's config)."""
    return type(model).__name__.endswith("ForSequenceClassification")


def pair_texts(row: dict[str, Any], tokenizer: Any) -> tuple[str, str]:
    """The chosen and the rejected text of a preference row, each after its prompt, as TRL joins them."""
    if row.get("chosen") is None or row.get("rejected") is None:
        raise SystemExit(
            f"a reward model is scored on preference pairs: rows need `chosen` and `rejected`, "
            f"this one has {sorted(row)}"
        )
    texts = []
    for reply in (row["chosen"], row["rejected"]):
        prompt = row.get("prompt") or type(reply)()
        if type(prompt) is not type(reply):
            raise SystemExit("a preference row's `prompt` and replies must all be text or all chat messages")
        whole = as_text(prompt + reply, tokenizer, False)
        eos = tokenizer.eos_token if isinstance(reply, str) else None
        texts.append(whole + eos if eos and not whole.endswith(eos) else whole)
    return texts[0], texts[1]


def evaluate_pairs(model: Any, tokenizer: Any, rows: Any) -> dict[str, Any]:
    # lazy: a training-image library, absent where tp runs
    import torch

    margins = []
    for row in rows:
        scores = []
        for text in pair_texts(row, tokenizer):
            batch = tokenizer(text, return_tensors="pt").to(model.device)
            with torch.no_grad():
                scores.append(float(model(**batch).logits[0, 0]))
        margins.append(scores[0] - scores[1])
    if not margins:
        raise SystemExit("no preference pairs to score")
    return {
        "accuracy": sum(m > 0 for m in margins) / len(margins),
        "margin": sum(margins) / len(margins),
        "pairs": len(margins),
    }


def main() -> int:
    args = parse_args()
    out = output_dir(args.output_dir)
    model_path = args.model or str(out / "hf_export")
    report_path = args.report or out / "eval" / "report.json"
    model, tokenizer = load_model(model_path)
    model.eval()
    rows = load_rows(args.data)
    rows = rows.select(range(min(args.max_samples, len(rows))))
    started = time.monotonic()
    if is_reward_model(model):
        metrics = evaluate_pairs(model, tokenizer, rows)
    else:
        metrics = evaluate(model, tokenizer, rows, args.max_new_tokens)
    report = {
        "model": model_path,
        "data": args.data,
        "samples": len(rows),
        "metrics": metrics,
        "seconds": round(time.monotonic() - started, 3),
    }
    atomic_write(report_path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(json.dumps(metrics, sort_keys=True), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
