"""Where `tp job metrics --plot` and `tp job compare --plot` write, for both commands: a chart tp
wrote is replaced (its content really changes, its mode kept), anything else is left as it is; a
symlink is written through to its target and stays a link; a new file gets the umask's mode; a
read-only chart is refused; a file that appears while tp draws is kept; a character device, a FIFO
and `/dev/stdout` are written straight through (no sniffing read, no rename).

Metrics come from a real SQLite store the receiver's code writes (`--db`); `tp` runs in process,
and in a child process where its standard output matters.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tuneplane.views.charts import is_chart

COMMANDS = ("metrics", "compare")


@pytest.fixture()
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two runs with different metrics in a receiver's store, and a folder outside any lab."""
    from tuneplane.ingest.store import MetricStore

    path = tmp_path / "ingest.sqlite"
    store = MetricStore(path)
    store.add_points("run-a", [("loss", s, 1.0 / (s + 1), "") for s in range(5)], None)
    store.add_points("run-b", [("loss", s, 3.0 - s * 0.5, "") for s in range(7)], None)
    store.close()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return path


def _args(command: str, db: Path, plot: object, first: str = "run-a") -> list[object]:
    runs = [first] if command == "metrics" else [first, "run-b"]
    return ["job", command, *runs, "--db", db, "--plot", plot]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("command", COMMANDS)
def test_a_chart_is_replaced_with_new_content_and_keeps_its_mode(tp, db: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    chart = db.parent / "chart.svg"
    first = tp(*_args("metrics", db, chart, first="run-b"), cwd=db.parent)  # another chart at the path
    assert first.code == 0 and f"wrote {chart}" in first.err, first.output
    before = chart.read_bytes()
    chart.chmod(0o640)
    again = tp(*_args(command, db, chart), cwd=db.parent)
    assert again.code == 0 and f"replaced {chart}" in again.err, again.output
    after = chart.read_bytes()
    assert after != before and is_chart(after[:512]), after[:200]
    ET.fromstring(after)
    assert stat.S_IMODE(chart.stat().st_mode) == 0o640
    assert _leftovers(db.parent) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_users_file_and_a_symlink_to_one_are_left_as_they_are(tp, db: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    mine = db.parent / "mine.svg"
    mine.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="3" height="2"/>\n')
    link = db.parent / "link.svg"
    link.symlink_to(mine)
    for path in (mine, link):
        refused = tp(*_args(command, db, path), cwd=db.parent)
        assert refused.code == 2 and "not a chart tp wrote" in refused.err, refused.output
        assert "loss" not in refused.out  # refused before any work is shown
    assert mine.read_text().startswith("<svg xmlns") and link.is_symlink() and link.resolve() == mine
    assert _leftovers(db.parent) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlink_to_a_chart_is_written_through_and_stays_a_link(tp, db: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    shared = db.parent / "shared"
    shared.mkdir()
    target = shared / "chart.svg"
    assert tp(*_args("metrics", db, target, first="run-b"), cwd=db.parent).code == 0
    before = target.read_bytes()
    link = db.parent / "link.svg"
    link.symlink_to(Path("shared") / "chart.svg")
    done = tp(*_args(command, db, link), cwd=db.parent)
    assert done.code == 0 and "replaced" in done.err, done.output
    assert link.is_symlink() and os.readlink(link) == str(Path("shared") / "chart.svg")
    assert target.read_bytes() != before and link.read_bytes() == target.read_bytes()
    dangling = db.parent / "dangling.svg"
    dangling.symlink_to(shared / "new.svg")  # a link to a chart not drawn yet: drawn where it points
    made = tp(*_args(command, db, dangling), cwd=db.parent)
    assert made.code == 0 and dangling.is_symlink() and is_chart((shared / "new.svg").read_bytes()[:512]), made.output
    assert _leftovers(db.parent) == [] and _leftovers(shared) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_new_chart_gets_the_umask_mode(tp, db: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    chart = db.parent / "private.svg"
    old = os.umask(0o077)
    try:
        done = tp(*_args(command, db, chart), cwd=db.parent)
    finally:
        os.umask(old)
    assert done.code == 0, done.output
    assert stat.S_IMODE(chart.stat().st_mode) == 0o600


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_chart_is_refused_by_name(tp, db: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    chart = db.parent / "kept.svg"
    assert tp(*_args("metrics", db, chart, first="run-b"), cwd=db.parent).code == 0
    before = chart.read_bytes()
    chart.chmod(0o444)
    refused = tp(*_args(command, db, chart), cwd=db.parent)
    assert refused.code == 2 and str(chart) in refused.err and "read-only" in refused.err, refused.output
    assert "Traceback" not in refused.output and "loss" not in refused.out
    assert chart.read_bytes() == before and stat.S_IMODE(chart.stat().st_mode) == 0o444


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_appears_while_tp_draws_is_kept(
    tp,
    db: Path,
    command: str,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The path is checked again just before the write: another program's file that appeared
    meanwhile (a slow --endpoint read, a long render) is never overwritten."""
    import tuneplane.views.charts as charts
    import tuneplane.views.runmetrics as runmetrics

    chart = db.parent / "race.svg"
    theirs = "written meanwhile by another program\n"
    for module, name in ((charts, "render_svg"), (runmetrics, "compare_svg")):
        real = getattr(module, name)

        def drawing(*args: object, _real: Callable[..., str] = real, **kwargs: object) -> str:
            chart.write_text(theirs)  # appears after the first check, before the write
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, drawing)
    refused = tp(*_args(command, db, chart), cwd=db.parent)
    assert refused.code == 2 and str(chart) in refused.err and "Traceback" not in refused.output, refused.output
    assert chart.read_text() == theirs
    assert _leftovers(db.parent) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_character_device_is_written_straight_through(tp, db: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    done = tp(*_args(command, db, "/dev/null"), cwd=db.parent)
    assert done.code == 0, done.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not os.path.islink("/dev/null")


@pytest.fixture()
def fifo(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """A FIFO with a reader thread that collects what is written to it."""
    path = tmp_path / "chart.fifo"
    os.mkfifo(path)
    got: list[bytes] = []

    def read() -> None:
        with path.open("rb") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    yield path, got
    if reader.is_alive():  # nothing opened it: let the reader go
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    reader.join(10)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_is_written_straight_through(
    tp_subprocess,
    db: Path,
    command: str,  # type: ignore[no-untyped-def]
    fifo: tuple[Path, list[bytes]],
) -> None:
    path, got = fifo
    done = tp_subprocess(*_args(command, db, path), cwd=db.parent, timeout=30)
    assert done.code == 0, done.output
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    for _ in range(100):
        if got:
            break
        threading.Event().wait(0.1)
    assert got and is_chart(got[0][:512]), got
    ET.fromstring(got[0])


def _tp_child(args: list[object], cwd: Path, stdout: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tuneplane", *map(str, args)],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_plot_to_dev_stdout_prints_the_chart_after_the_table(db: Path, command: str) -> None:
    piped = _tp_child(_args(command, db, "/dev/stdout"), db.parent, subprocess.PIPE)
    assert piped.returncode == 0, piped.stderr
    table, _, chart = piped.stdout.partition(b"<svg ")
    assert b"loss" in table and is_chart(b"<svg " + chart[:512]), piped.stdout[:300]
    ET.fromstring(b"<svg " + chart)
    out = db.parent / "out.txt"
    with out.open("wb") as handle:  # `tp … --plot /dev/stdout > out.txt`
        redirected = _tp_child(_args(command, db, "/dev/stdout"), db.parent, handle)
    assert redirected.returncode == 0, redirected.stderr
    text = out.read_bytes()
    assert text.startswith(table) and text.count(b"<svg ") == 1 and text.endswith(b"</svg>\n"), text[:300]
    assert os.path.islink("/dev/stdout")


def test_plot_to_dev_stderr_redirected_to_a_file_writes_into_that_stream(db: Path) -> None:
    err = db.parent / "err.txt"
    with err.open("wb") as handle:  # `tp … --plot /dev/stderr 2> err.txt`
        done = subprocess.run(
            [sys.executable, "-m", "tuneplane", *map(str, _args("metrics", db, "/dev/stderr"))],
            cwd=db.parent,
            stdout=subprocess.PIPE,
            stderr=handle,
            timeout=30,
            check=False,
        )
    text = err.read_bytes()
    assert done.returncode == 0 and b"loss" in done.stdout, text
    assert is_chart(text[:512]) and text.endswith(b"</svg>\nwrote /dev/stderr\n"), text[-200:]
