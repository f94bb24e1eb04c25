"""runtime.patterns: patterns compiled on first use, for our modules (`lazy_pattern`) and for a
library's module-level patterns while it is imported (`compiled_on_first_use`)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuneplane.runtime.patterns import DeferredPattern, compiled_on_first_use, lazy_pattern

LIBRARY = """
import re

WORD = re.compile(r"[a-z]+")
BYTES = re.compile(rb"\\x00+", re.MULTILINE)


class Reader:
    TRAILING = re.compile(r"\\s+$", re.MULTILINE)


def compile_now(text):
    return re.compile(text)
"""


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package `deferlib` (with a submodule) on sys.path, not imported yet."""
    name = f"deferlib_{abs(hash(tmp_path)) % 10**8}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(LIBRARY, encoding="utf-8")
    (pkg / "sub.py").write_text("import re\nDIGITS = re.compile(r'[0-9]+')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_a_librarys_patterns_compile_when_first_used_and_then_match_as_re_does(library: str) -> None:
    with compiled_on_first_use(library):
        lib = importlib.import_module(library)
        sub = importlib.import_module(f"{library}.sub")
    for deferred in (lib.WORD, lib.BYTES, lib.Reader.TRAILING, sub.DIGITS):
        assert isinstance(deferred, DeferredPattern)
        assert deferred._compiled is None  # nothing compiled on import
    assert lib.WORD.match("abc1").group() == "abc"
    assert lib.WORD.findall("ab cd") == ["ab", "cd"]
    assert lib.WORD.pattern == "[a-z]+" and lib.BYTES.flags & re.MULTILINE
    assert lib.BYTES.sub(b"-", b"a\x00\x00b") == b"a-b"
    assert lib.Reader.TRAILING.search("x  ").start() == 1
    assert isinstance(lib.WORD.compiled(), re.Pattern) and lib.WORD.compiled() is lib.WORD.compiled()
    assert sub.DIGITS._compiled is None  # each pattern on its own first use
    assert "[0-9]+" in repr(sub.DIGITS)


def test_only_the_librarys_own_calls_in_the_importing_thread_are_deferred(library: str) -> None:
    with compiled_on_first_use(library):
        lib = importlib.import_module(library)
        mine = re.compile(r"mine")  # this module is not the library
        theirs: list[object] = []
        other = threading.Thread(target=lambda: theirs.append(lib.compile_now("other thread")))
        other.start()
        other.join()
        in_block = lib.compile_now("importing thread")
    assert isinstance(mine, re.Pattern)
    assert isinstance(theirs[0], re.Pattern)  # another thread never gets a stand-in
    assert isinstance(in_block, DeferredPattern)
    assert isinstance(lib.compile_now("after"), re.Pattern)  # the block is over
    assert re.compile(mine) is mine  # a compiled pattern passes through as re does


def test_re_compile_is_restored_after_the_block_even_when_the_import_fails(tmp_path: Path) -> None:
    real = re.compile
    (tmp_path / "brokenlib_xyz.py").write_text("import re\nP = re.compile('a')\nraise RuntimeError('no')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(RuntimeError), compiled_on_first_use("brokenlib_xyz"):
            importlib.import_module("brokenlib_xyz")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("brokenlib_xyz", None)
    assert re.compile is real


def test_blocks_nest_and_each_restores_what_it_found(library: str) -> None:
    real = re.compile
    with compiled_on_first_use("outer_lib"):
        outer = re.compile
        with compiled_on_first_use(library):
            lib = importlib.import_module(library)
        assert re.compile is outer
    assert re.compile is real
    assert isinstance(lib.WORD, DeferredPattern) and lib.WORD.match("ok")


def test_lazy_pattern_compiles_once_on_first_call() -> None:
    pattern = lazy_pattern(r"x+", re.IGNORECASE)
    assert pattern() is pattern()
    assert pattern().match("XX")


YAML_PROBE = textwrap.dedent(
    """
    import datetime, re
    from tuneplane.lab import yamlio
    from tuneplane.runtime.patterns import DeferredPattern
    yaml = yamlio.yaml
    text = "a: yes\\nb: 0o17\\nc: 1_000\\nd: 2.5e3\\ne: 2024-05-01\\nf: 2024-05-01T10:20:30Z\\ng: ~\\nh: '07'\\n"
    for loader in (yamlio._Loader, yaml.SafeLoader):  # the C parser tp reads with, and the pure one
        node = yaml.compose(text, Loader=loader)
        print(*(value.tag.rsplit(":", 1)[1] for _key, value in node.value))
    pure = yaml.load(text, Loader=yaml.SafeLoader)
    assert pure["e"] == datetime.date(2024, 5, 1), pure
    assert pure["f"] == datetime.datetime(2024, 5, 1, 10, 20, 30, tzinfo=datetime.timezone.utc), pure
    try:
        yaml.load("a: \\x07", Loader=yaml.SafeLoader)
    except yaml.reader.ReaderError as exc:
        assert "unacceptable character" in str(exc)
    else:
        raise AssertionError("the pure reader accepted a control character")
    assert isinstance(yaml.constructor.SafeConstructor.timestamp_regexp, DeferredPattern)
    assert isinstance(re.compile("x"), re.Pattern)
    """
)
# YAML 1.1 as PyYAML reads it: `0o17` and `2.5e3` are strings, `1_000` an int
TAGS = "bool str int str timestamp timestamp null str"


def test_yaml_is_read_as_before_with_its_patterns_deferred() -> None:
    """PyYAML imported the way tp imports it (through lab.yamlio, in a fresh interpreter): every kind
    of implicit scalar resolves as YAML 1.1 says, with the C parser and the pure-Python one; the pure
    constructor still reads timestamps and the pure reader still refuses a control character; and
    `re.compile` is no longer PyYAML's."""
    done = subprocess.run([sys.executable, "-c", YAML_PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [TAGS, TAGS]


def test_yaml_defers_the_patterns_its_c_parser_never_matches() -> None:
    """What the deferral is for: after tp has read a YAML file, PyYAML's reader pattern (the
    costliest, used only by the pure-Python reader) has still not been compiled."""
    probe = (
        "from tuneplane.lab import yamlio; yamlio.parse_yaml('a: [1, x, true]\\n', 'x.yaml'); "
        "print(yamlio.yaml.reader.Reader.NON_PRINTABLE._compiled)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_a_deferred_pattern_copies_and_pickles_as_its_pattern(library: str) -> None:
    import copy
    import pickle

    with compiled_on_first_use(library):
        lib = importlib.import_module(library)
    for made in (copy.copy(lib.WORD), copy.deepcopy(lib.WORD), pickle.loads(pickle.dumps(lib.WORD))):
        assert isinstance(made, re.Pattern) and made.pattern == "[a-z]+"
    with pytest.raises(AttributeError):
        _ = lib.WORD.__wrapped__  # a private name is not looked up on the pattern
