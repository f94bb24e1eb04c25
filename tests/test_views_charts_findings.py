"""What a reader of a chart found wrong, each as a test: values left out said in words, y labels that
fit and never run off the left edge, sub-second wall-time ticks, a committed chart that says what it
left out, legends that fit and name only what changed (nested keys, list values, long values cut).

Series are fed straight to the chart code; charts are parsed back as XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tuneplane.views.charts import render_compare_svg, render_svg
from tuneplane.views.charts_legend import VALUE_CHARS, changed_parameters

NS = "{http://www.w3.org/2000/svg}"
CHAR = 6.2  # px per character of the 11 px sans-serif the charts use (a generous average)
DIGIT = 7.0  # px per digit of that font (0.64 em, as DejaVu Sans and Helvetica draw them)


def _texts(svg: str) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter(f"{NS}text"))


def _y_labels(svg: str) -> list[ET.Element]:
    return [t for t in _texts(svg) if t.get("text-anchor") == "end" and t.get("fill") is None]


def test_values_that_are_not_finite_are_said_in_words_not_drawn() -> None:
    svg = render_svg({"train/loss": [(0, 1.0), (1, float("nan")), (2, float("inf")), (3, 0.5)]})
    words = " ".join("".join(t.itertext()) for t in _texts(svg))
    assert "2 values not finite (NaN/inf) not drawn" in words, words
    path = next(ET.fromstring(svg).iter(f"{NS}path")).get("d") or ""
    assert path.count("M") == 1 and path.count("l") == 1, path  # the two finite points, one segment


@pytest.mark.parametrize(
    "values",
    [
        [-1e-12 * (1 + s * 1e-7) for s in range(4)],
        [123456789.123 + s * 0.001 for s in range(4)],
        [1.000001 + s * 1e-7 for s in range(4)],
        [s * 1e-12 for s in range(4)],
        [1.000001 + s * 1e-7 for s in range(8)],
        [123456789.0 + s * 1e5 for s in range(10)],
    ],
)
def test_y_labels_stay_inside_the_chart_and_at_least_two_are_shown(values: list[float]) -> None:
    svg = render_svg({"train/loss": list(enumerate(values))})
    labels = _y_labels(svg)
    assert len(labels) >= 2, [t.text for t in labels]
    assert len({t.text for t in labels}) == len(labels)
    for label in labels:
        assert float(label.get("x") or 0) - len(label.text or "") * DIGIT >= 0, (label.text, label.get("x"))
    ys = sorted(float(t.get("y") or 0) for t in labels)
    assert all(b - a >= 14 for a, b in zip(ys, ys[1:], strict=False)), ys  # never overlapping


def test_the_y_axis_reaches_round_ticks_around_the_data() -> None:
    """0.41 to 0.8 is drawn on 0.4 … 0.8, not on a range whose ends no tick names."""
    svg = render_svg({"train/accuracy": [(s, 0.41 + s * 0.0039) for s in range(101)]})
    labels = [t.text for t in _y_labels(svg)]
    assert labels[0] == "0.4" and labels[-1] == "0.8", labels


@pytest.mark.parametrize("span", [0.79, 0.09, 0.004])
def test_wall_time_under_a_second_has_ticks(span: float) -> None:
    points = [(span * t / 80, float(t % 5)) for t in range(81)]
    svg = render_svg({"hw/gpu_util": points}, times={"hw/gpu_util": points})
    under = [t.text for t in _texts(svg) if t.get("text-anchor") == "middle" and (t.text or "").endswith("s")]
    assert len(under) >= 3 and len(set(under)) == len(under), under


def test_a_committed_chart_says_which_panels_it_left_out() -> None:
    series = {f"train/m{i}": [(s, float(s * (i + 1))) for s in range(10)] for i in range(6)}
    svg = render_svg(series, compact=True)
    words = " ".join("".join(t.itertext()) for t in _texts(svg))
    assert "3 more metrics" in words and "train/m5" in words, words


def test_long_legends_are_cut_to_the_chart_width_with_an_ellipsis() -> None:
    runs = {f"run-{i:02d}": {"train/loss": [(s, 1 / (s + 1) + i) for s in range(5)]} for i in range(12)}
    svg = render_compare_svg(runs, legend={r: "name=" + "x" * 300 for r in runs}, width=760)
    legend = [t for t in _texts(svg) if (t.text or "").startswith("run-")]
    assert len(legend) == 12
    for text in legend:
        assert text.text is not None and text.text.endswith("…")
        assert float(text.get("x") or 0) + len(text.text) * CHAR <= 760, len(text.text)


def test_changed_parameters_flatten_nested_values_and_cut_long_ones() -> None:
    legend = changed_parameters(
        {
            "a": {"lr": 1e-3, "opt": {"betas": [0.9, 0.99], "eps": 1e-8}, "bs": 8, "name": "x" * 80, "same": 1},
            "b": {"lr": 2e-4, "opt": {"betas": [0.9, 0.999], "eps": 1e-8}, "name": "y" * 80, "same": 1},
        }
    )
    assert legend["a"].split()[:3] == ["bs=8", "lr=0.001", "name=" + "x" * (VALUE_CHARS - 1) + "…"], legend
    assert "opt.betas=[0.9,0.99]" in legend["a"] and "eps" not in legend["a"] and "same" not in legend["a"]
    assert legend["b"].startswith("bs=(unset) lr=0.0002"), legend


def test_equal_values_of_different_types_are_not_a_change() -> None:
    assert changed_parameters({"a": {"lr": 1.0, "n": 2}, "b": {"lr": 1, "n": 2}}) == {"a": "", "b": ""}
    assert changed_parameters({"a": {"flag": True}, "b": {"flag": 1}}) == {"a": "flag=True", "b": "flag=1"}


@pytest.mark.parametrize(
    "span", [0.003, 0.05, 0.8, 61, 150, 5400, 90000, 2.5 * 86400, 3 * 86400, 10 * 86400, 400 * 86400]
)
def test_a_wall_time_axis_speaks_one_unit(span: float) -> None:
    """3 days read `0h 12h 24h … 72h`, not `36h 2d 2d12h`: one unit per axis, whole multiples of it."""
    points = [(span * i / 10, float(i % 3)) for i in range(11)]
    svg = render_svg({"hw/gpu_util": points}, times={"hw/gpu_util": points})
    labels = [t.text or "" for t in _texts(svg) if t.get("text-anchor") == "middle" and "font-size" not in t.attrib]
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    units = {label.lstrip("0123456789.") for label in labels}
    assert len(units) == 1 and units <= {"ms", "s", "m", "h", "d"}, labels


@pytest.mark.parametrize("base", [0, 10**9, 2**53, 2**62])
def test_step_labels_never_overlap(base: int) -> None:
    svg = render_svg({"train/loss": [(base + 10 * i, 1.0 / (i + 1)) for i in range(11)]}, width=600)
    labels = [t for t in _texts(svg) if t.get("text-anchor") == "middle" and "font-size" not in t.attrib]
    assert len(labels) >= 2, [t.text for t in labels]
    for a, b in zip(labels, labels[1:], strict=False):
        gap = float(b.get("x") or 0) - float(a.get("x") or 0)
        assert gap >= (len(a.text or "") + len(b.text or "")) / 2 * DIGIT + 4, (a.text, b.text, gap)


def test_a_million_points_make_a_bounded_deterministic_chart_a_git_host_renders() -> None:
    """1,000,000 points per series: at most 1,500 drawn per run and panel (the spikes kept), the
    same bytes for the same input, nothing a git host strips (scripts, links, external images)."""
    points = [(s, ((s * 7919) % 1009) / 1009 + (5.0 if s == 654_321 else 0.0)) for s in range(1_000_000)]
    series = {"train/loss": points, "train/grad_norm": points}
    svg = render_svg(series, title='a "run" <1M> & more')
    assert len(svg.encode()) < 60_000, len(svg.encode())
    root = ET.fromstring(svg)
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}" and root.get("width") == "760"
    for element in root.iter():
        assert element.tag.split("}")[-1] in {"svg", "rect", "text", "line", "path", "circle"}, element.tag
        assert not any("href" in name or name.startswith("on") for name in element.attrib), element.attrib
    moves = [len((p.get("d") or "").split("l")) for p in root.iter(f"{NS}path")]
    assert all(m <= 1500 for m in moves), moves
    labels = [t.text for t in _y_labels(svg)]
    assert "6" in labels or "5" in labels, labels  # the one spike (5.0 over 0..1) set the axis: it survived


def test_hardware_without_times_is_drawn_by_sample_on_its_own_axis() -> None:
    """Hardware samples are numbered by sample, not by training step: with no times known they get
    their own axis, named `sample`, instead of sharing (and stretching) the training steps' axis."""
    svg = render_svg(
        {
            "train/loss": [(s, 1 / (s + 1)) for s in range(0, 1001, 10)],
            "hw/gpu_util": [(s, float(s % 4)) for s in range(12)],
        }
    )
    texts = [t.text for t in _texts(svg)]
    assert texts.count("step") == 1 and texts.count("sample") == 1, texts
    after = texts[texts.index("hw/gpu_util") :]
    assert "10" in after and "1000" not in after, after


def test_a_chart_of_constants_only_is_their_lines_without_an_empty_panel() -> None:
    svg = render_svg({"train/epoch": [(s, 1.0) for s in range(10)]}, title="t")
    root = ET.fromstring(svg)
    line = next(t for t in _texts(svg) if t.text == "train/epoch = 1")
    assert float(line.get("y") or 0) <= 60 and int(root.get("height") or 0) <= 80, svg


def test_runs_of_two_recipes_overlay_what_they_share_and_keep_the_rest_apart() -> None:
    """A TRL run (aliases: `mean_token_accuracy` is `train/token_accuracy`) beside a custom run (no
    aliases): `train/loss` and `validation/loss` are one panel each with both runs, the accuracies
    that are named differently sit side by side, each with its own run."""
    from tuneplane.views.runmetrics import RunMetrics, compare_svg, vocabulary_of

    def run(method: str, keys: list[str]) -> RunMetrics:
        data = {k: [(s, float(s + i)) for s in range(5)] for i, k in enumerate(keys)}
        summary = {
            k: {"last": p[-1][1], "min": p[0][1], "max": p[-1][1], "count": 5, "last_step": 4} for k, p in data.items()
        }
        return RunMetrics(summary, lambda k: data[k], vocabulary_of(method))

    trl = run("trl/sft", ["loss", "eval_loss", "mean_token_accuracy"])
    custom = run("custom/custom", ["train/loss", "validation/loss", "train/mean_token_accuracy"])
    root = ET.fromstring(
        compare_svg({"a": trl, "b": custom}, {"a": {"method": "trl/sft"}, "b": {"method": "custom/custom"}})
    )
    titles: list[str] = []
    strokes: list[set[str]] = []
    for element in root.iter():
        if element.tag == f"{NS}text" and element.get("font-weight") == "bold":
            titles.append(element.text or "")
            strokes.append(set())
        elif element.tag == f"{NS}path" and strokes:
            strokes[-1].add(element.get("stroke") or "")
    assert titles == ["train/loss", "validation/loss", "train/token_accuracy", "train/mean_token_accuracy"]
    assert [len(s) for s in strokes] == [2, 2, 1, 1] and strokes[2] != strokes[3], strokes


# what the determinism check renders in a child process: hash-ordered sets (metric keys, legend
# parameters) would show as different bytes under another PYTHONHASHSEED
_RENDER = """
import sys
from tuneplane.views.charts import render_compare_svg
from tuneplane.views.charts_legend import changed_parameters
keys = ["train/loss", "validation/loss", "train/grad_norm", "train/lr", "custom/" + "z" * 3, "hw/gpu_util",
        "hw/cpu_util", "train/epoch"]
runs = {f"run-{i}": {k: [(s, (s * (j + 1) + i) % 7 + 0.5) for s in range(40)] for j, k in enumerate(keys)}
        for i in range(4)}
params = {r: {"lr": i, "opt": {"b": [i, 2], "c": "x"}, f"only-{i}": 1} for i, r in enumerate(runs)}
times = {r: {"hw/gpu_util": [(s * 0.5, float(s % 3)) for s in range(40)]} for r in list(runs)[:2]}
sys.stdout.write(render_compare_svg(runs, legend=changed_parameters(params), title="t", times=times))
sys.stdout.write(render_compare_svg(runs, legend=changed_parameters(params), compact=True))
"""


def test_the_same_metrics_make_the_same_bytes_under_any_hash_seed() -> None:
    import os
    import subprocess
    import sys

    made = []
    for seed in ("0", "1", "4242"):
        done = subprocess.run(
            [sys.executable, "-c", _RENDER],
            capture_output=True,
            timeout=60,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        made.append(done.stdout)
    assert made[0].count(b"<svg ") == 2 and made[0] == made[1] == made[2]


def test_a_run_without_hardware_times_is_named_on_the_wall_time_panel() -> None:
    """Only run-a's hardware samples have times: run-b's cannot share the wall-time axis, and the
    panel says so instead of leaving it out unexplained."""
    samples = [(s, float(s % 4)) for s in range(10)]
    svg = render_compare_svg(
        {"run-a": {"hw/gpu_util": samples}, "run-b": {"hw/gpu_util": samples}},
        times={"run-a": {"hw/gpu_util": [(s * 2.0, v) for s, v in samples]}, "run-b": {}},
    )
    captions = {"time since the first sample", "sample", "step"}
    notes = [t.text or "" for t in _texts(svg) if t.get("fill") == "#666666" and t.text not in captions]
    assert notes == ["run-b: no sample times, not drawn"], [t.text for t in _texts(svg)]
    assert len(list(ET.fromstring(svg).iter(f"{NS}path"))) == 1
    both = render_compare_svg(
        {"run-a": {"hw/gpu_util": samples}, "run-b": {"hw/gpu_util": samples}},
        times={r: {"hw/gpu_util": samples} for r in ("run-a", "run-b")},
    )
    assert "sample times" not in both
