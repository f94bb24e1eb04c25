"""The Jinja environment: quoting, and the compiled-template cache that must never go stale."""

from __future__ import annotations

import jinja2
import yaml

from tuneplane.render.templating import _bytecode_cache, _QuietCache, quote


def _env(tmp_path, cache):
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(tmp_path / "t")), bytecode_cache=cache, undefined=jinja2.StrictUndefined
    )


def test_an_edited_template_is_not_served_from_the_cache(tmp_path):
    (tmp_path / "t").mkdir()
    template = tmp_path / "t" / "x.j2"
    (tmp_path / "cache").mkdir()
    cache = _QuietCache(str(tmp_path / "cache"))
    template.write_text("one {{ v }}")
    assert _env(tmp_path, cache).get_template("x.j2").render(v=1) == "one 1"
    assert list((tmp_path / "cache").iterdir()), "the compiled template was cached"
    template.write_text("two {{ v }}")
    assert _env(tmp_path, cache).get_template("x.j2").render(v=1) == "two 1"


def test_a_cache_that_cannot_be_written_is_not_used(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the cache folder would go
    assert _bytecode_cache() is None
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "x.j2").write_text("ok")
    broken = _QuietCache(str(tmp_path / "missing" / "dir"))
    assert _env(tmp_path, broken).get_template("x.j2").render() == "ok"


def test_quote_round_trips_hostile_strings():
    for value in ["a\nb: c", "{{ x }}", "${HOME}", "'\"", "!!python/object x", "a\x85b", "x\u2028y", "é"]:
        assert yaml.safe_load("k: " + quote(value))["k"] == value
