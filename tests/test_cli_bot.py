"""`tp bot reconcile|sync` through the real CLI: the idle check runs once a pass, and an idle run
says so without loading the pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.repos import make_remote, seed_lab

import tuneplane.bot.entry
import tuneplane.bot.idle


@pytest.mark.parametrize("verb", ["reconcile", "sync"])
def test_a_pass_with_work_asks_the_idle_check_once(
    verb: str, tmp_path: Path, tp, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = seed_lab(make_remote(tmp_path), tmp_path / "lab", {"demo": "echo hi\n"})  # no ledger yet: work to do
    monkeypatch.chdir(lab)
    asked: list[Any] = []
    real = tuneplane.bot.idle.idle

    def spy(*args: Any) -> Any:
        answer = real(*args)
        asked.append(answer)
        return answer

    for module in (tuneplane.bot.idle, tuneplane.bot.entry):  # wherever the name is looked up
        monkeypatch.setattr(module, "idle", spy)
    result = tp("bot", verb)
    assert result.code == 0, result.output
    assert asked == [None], "the idle check ran more than once (or not at all) for one pass"
    asked.clear()
    result = tp("bot", verb)  # the pass wrote the ledger: now there is nothing to do
    assert result.code == 0 and result.out == "nothing to do: every run request has its status\n", result.output
    assert len(asked) == 1 and asked[0] is not None
