"""The reward of the trl/grpo-judge recipe: a language model judges each completion.

The judge reads the prompt, the completion and (when the row has one) the reference answer, and is
asked whether the completion is correct; the reward is its probability of answering "yes", so it is
graded rather than all-or-nothing. The judge is any causal language model on the Hub or on disk
(judge_model_name_or_path in config.yaml; empty means the policy's starting model judges itself).
It runs in the training processes, on their device, without gradients.
"""

from __future__ import annotations

from typing import Any

TEMPLATE = "Question: {prompt}\nReference: {reference}\nAnswer: {completion}\nIs the answer correct? Reply yes or no.\n"


def _text(value: Any) -> str:
    """A prompt or completion as text: a string, or the contents of a list of chat messages."""
    if isinstance(value, list):
        return " ".join(str(m.get("content", "")) for m in value if isinstance(m, dict))
    return str(value)


class JudgeReward:
    """Callable reward function: P("yes") from the judge for each (prompt, completion)."""

    def __init__(self, model_name_or_path: str, max_length: int = 1024) -> None:
        self.__name__ = "judge"  # TRL names the reward's metrics after the function
        self.model_name_or_path = model_name_or_path
        self.max_length = max_length
        self._model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        self._model = AutoModelForCausalLM.from_pretrained(self.model_name_or_path)
        self._model.eval()
        ids = [self._tokenizer.convert_tokens_to_ids(t) for t in ("yes", "Yes", "no", "No")]
        unknown = self._tokenizer.unk_token_id
        self._yes = [i for i in ids[:2] if i is not None and i != unknown] or [ids[0]]
        self._no = [i for i in ids[2:] if i is not None and i != unknown] or [ids[2]]

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        import torch

        if self._model is None:
            self._load()
        references = kwargs.get("answer") or [""] * len(prompts)
        scores = []
        for prompt, completion, reference in zip(prompts, completions, references, strict=False):
            text = TEMPLATE.format(prompt=_text(prompt), completion=_text(completion), reference=reference or "-")
            batch = self._tokenizer(text, return_tensors="pt", truncation=True, max_length=self.max_length)
            with torch.no_grad():
                logits = self._model(**batch).logits[0, -1].float()
            pair = torch.stack([logits[self._yes].logsumexp(0), logits[self._no].logsumexp(0)])
            scores.append(float(pair.softmax(0)[0]))
        return scores
