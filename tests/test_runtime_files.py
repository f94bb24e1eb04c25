"""The one atomic writer (both sides): a file or a folder is seen whole, or the old one stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuneplane.runtime.files import atomic_write, publish_dir


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "report.json"
    atomic_write(target, "{}\n")
    atomic_write(target, '{"score": 1}\n')
    assert target.read_text(encoding="utf-8") == '{"score": 1}\n'
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.json"
    target.write_text("old\n", encoding="utf-8")

    def disk_full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space"):
        atomic_write(target, "new\n")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_folder_goes_into_place_whole_and_never_over_another(tmp_path: Path) -> None:
    staged, target = tmp_path / "export.partial", tmp_path / "export"
    staged.mkdir()
    (staged / "model.safetensors").write_bytes(b"w")
    publish_dir(staged, target)
    assert not staged.exists() and (target / "model.safetensors").read_bytes() == b"w"
    staged.mkdir()
    (staged / "other").write_text("x", encoding="utf-8")
    with pytest.raises(OSError):  # a folder that is there is removed by the caller first, never merged
        publish_dir(staged, target)
    assert sorted(p.name for p in target.iterdir()) == ["model.safetensors"]


def test_a_report_is_as_readable_as_any_new_file_and_keeps_its_mode(tmp_path: Path) -> None:
    """An eval report is an artifact the lab's other members read (a shared run folder, a volume): a new
    one gets 0666 less the umask, as `open()` would give it, not the temporary file's 0600; one that is
    there keeps the mode it has."""
    old = os.umask(0o022)
    try:
        fresh, kept = tmp_path / "eval" / "report.json", tmp_path / "kept.json"
        atomic_write(fresh, "{}\n")
        kept.write_text("{}\n", encoding="utf-8")
        kept.chmod(0o640)
        atomic_write(kept, '{"score": 1}\n')
        os.umask(0o077)
        private = tmp_path / "private.json"
        atomic_write(private, "{}\n")
    finally:
        os.umask(old)
    assert oct(fresh.stat().st_mode & 0o777) == "0o644"
    assert oct(kept.stat().st_mode & 0o777) == "0o640"
    assert oct(private.stat().st_mode & 0o777) == "0o600"
