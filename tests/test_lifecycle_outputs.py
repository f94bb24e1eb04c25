"""`lifecycle.outputs`: the output folder every lifecycle program uses, and an export published whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuneplane.lifecycle.outputs import export_checkpoint, output_dir


def test_the_output_folder_comes_from_the_flag_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEPLANE_OUT_DIR", str(tmp_path / "env"))
    assert output_dir(str(tmp_path / "flag")) == tmp_path / "flag"
    assert output_dir(None) == tmp_path / "env"
    monkeypatch.delenv("TUNEPLANE_OUT_DIR")
    monkeypatch.chdir(tmp_path)
    assert output_dir(None) == tmp_path / "out"


def test_an_export_replaces_the_last_one_only_when_complete(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "step-2").mkdir(parents=True)
    (tmp_path / "hf_export").mkdir()
    (tmp_path / "hf_export" / "old").write_text("previous export")
    (tmp_path / "hf_export.partial").mkdir()
    (tmp_path / "hf_export.partial" / "stale").write_text("left by a killed export")
    written: list[tuple[Path, Path]] = []

    def write(checkpoint: Path, folder: Path) -> None:
        written.append((checkpoint, folder))
        assert not folder.exists()  # a stale partial folder is cleared first
        folder.mkdir()
        (folder / "model.safetensors").write_text("weights")

    target = export_checkpoint(str(tmp_path), None, lambda found: found / "step-2", write)

    assert written == [(tmp_path / "checkpoints" / "step-2", tmp_path / "hf_export.partial")]
    assert target == tmp_path / "hf_export"
    assert sorted(p.name for p in target.iterdir()) == ["model.safetensors"]
    assert not (tmp_path / "hf_export.partial").exists()


def test_a_failed_export_leaves_the_last_one(tmp_path: Path) -> None:
    (tmp_path / "hf_export").mkdir()
    (tmp_path / "hf_export" / "old").write_text("previous export")
    given = tmp_path / "my-checkpoint"

    def write(checkpoint: Path, folder: Path) -> None:
        assert checkpoint == given  # --checkpoint wins over the newest
        folder.mkdir()
        raise SystemExit("the merger failed")

    with pytest.raises(SystemExit, match="merger failed"):
        export_checkpoint(str(tmp_path), given, lambda _found: pytest.fail("not asked"), write)
    assert (tmp_path / "hf_export" / "old").read_text() == "previous export"
