"""TunePlaneCallback inside real trainers: transformers' Trainer and TRL's SFTTrainer train a tiny,
randomly initialised GPT-2 (built in the test, no hub) in a subprocess that reports to a real receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.installed import needs

from tuneplane.ingest import hparams, mint_token, series, summary
from tuneplane.ingest.server import IngestServer

SECRET = b"h" * 32
SETUP = r"""
import os, sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from tuneplane.report import TunePlaneCallback
words = "the cat sat on a mat dog ran far".split()
vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2, **{w: i + 3 for i, w in enumerate(words)}}
backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                    eos_token="[EOS]")
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_layer=1, n_embd=32, n_head=2, n_positions=32,
                                   pad_token_id=0, eos_token_id=2, bos_token_id=2))
texts = ["the cat sat on a mat", "the dog ran far", "a cat ran on the mat"] * 4
out = sys.argv[1]
common = dict(output_dir=out, max_steps=4, logging_steps=1, eval_strategy="steps", eval_steps=3,
              per_device_train_batch_size=4, per_device_eval_batch_size=4, report_to=[], use_cpu=True,
              save_strategy="no", disable_tqdm=True)
callback = TunePlaneCallback(monitor_hardware=False)
"""
TRAINER = (
    SETUP
    + r"""
from transformers import Trainer, TrainingArguments
class Data(torch.utils.data.Dataset):
    def __init__(self):
        self.rows = [tokenizer(t, padding="max_length", max_length=8, truncation=True) for t in texts]
    def __len__(self):
        return len(self.rows)
    def __getitem__(self, i):
        ids = torch.tensor(self.rows[i]["input_ids"])
        return {"input_ids": ids, "attention_mask": torch.tensor(self.rows[i]["attention_mask"]), "labels": ids}
trainer = Trainer(model=model, args=TrainingArguments(**common), train_dataset=Data(), eval_dataset=Data(),
                  callbacks=[callback])
trainer.train()
import json, tuneplane.report as report
print("after-train", json.dumps({"finished": report._session is None, "ledger": report.stats()["ledger"]}))
trainer.evaluate()  # after train(), whose end finished the session: a new one delivers it
# No finish(): the exit-time finish delivers what is left within the drain time.
"""
)
SFT = (
    SETUP
    + r"""
from datasets import Dataset
from trl import SFTConfig, SFTTrainer
data = Dataset.from_dict({"text": texts})
trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=data, eval_dataset=data,
                     args=SFTConfig(**common, max_length=16, dataset_text_field="text"), callbacks=[callback])
trainer.train()
import json, tuneplane.report as report
print("after-train", json.dumps({"finished": report._session is None, "ledger": report.stats()["ledger"]}))
trainer.evaluate()
"""
)


def run_trainer(tmp_path: Path, script: str, run: str) -> tuple[IngestServer, subprocess.CompletedProcess[str]]:
    """`script` as a training process reporting to a real receiver (offline: no hub); the receiver
    stopped, and the finished process (its exit checked)."""
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": server.url,
            "TUNEPLANE_JOB_RUN_ID": run,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, run),
            "TUNEPLANE_OUT_DIR": str(tmp_path),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.05",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(tmp_path / "hf"),
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300
    )
    server.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    return server, done


# The end-of-training summary, as the docs name it (docs/reference/report.md).
SUMMARY_KEYS = {
    "summary/train_loss",
    "summary/train_runtime",
    "summary/train_samples_per_second",
    "summary/train_steps_per_second",
    "summary/total_flos",
}


def check_convention(server: IngestServer, run: str, done: subprocess.CompletedProcess[str]) -> None:
    got = summary(server.store.path, run)
    assert got["train/loss"]["count"] == 4 and got["train/loss"]["last_step"] == 4
    # Evaluation once per evaluation, by on_evaluate: at step 3 in training, at 4 from evaluate().
    assert [step for step, _ in series(server.store.path, run, "validation/loss")] == [3, 4]
    assert got["validation/loss"]["count"] == 2
    assert not [key for key in got if key.startswith("eval") or key in ("loss", "validation/epoch")]
    # the summary once, at the last step, under its own names; none of it in the per-step series
    assert {key for key in got if key.startswith("summary/")} == SUMMARY_KEYS
    assert [step for step, _ in series(server.store.path, run, "summary/train_loss")] == [4]
    assert not [key for key in got if key.startswith("train/train_") or key == "train/total_flos"]
    # on_train_end finished the session: everything logged in training was delivered by then
    line = next(line for line in done.stdout.splitlines() if line.startswith("after-train"))
    after = json.loads(line.split(" ", 1)[1])
    assert after["finished"] and after["ledger"]["pending"] == 0
    assert after["ledger"]["delivered"] == after["ledger"]["logged"] > 0
    assert "after finish()" not in done.stderr


def test_transformers_trainer_reports_by_the_hf_convention(tmp_path: Path) -> None:
    needs("transformers")
    needs("tokenizers")
    server, done = run_trainer(tmp_path, TRAINER, "run-hf")
    check_convention(server, "run-hf", done)


@pytest.mark.slow
def test_trl_sft_trainer_reports_by_the_hf_convention(tmp_path: Path) -> None:
    needs("trl")
    needs("datasets")
    server, done = run_trainer(tmp_path, SFT, "run-sft")
    check_convention(server, "run-sft", done)
    got = summary(server.store.path, "run-sft")
    assert "train/mean_token_accuracy" in got
    # TRL's own evaluation values travel with the evaluation, once each
    assert got["validation/mean_token_accuracy"]["count"] == 2


DATA = r"""
from transformers import Trainer, TrainingArguments
class Data(torch.utils.data.Dataset):
    def __init__(self, rows=texts):
        self.rows = [tokenizer(t, padding="max_length", max_length=8, truncation=True) for t in rows]
    def __len__(self):
        return len(self.rows)
    def __getitem__(self, i):
        ids = torch.tensor(self.rows[i]["input_ids"])
        return {"input_ids": ids, "attention_mask": torch.tensor(self.rows[i]["attention_mask"]), "labels": ids}
"""
EVALUATE_ONLY = (
    SETUP
    + DATA
    + r"""
trainer = Trainer(model=model, args=TrainingArguments(**common), eval_dataset=Data(), callbacks=[callback])
trainer.evaluate()  # an evaluation job: no train(), so no on_train_begin
trainer.predict(Data())  # transformers' integrations report predict() metrics as test/...
"""
)
TWO_EVAL_SETS = (
    SETUP
    + DATA
    + r"""
evals = {"short": Data(texts[:4]), "long": Data(texts)}
trainer = Trainer(model=model, args=TrainingArguments(**{**common, "logging_steps": 0.25}),
                  train_dataset=Data(), eval_dataset=evals, callbacks=[callback])
trainer.train()
"""
)


def test_an_evaluation_only_run_and_predict_are_delivered(tmp_path: Path) -> None:
    needs("transformers")
    server, done = run_trainer(tmp_path, EVALUATE_ONLY, "run-eval-only")
    got = summary(server.store.path, "run-eval-only")
    assert [step for step, _ in series(server.store.path, "run-eval-only", "validation/loss")] == [0]
    assert [step for step, _ in series(server.store.path, "run-eval-only", "test/loss")] == [0]
    assert not [key for key in got if key.startswith("train/") and "loss" in key]
    # the trainer's arguments, as on_train_begin would have sent them
    assert hparams(server.store.path, "run-eval-only").get("per_device_eval_batch_size") == 4


def test_several_evaluation_sets_and_fractional_logging_steps(tmp_path: Path) -> None:
    needs("transformers")
    server, _ = run_trainer(tmp_path, TWO_EVAL_SETS, "run-two-evals")
    got = summary(server.store.path, "run-two-evals")
    # evaluated at step 3 and at the last step, each set under its own name, once each
    assert [s for s, _ in series(server.store.path, "run-two-evals", "validation/short_loss")] == [3, 4]
    assert [s for s, _ in series(server.store.path, "run-two-evals", "validation/long_loss")] == [3, 4]
    assert got["train/loss"]["count"] == 4  # logging_steps=0.25 of 4 steps: every step
    assert not [key for key in got if key.startswith("eval")]


def test_keys_are_rewritten_exactly_as_transformers_integrations_do() -> None:
    integrations = pytest.importorskip("transformers.integrations.integration_utils")
    from tuneplane.report._callback import rewrite_logs

    # what TRL's DPO, GRPO and SFT trainers put in their logs, training and evaluation
    logs = {
        "loss": 0.5,
        "rewards/chosen": 0.1,
        "eval_rewards/margins": 0.2,
        "eval_loss": 0.4,
        "epoch": 0.25,
        "completions/mean_length": 12.0,
        "test_accuracy": 0.9,
        "train_runtime": 3.0,
        "learning_rate": 1e-5,
    }
    assert rewrite_logs(logs) == integrations.rewrite_logs(logs)


TWO_TRAININGS = (
    SETUP
    + DATA
    + r"""
first = Trainer(model=model, args=TrainingArguments(**common), train_dataset=Data(), eval_dataset=Data(),
                callbacks=[callback])
first.train()
second = Trainer(model=model, args=TrainingArguments(**{**common, "learning_rate": 1e-3}), train_dataset=Data(),
                 eval_dataset=Data(), callbacks=[TunePlaneCallback(monitor_hardware=False)])
second.train()
second.evaluate()
import json
print("losses", json.dumps([h["loss"] for t in (first, second) for h in t.state.log_history if "loss" in h]))
"""
)


def test_a_second_training_in_the_process_continues_the_steps(tmp_path: Path) -> None:
    """Two Trainers one after the other (a second stage, a sweep in one script): the second's steps
    begin at 0 again, and the receiver keeps one value per step, so its points had replaced the first
    training's; it now continues from the first's last step."""
    needs("transformers")
    server, done = run_trainer(tmp_path, TWO_TRAININGS, "run-2")
    losses = next(line for line in done.stdout.splitlines() if line.startswith("losses"))
    logged = json.loads(losses.split(" ", 1)[1])  # the trainers' own log history, in order
    stored = series(server.store.path, "run-2", "train/loss")
    assert [step for step, _ in stored] == list(range(1, 9))
    assert [value for _, value in stored] == pytest.approx(logged)
    assert [step for step, _ in series(server.store.path, "run-2", "validation/loss")] == [3, 4, 7, 8]


RESUMED = (
    SETUP
    + DATA
    + r"""
import json
first = Trainer(model=model, args=TrainingArguments(**{**common, "max_steps": 6, "save_strategy": "steps",
                                                       "save_steps": 3, "eval_strategy": "no"}),
                train_dataset=Data(), callbacks=[callback])
first.train()
# A new Trainer resuming the first's checkpoint at step 3, in the same process (a notebook, a retry
# loop): it redoes steps 4..6.
again = Trainer(model=model, args=TrainingArguments(**{**common, "max_steps": 6, "eval_strategy": "no"}),
                train_dataset=Data(), callbacks=[TunePlaneCallback(monitor_hardware=False)])
again.train(resume_from_checkpoint=out + "/checkpoint-3")
# its log history holds the checkpoint's steps 1..3 too: the steps it ran itself are those after 3
print("resumed", json.dumps([(h["step"], h["loss"]) for h in again.state.log_history if "loss" in h and h["step"] > 3]))
"""
)


def test_a_trainer_resumed_from_a_checkpoint_keeps_the_checkpoints_steps(tmp_path: Path) -> None:
    """resume_from_checkpoint begins at the checkpoint's step: the steps it redoes are that
    training's own, stored under their numbers (the last value wins), not continued past the
    first training's last step."""
    needs("transformers")
    server, done = run_trainer(tmp_path, RESUMED, "run-resumed")
    resumed = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("resumed")).split(" ", 1)[1])
    assert [step for step, _ in resumed] == [4, 5, 6]
    stored = dict(series(server.store.path, "run-resumed", "train/loss"))
    assert sorted(stored) == [1, 2, 3, 4, 5, 6]
    assert [stored[step] for step, _ in resumed] == pytest.approx([loss for _, loss in resumed])


OTHER_RUN = (
    SETUP
    + DATA
    + r"""
# another run (another process) leaves a checkpoint at step 3 in out/b
Trainer(model=model, args=TrainingArguments(**{**common, "output_dir": out + "/b", "max_steps": 3,
                                               "save_strategy": "steps", "save_steps": 3, "eval_strategy": "no"}),
        train_dataset=Data()).train()
"""
)
TWO_STAGES = (
    SETUP
    + DATA
    + r"""
import json
first = Trainer(model=model, args=TrainingArguments(**{**common, "output_dir": out + "/a", "max_steps": 6,
                                                       "eval_strategy": "no"}),
                train_dataset=Data(), callbacks=[callback])
first.train()
# stage two resumes the OTHER run's checkpoint, in the folder that run saved it in
second = Trainer(model=model, args=TrainingArguments(**{**common, "output_dir": out + "/b", "max_steps": 6,
                                                        "eval_strategy": "no"}),
                 train_dataset=Data(), callbacks=[TunePlaneCallback(monitor_hardware=False)])
second.train(resume_from_checkpoint=out + "/b/checkpoint-3")
print("losses", json.dumps([h["loss"] for h in first.state.log_history if "loss" in h]
                           + [h["loss"] for h in second.state.log_history if "loss" in h and h["step"] > 3]))
"""
)


def test_resuming_another_runs_checkpoint_continues_after_this_processs_steps(tmp_path: Path) -> None:
    """A checkpoint this process never saved is not its training's to redo: stage two resuming
    another run's checkpoint-3 continues after stage one's step 6 (7..9) rather than landing its
    steps 4..6 on stage one's and replacing their values."""
    needs("transformers")
    run_trainer(tmp_path, OTHER_RUN, "run-other")
    server, done = run_trainer(tmp_path, TWO_STAGES, "run-stages")
    logged = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("losses")).split(" ", 1)[1])
    stored = series(server.store.path, "run-stages", "train/loss")
    assert [step for step, _ in stored] == list(range(1, 10))
    assert [value for _, value in stored] == pytest.approx(logged)


EPOCHS = (
    SETUP
    + DATA
    + r"""
args = TrainingArguments(**{**common, "max_steps": -1, "num_train_epochs": 3, "logging_strategy": "epoch",
                            "eval_strategy": "epoch", "gradient_accumulation_steps": 2,
                            "per_device_train_batch_size": 2})
trainer = Trainer(model=model, args=args, train_dataset=Data(), eval_dataset=Data(), callbacks=[callback])
trainer.train()
import json
print("steps", json.dumps(sorted({h["step"] for h in trainer.state.log_history if "loss" in h})))
"""
)


def test_epoch_logging_with_gradient_accumulation_reports_at_the_optimizer_steps(tmp_path: Path) -> None:
    """logging_strategy=epoch and gradient accumulation: one point per epoch at the trainer's own
    (optimizer) step, evaluation beside it, the end-of-training summary once."""
    needs("transformers")
    server, done = run_trainer(tmp_path, EPOCHS, "run-ep")
    steps = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("steps")).split(" ", 1)[1])
    assert len(steps) == 3
    assert [s for s, _ in series(server.store.path, "run-ep", "train/loss")] == steps
    assert [s for s, _ in series(server.store.path, "run-ep", "validation/loss")] == steps
    assert [s for s, _ in series(server.store.path, "run-ep", "summary/train_loss")] == steps[-1:]


OOM_RERUN = (
    SETUP
    + DATA
    + r"""
from transformers import TrainerCallback
class OutOfMemoryOnce(TrainerCallback):
    # What accelerate's find_executable_batch_size takes for an out-of-memory error: the Trainer
    # halves the batch and runs its training loop again, from step 0 (on_train_begin again).
    raised = False
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2 and not self.raised:
            OutOfMemoryOnce.raised = True
            raise RuntimeError("CUDA out of memory.")
        return control
trainer = Trainer(model=model, args=TrainingArguments(**{**common, "auto_find_batch_size": True}),
                  train_dataset=Data(), eval_dataset=Data(), callbacks=[callback, OutOfMemoryOnce()])
trainer.train()
assert OutOfMemoryOnce.raised and trainer._train_batch_size < 4, trainer._train_batch_size  # it reran
import json
print("losses", json.dumps([h["loss"] for h in trainer.state.log_history if "loss" in h]))
"""
)


def test_the_same_trainer_rerunning_its_loop_keeps_its_own_steps(tmp_path: Path) -> None:
    """auto_find_batch_size reruns the training loop (and on_train_begin) after an out-of-memory
    error: that is the same training redone, so its steps stay 1..4, not continued to 3..6."""
    needs("transformers")
    needs("accelerate")
    server, _ = run_trainer(tmp_path, OOM_RERUN, "run-oom")
    stored = series(server.store.path, "run-oom", "train/loss")
    assert [step for step, _ in stored] == [1, 2, 3, 4]


def test_a_trainer_is_known_by_its_arguments_object() -> None:
    """The callback's own rule, with duck-typed events: a new arguments object continues the steps,
    the same one beginning again at 0 (or with no arguments at all, the same callback) does not."""
    from types import SimpleNamespace

    import tuneplane.report as report
    from tuneplane.report._callback import TunePlaneCallback, forget_steps

    forget_steps()
    try:
        first, second = SimpleNamespace(), SimpleNamespace()
        callback = TunePlaneCallback(monitor_hardware=False)
        steps: list[int] = []
        callback._started = True  # no session: only the steps are looked at
        original, report.log = report.log, lambda logs, step=None, prefix="": steps.append(step)
        try:
            for args in (first, first, second, None, None):
                callback.on_train_begin(args, SimpleNamespace(global_step=0))
                for step in (1, 2):
                    callback.on_log(args, SimpleNamespace(global_step=step), logs={"loss": 1.0})
        finally:
            report.log = original
        assert steps == [1, 2, 1, 2, 3, 4, 5, 6, 5, 6]
    finally:
        forget_steps()
