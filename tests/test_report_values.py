"""Values as training code hands them to tuneplane.report, through a real receiver: the loss tensor
itself (it requires grad) on the hot path, and hyperparameters given as the config objects people
use (a dataclass, argparse's Namespace, an Enum)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from support.installed import needs

from tuneplane.ingest import hparams, mint_token, series
from tuneplane.ingest.server import IngestServer

SECRET = b"v" * 32
RUN = "run-values"


def run_job(tmp_path: Path, code: str, *python_args: str) -> tuple[Path, str]:
    server = IngestServer(tmp_path / "ingest.sqlite", SECRET).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        {
            "TUNEPLANE_JOB_ENABLED": "1",
            "TUNEPLANE_JOB_ENDPOINT": server.url,
            "TUNEPLANE_JOB_RUN_ID": RUN,
            "TUNEPLANE_JOB_TOKEN": mint_token(SECRET, RUN),
            "TUNEPLANE_OUT_DIR": str(tmp_path),
            "TUNEPLANE_REPORT_FLUSH_INTERVAL": "0.02",
        }
    )
    try:
        done = subprocess.run(
            [sys.executable, *python_args, "-c", textwrap.dedent(code)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    return server.store.path, done.stderr


def test_the_loss_tensor_itself_is_logged_without_a_warning_from_torch(tmp_path: Path) -> None:
    needs("torch")
    code = """
    import torch, tuneplane.report as r
    r.init(monitor_hardware=False)
    w = torch.tensor(2.0, requires_grad=True)
    for step in range(5):  # the same keys each step: the hot path packs the tensor as float() does
        loss = w * step
        r.log({"loss": loss, "lr": 0.1}, step=step)
    r.finish(10)
    """
    db, err = run_job(tmp_path, code, "-W", "always")
    assert series(db, RUN, "loss") == [(s, 2.0 * s) for s in range(5)]
    assert "tuneplane" not in err and "requires_grad" not in err, err


def test_hyperparameters_given_as_config_objects_are_their_fields(tmp_path: Path) -> None:
    code = """
    import argparse, dataclasses, enum, pathlib, tuneplane.report as r
    class Kind(enum.Enum):
        CAUSAL = "causal"
    @dataclasses.dataclass
    class Optim:
        lr: float = 3e-4
        betas: tuple = (0.9, 0.95)
    @dataclasses.dataclass
    class Config:
        optim: Optim = dataclasses.field(default_factory=Optim)
        kind: Kind = Kind.CAUSAL
        data: pathlib.Path = pathlib.Path("data/train.jsonl")
        seed: int | None = None
    args = argparse.Namespace(batch_size=8, config=Config())
    r.init(hparams=args, monitor_hardware=False)
    r.log_hparams(Config(seed=1))
    loop = {"a": 1}
    loop["self"] = loop
    r.log_hparams({"loop": loop, "ok": 2})
    r.finish(10)
    """
    db, _ = run_job(tmp_path, code)
    assert hparams(db, RUN) == {
        "batch_size": 8,
        "config.optim.lr": 3e-4,
        "config.optim.betas": [0.9, 0.95],
        "config.kind": "causal",
        "config.data": "data/train.jsonl",
        "config.seed": None,
        "optim.lr": 3e-4,
        "optim.betas": [0.9, 0.95],
        "kind": "causal",
        "data": "data/train.jsonl",
        "seed": 1,
        "loop.a": 1,
        "ok": 2,
    }
