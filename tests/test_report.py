"""tuneplane.report against a healthy receiver: enablement, values, keys, ranks, callback, monitor."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tuneplane.report as report
from tuneplane.ingest import hparams, mint_token, series, summary
from tuneplane.ingest.server import IngestServer

SECRET = b"k" * 32
FAST = {
    "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
    "TUNEPLANE_REPORT_RETRY_BASE": "0.02",
    "TUNEPLANE_REPORT_RETRY_CAP": "0.2",
    "TUNEPLANE_REPORT_FINISH_TIMEOUT": "10",
}


def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TUNEPLANE_") or name in ("RANK", "LOCAL_RANK"):
            monkeypatch.delenv(name, raising=False)
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)


@dataclass
class Job:
    url: str
    db: Path
    run_id: str
    out: Path


@pytest.fixture()
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Job]:
    clean_env(monkeypatch)
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("TUNEPLANE_JOB_ENABLED", "1")
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", server.url)
    monkeypatch.setenv("TUNEPLANE_JOB_RUN_ID", "run-1")
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", mint_token(SECRET, "run-1"))
    monkeypatch.setenv("TUNEPLANE_OUT_DIR", str(out))
    report._reset()
    yield Job(server.url, server.store.path, "run-1", out)
    report._reset()
    server.stop()


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    clean_env(monkeypatch)
    report._reset()
    yield
    report._reset()


# ── enablement ────────────────────────────────────────────────────────────────────────────────
def test_no_token_means_nothing_happens(offline: None) -> None:
    threads = threading.active_count()
    report.log({"loss": 1.0})
    assert report.init(hparams={"a": 1}) is False
    report.log({"loss": 1.0}, step=3)
    report.finish()
    assert not report.enabled()
    assert threading.active_count() == threads
    assert report.stats() == {}


def test_enabled_zero_wins_over_a_token(offline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", "t")
    monkeypatch.setenv("TUNEPLANE_JOB_ENABLED", "0")
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("TUNEPLANE_JOB_RUN_ID", "r")
    assert report.init() is False


def test_decision_is_made_once(offline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    report.log({"loss": 1.0})  # decides: off
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", "now-there-is-one")
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("TUNEPLANE_JOB_RUN_ID", "r")
    report.log({"loss": 2.0})
    assert report._session is None  # the environment is not re-read on the hot path


def test_import_is_light_and_disabled_log_loads_nothing() -> None:
    code = (
        "import sys\n"
        "import tuneplane.report as r\n"
        "r.log({'loss': 1.0}); r.log({'loss': 2.0}, step=5); r.finish()\n"
        "heavy = ['typer', 'pydantic', 'transformers', 'ray', 'tuneplane.cli', 'torch', 'numpy',\n"
        "         'http.client',\n"
        "         'tuneplane.report._core', 'tuneplane.report._sender', 'json']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == ""
    assert out.stderr == ""


def test_missing_endpoint_is_explained(
    offline: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", "t")
    assert report.init() is False
    assert "TUNEPLANE_JOB_ENDPOINT" in capfd.readouterr().err


# ── delivery and values ───────────────────────────────────────────────────────────────────────
def test_points_and_hparams_arrive(job: Job) -> None:
    assert report.init(
        hparams={
            "lr": 3e-4,
            "model": {"name": "tiny", "layers": 2},
            "obj": object(),
            "path": Path("/x"),
            "nan": float("nan"),
            "tags": ["a", "b"],
        },
        monitor_hardware=False,
    )
    assert report.init() is True  # idempotent
    for step in range(100):
        report.log({"loss": 1.0 / (step + 1), "acc": step / 100}, step=step)
    report.finish()
    got = summary(job.db, job.run_id)
    assert got["loss"] == {"last": 0.01, "min": 0.01, "max": 1.0, "count": 100, "last_step": 99}
    assert series(job.db, job.run_id, "acc")[:2] == [(0, 0.0), (1, 0.01)]
    params = hparams(job.db, job.run_id)
    assert params["lr"] == 3e-4 and params["model.name"] == "tiny" and params["model.layers"] == 2
    assert params["obj"].startswith("<object object") and params["path"] == "/x" and params["nan"] == "nan"
    assert params["tags"] == ["a", "b"]
    stats = report.stats()
    assert stats["delivered_points"] == 200 and stats["pending_points"] == 0


def test_steps_count_up_when_omitted(job: Job) -> None:
    report.log({"a": 1.0})
    report.log({"a": 2.0})
    report.log({"a": 3.0}, step=10)
    report.log({"a": 4.0})
    report.finish()
    assert series(job.db, job.run_id, "a") == [(1, 1.0), (2, 2.0), (10, 3.0), (11, 4.0)]


def test_flatten_prefix_and_key_rules(job: Job) -> None:
    report.log({"train": {"loss": 1.0, "opt": {"lr": 0.1}}}, step=1)
    report.log({"loss": 2.0, "validation/acc": 0.5}, step=1, prefix="validation")
    report.log({"x": 1.0}, step=1, prefix="eval/")
    report.log({"": 1.0, "bad\nkey": 1.0, "k" * 300: 1.0, "ok": 1.0}, step=1)
    report.finish()
    assert set(summary(job.db, job.run_id)) == {
        "train.loss",
        "train.opt.lr",
        "validation/loss",
        "validation/acc",
        "eval/x",
        "ok",
    }
    dropped = report.stats()["dropped"]
    assert dropped["empty key"] == 1
    assert dropped["key contains control characters"] == 1
    assert dropped["key longer than 256 characters"] == 1


class FakeTensor:
    """Duck-typed like torch.Tensor: detach(), numel(), mean(), item()."""

    def __init__(self, values: list[float], integer: bool = False) -> None:
        self.values, self.integer, self.detached = values, integer, False

    def detach(self) -> FakeTensor:
        clone = FakeTensor(self.values, self.integer)
        clone.detached = True
        return clone

    def numel(self) -> int:
        return len(self.values)

    def mean(self) -> FakeTensor:
        if self.integer:
            raise RuntimeError("mean(): could not infer output dtype")
        return FakeTensor([sum(self.values) / len(self.values)])

    def double(self) -> FakeTensor:
        return FakeTensor(self.values)

    def item(self) -> float:
        assert self.detached or len(self.values) == 1
        return self.values[0]


def test_values_are_reduced_or_dropped_with_reasons(job: Job) -> None:
    np = pytest.importorskip("numpy")
    report.log(
        {
            "int": 3,
            "bool": True,
            "np_f32": np.float32(0.5),
            "np_i64": np.int64(7),
            "zero_d": np.array(2.5),
            "nd": np.array([[1.0, 2.0], [3.0, 4.0]]),
            "list": [1, 2, 3],
            "tuple": (2.0, 4.0),
            "tensor": FakeTensor([1.0, 3.0]),
            "scalar_tensor": FakeTensor([9.0]),
            "int_tensor": FakeTensor([1, 2], True),
            "text": "hello",
            "none": None,
            "nan": float("nan"),
            "inf": np.float64("inf"),
            "empty": [],
            "mixed": [1, "a"],
            "obj": object(),
            "empty_array": np.array([]),
            "np_list": [np.float32(1), 3.0],
            "huge": 10**400,
        },
        step=1,
    )
    report.finish()
    got = {k: v["last"] for k, v in summary(job.db, job.run_id).items()}
    assert got == {
        "int": 3.0,
        "bool": 1.0,
        "np_f32": 0.5,
        "np_i64": 7.0,
        "zero_d": 2.5,
        "nd": 2.5,
        "list": 2.0,
        "tuple": 3.0,
        "tensor": 2.0,
        "scalar_tensor": 9.0,
        "int_tensor": 1.5,
        "np_list": 2.0,
    }
    dropped = report.stats()["dropped"]
    assert dropped == {
        "text value": 1,
        "None value": 1,
        "non-finite value": 3,
        "empty list": 1,
        "list with non-numeric items": 1,
        "unsupported type object": 1,
        "empty array": 1,
    }


def test_bad_inputs_never_raise(job: Job) -> None:
    report.log(None, step=1)  # type: ignore[arg-type]
    report.log({"a": 1.0}, step="x")  # type: ignore[arg-type]
    report.log({"a": 1.0}, step=object())  # type: ignore[arg-type]
    report.log({1: 2.0, (1, 2): 3.0}, step=2)  # type: ignore[dict-item]
    report.log({"b": 1.0}, step=3.0)  # type: ignore[arg-type]

    class Exploding(dict):  # type: ignore[type-arg]
        def items(self) -> Any:
            raise RuntimeError("boom")

    report.log(Exploding(a=1), step=4)
    report.finish()
    assert set(summary(job.db, job.run_id)) == {"1", "(1, 2)", "b"}
    stats = report.stats()
    assert stats["dropped"]["step is not an integer"] == 2
    assert stats["dropped"]["metrics is not a mapping"] == 1


def test_the_caller_may_reuse_its_dict(job: Job) -> None:
    metrics: dict[str, float] = {}
    for step in range(5):
        metrics["loss"] = float(step)
        report.log(metrics, step=step)  # fast path after the first call: must copy
    report.finish()
    assert series(job.db, job.run_id, "loss") == [(s, float(s)) for s in range(5)]


def test_log_after_finish_warns_once(job: Job, capfd: pytest.CaptureFixture[str]) -> None:
    report.log({"a": 1.0}, step=1)
    report.finish()
    capfd.readouterr()
    for _ in range(3):
        report.log({"a": 2.0}, step=2)
    err = capfd.readouterr().err
    assert err.count("after finish()") == 1
    assert series(job.db, job.run_id, "a") == [(1, 1.0)]
    assert report.init() is True  # an explicit init starts again
    report.log({"a": 3.0}, step=3)
    report.finish()
    assert series(job.db, job.run_id, "a") == [(1, 1.0), (3, 3.0)]


def test_flush_waits_for_delivery(job: Job) -> None:
    report.log({"a": 1.0}, step=1)
    assert report.flush(10) is True
    assert series(job.db, job.run_id, "a") == [(1, 1.0)]


# ── ranks ─────────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    ("rank", "local_rank", "reports"),
    [("1", None, False), (None, "2", False), ("0", "3", True), (None, None, True), ("x", None, True)],
)
def test_rank_zero_reports_by_default(
    job: Job, monkeypatch: pytest.MonkeyPatch, rank: str | None, local_rank: str | None, reports: bool
) -> None:
    if rank is not None:
        monkeypatch.setenv("RANK", rank)
    if local_rank is not None:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    report.log({"a": 1.0}, step=1)
    report.finish()
    assert bool(summary(job.db, job.run_id)) is reports


def test_all_ranks_on_request_with_rank_label(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    assert report.init(all_ranks=True, monitor_interval=0.01)
    report.log({"loss": 1.0}, step=1)
    report.finish()
    assert set(summary(job.db, job.run_id)) == {"loss@rank2"}  # and no hardware samples off rank zero
    report._reset()
    monkeypatch.setenv("TUNEPLANE_REPORT_ALL_RANKS", "1")
    report.log({"loss": 2.0}, step=1)
    report.finish()
    assert series(job.db, job.run_id, "loss@rank2") == [(1, 2.0)]


# ── hardware monitor ──────────────────────────────────────────────────────────────────────────
def test_hardware_monitor_samples_on_rank_zero(job: Job) -> None:
    assert report.init(monitor_interval=0.02)
    deadline = threading.Event()
    for _ in range(500):
        if report._session is not None and report._session.monitor is not None and report._session.monitor.samples >= 2:
            break
        deadline.wait(0.01)
    report.finish()
    keys = set(summary(job.db, job.run_id))
    assert {"hw/mem.used_pct", "hw/mem.proc_rss_mb"} <= keys
    assert "hw/cpu.util_pct" in keys
    assert os.environ.get("TUNEPLANE_REPORT_MONITOR_PID") is None  # released for a later session


def test_one_sampler_per_job(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPLANE_REPORT_MONITOR_PID", str(os.getppid()))  # a live process owns it
    assert report.init(monitor_interval=0.01)
    assert report._session is not None and report._session.monitor is None
    report.finish()


def test_a_stuck_sampler_does_not_delay_finish(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuneplane.report import _hardware

    entered, release = threading.Event(), threading.Event()

    def stuck(self: Any) -> dict[str, float]:
        entered.set()
        release.wait(30)
        return {"late": 1.0}

    monkeypatch.setattr(_hardware.Sampler, "sample", stuck)
    report.init(monitor_interval=0.01)
    report.log({"a": 1.0}, step=1)
    assert entered.wait(10)
    report.finish()  # returns while the sampler is still blocked
    assert not release.is_set()
    release.set()
    assert series(job.db, job.run_id, "a") == [(1, 1.0)]


# ── the trainer callback ──────────────────────────────────────────────────────────────────────
HF_EVENTS = (
    "on_init_end",
    "on_train_begin",
    "on_epoch_begin",
    "on_step_begin",
    "on_pre_optimizer_step",
    "on_optimizer_step",
    "on_substep_end",
    "on_step_end",
    "on_log",
    "on_evaluate",
    "on_predict",
    "on_prediction_step",
    "on_save",
    "on_epoch_end",
    "on_train_end",
)


class StandInTrainer:
    """Dispatches events the way transformers' CallbackHandler does: getattr(callback, event)(...)."""

    class Args:
        def to_sanitized_dict(self) -> dict[str, Any]:
            return {"learning_rate": 5e-5, "output_dir": "/out", "report_to": []}

    class State:
        global_step = 0

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks, self.args, self.state, self.control = callbacks, self.Args(), self.State(), object()

    def event(self, name: str, **kwargs: Any) -> None:
        for callback in self.callbacks:
            result = getattr(callback, name)(self.args, self.state, self.control, **kwargs)
            assert result is self.control or result is None

    def train(self) -> None:
        self.event("on_init_end")
        self.event("on_train_begin")
        for step in range(1, 4):
            self.state.global_step = step
            for name in ("on_step_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end"):
                self.event(name)
            self.event("on_log", logs={"loss": 1.0 / step, "learning_rate": 5e-5, "epoch": step / 3})
        self.evaluate()
        self.event("on_save")
        self.event("on_some_future_event")
        # the end-of-training summary, as Trainer._finalize_training logs it
        summary = {"train_runtime": 2.0, "train_samples_per_second": 6.0, "train_steps_per_second": 1.5}
        self.event("on_log", logs={**summary, "total_flos": 0.0, "train_loss": 0.6, "epoch": 1.0})
        self.event("on_train_end")

    def evaluate(self, loss: float = 0.3) -> None:
        """transformers' Trainer logs an evaluation through on_log, then calls on_evaluate with the
        same dict, which TRL's trainers extend in place before the log."""
        metrics: dict[str, Any] = {"eval_loss": loss, "eval_runtime": 1.5}
        self.event("on_log", logs=metrics)
        metrics["epoch"] = 1.0  # Trainer.log adds it to the dict on_evaluate then gets
        self.event("on_evaluate", metrics=metrics)


def test_callback_with_a_stand_in_trainer(job: Job) -> None:
    trainer = StandInTrainer([report.TunePlaneCallback(monitor_hardware=False)])
    trainer.train()
    got = summary(job.db, job.run_id)
    assert got["train/loss"]["count"] == 3 and got["train/loss"]["last_step"] == 3
    # the evaluation once, by on_evaluate, under validation/: on_log's copy is not stored beside it
    assert series(job.db, job.run_id, "validation/loss") == [(3, 0.3)]
    assert series(job.db, job.run_id, "validation/runtime") == [(3, 1.5)]
    assert not [key for key in got if key.startswith("eval") or key in ("loss", "validation/epoch")]
    # the end-of-training summary under summary/, apart from the per-step series
    assert series(job.db, job.run_id, "summary/train_loss") == [(3, 0.6)]
    assert {k for k in got if k.startswith("summary/")} == {
        "summary/train_loss",
        "summary/train_runtime",
        "summary/train_samples_per_second",
        "summary/train_steps_per_second",
        "summary/total_flos",
    }
    assert not [key for key in got if key.startswith("train/train_") or key == "train/total_flos"]
    assert series(job.db, job.run_id, "train/epoch")[-1] == (3, 1.0)  # the summary's epoch is the step's
    assert hparams(job.db, job.run_id)["learning_rate"] == 5e-5
    assert report._session is None  # on_train_end finished the session
    trainer.state.global_step = 4
    trainer.evaluate(0.2)  # evaluate() after train(): the callback starts a new session
    report.finish()
    assert series(job.db, job.run_id, "validation/loss") == [(3, 0.3), (4, 0.2)]
    assert not hasattr(report.TunePlaneCallback(), "not_an_event")


def test_callback_on_train_end_calls_finish(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    finished: list[object] = []
    real = report.finish
    monkeypatch.setattr(report, "finish", lambda timeout=None: (finished.append(timeout), real(timeout)))
    StandInTrainer([report.TunePlaneCallback(monitor_hardware=False)]).train()
    assert finished == [None]  # once, with the SDK's own finish timeout
    ledger = report.stats()["ledger"]
    assert report._session is None and ledger["pending"] == 0 and ledger["delivered"] == ledger["logged"] > 0


def test_on_evaluate_alone_stores_the_evaluation(job: Job) -> None:
    """A trainer that calls on_evaluate without logging the evaluation first."""
    callback = report.TunePlaneCallback(monitor_hardware=False)
    state = StandInTrainer.State()
    state.global_step = 5
    callback.on_evaluate(StandInTrainer.Args(), state, None, metrics={"eval_loss": 0.25, "eval_short_acc": 0.5})
    report.finish()
    assert series(job.db, job.run_id, "validation/loss") == [(5, 0.25)]
    assert series(job.db, job.run_id, "validation/short_acc") == [(5, 0.5)]


def test_an_evaluation_logged_with_no_on_evaluate_is_sent_by_the_next_event(job: Job) -> None:
    """A loop of one's own that hands evaluation to on_log only: nothing is lost, still once."""
    callback = report.TunePlaneCallback(monitor_hardware=False)
    args, state = StandInTrainer.Args(), StandInTrainer.State()
    state.global_step = 2
    callback.on_log(args, state, None, logs={"eval_loss": 0.4, "eval_extra": 1.0})
    state.global_step = 3
    callback.on_log(args, state, None, logs={"loss": 0.9})
    callback.on_evaluate(args, state, None, metrics={"eval_loss": 0.35})
    callback.on_train_end(args, state, None)
    assert series(job.db, job.run_id, "validation/loss") == [(2, 0.4), (3, 0.35)]
    assert series(job.db, job.run_id, "validation/extra") == [(2, 1.0)]


def test_trl_values_on_log_adds_join_their_evaluation(job: Job) -> None:
    """TRL adds its `eval_*` values to the log; should they reach on_log only (a copy of the dict),
    they are sent with the evaluation's on_evaluate, at its step, once."""
    callback = report.TunePlaneCallback(monitor_hardware=False)
    args, state = StandInTrainer.Args(), StandInTrainer.State()
    state.global_step = 3
    callback.on_log(args, state, None, logs={"eval_loss": 0.3, "eval_reward": 2.0, "epoch": 0.5})
    callback.on_evaluate(args, state, None, metrics={"eval_loss": 0.3, "epoch": 0.5})
    report.finish()
    got = summary(job.db, job.run_id)
    assert sorted(got) == ["train/epoch", "validation/loss", "validation/reward"]
    assert got["validation/loss"]["count"] == got["validation/reward"]["count"] == 1


def test_per_step_train_speed_values_stay_training_series(job: Job) -> None:
    """With include_num_input_tokens_seen each step's log has `train_runtime` and
    `train_tokens_per_second`: those are per-step series; only the end-of-training log is the summary."""
    callback = report.TunePlaneCallback(monitor_hardware=False)
    args, state = StandInTrainer.Args(), StandInTrainer.State()
    state.global_step = 1
    callback.on_log(args, state, None, logs={"loss": 1.0, "train_runtime": 0.5, "train_tokens_per_second": 9.0})
    report.finish()
    assert sorted(summary(job.db, job.run_id)) == ["train/loss", "train/train_runtime", "train/train_tokens_per_second"]


def test_callback_is_inert_without_a_token(offline: None) -> None:
    StandInTrainer([report.TunePlaneCallback()]).train()
    assert report._session is None


@pytest.mark.trainer
def test_callback_with_real_transformers(job: Job) -> None:
    transformers = pytest.importorskip("transformers")
    handler = transformers.trainer_callback.CallbackHandler(
        [report.TunePlaneCallback(monitor_hardware=False)], None, None, None, None
    )
    args, state = StandInTrainer.Args(), transformers.TrainerState()
    control = transformers.TrainerControl()
    handler.on_train_begin(args, state, control)
    state.global_step = 7
    handler.on_log(args, state, control, logs={"loss": 0.5})
    handler.on_train_end(args, state, control)
    assert series(job.db, job.run_id, "train/loss") == [(7, 0.5)]


def test_a_bad_endpoint_turns_reporting_off_with_a_reason(
    offline: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", "t")
    monkeypatch.setenv("TUNEPLANE_JOB_RUN_ID", "r")
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", "ingest:8080")
    assert report.init() is False
    report.log({"a": 1.0})
    assert "http(s) URL" in capfd.readouterr().err


# ── the memory estimate ───────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("keys", [1, 4, 12])
def test_buffer_estimate_bounds_real_memory(offline: None, monkeypatch: pytest.MonkeyPatch, keys: int) -> None:
    import socket
    import tracemalloc

    from tuneplane.report._config import record_cost

    with socket.socket() as sock:  # a port nobody listens on: everything stays queued
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("TUNEPLANE_JOB_TOKEN", "t")
    monkeypatch.setenv("TUNEPLANE_JOB_RUN_ID", "r")
    monkeypatch.setenv("TUNEPLANE_JOB_ENDPOINT", f"http://127.0.0.1:{port}")
    names = [f"metric_{i}" for i in range(keys)]
    report.init(monitor_hardware=False, finish_timeout=0, spill_bytes=0)  # no overflow file: all queued
    report.log(dict.fromkeys(names, 0.5), step=0)  # validates the keys: later calls take the fast path
    session = report._session
    assert session is not None
    before = session.added
    report.log(dict.fromkeys(names, 0.5), step=1)
    assert session.added - before == record_cost(keys)  # log()'s inlined numbers agree
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for step in range(2, 20_002):
        report.log({name: float(step) for name in names}, step=step)
    used = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    estimated = report.stats()["buffered_bytes"]
    assert used <= estimated, f"{used} bytes held, {estimated} estimated"


def test_lifecycle_events_are_sent_synchronously(job: Job) -> None:
    from tuneplane.ingest import lifecycle

    assert report.lifecycle("running") is True
    assert report.lifecycle("exploded") is False  # the receiver refuses unknown events
    assert [e["event"] for e in lifecycle(job.db, job.run_id)] == ["running"]


def test_lifecycle_without_a_token_is_a_no_op(offline: None) -> None:
    assert report.lifecycle("running") is False
