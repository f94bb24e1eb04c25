"""The metric vocabulary (tuneplane.metrics.vocab) and the charts (tuneplane.views.charts).

Charts are parsed back as XML and asserted on what a reader sees: panel titles in order, tick labels,
the legend, a constant shown as a value, hardware on a wall-time axis.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from tuneplane.metrics.vocab import Vocabulary
from tuneplane.views.charts import render_compare_svg, render_svg, render_table
from tuneplane.views.charts_axes import nice_ticks, tick_labels
from tuneplane.views.charts_legend import changed_parameters

NS = "{http://www.w3.org/2000/svg}"
SFT = Vocabulary.of(
    {
        "loss": "train/loss",
        "eval_loss": "validation/loss",
        "validation/eval_loss": "validation/loss",
        "mean_token_accuracy": "train/token_accuracy",
        "learning_rate": "train/lr",
    },
    ["train/loss", "validation/loss", "train/token_accuracy", "train/grad_norm", "train/lr"],
)


def _texts(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{NS}text")]


def _titles(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{NS}text") if t.get("font-weight") == "bold"]


# ── vocabulary ───────────────────────────────────────────────────────────────────────────────────


def test_trl_keys_take_the_recipes_canonical_names() -> None:
    assert [SFT.canonical(k) for k in ("loss", "eval_loss", "mean_token_accuracy", "learning_rate")] == [
        "train/loss",
        "validation/loss",
        "train/token_accuracy",
        "train/lr",
    ]


def test_without_aliases_the_hf_convention_names_keys() -> None:
    plain = Vocabulary()
    assert plain.canonical("loss") == "train/loss"
    assert plain.canonical("eval_loss") == "validation/loss"
    assert plain.canonical("train_runtime") == "train/runtime"
    assert plain.canonical("test_accuracy") == "eval/accuracy"
    assert plain.canonical("hw/gpu0/util") == "hw/gpu0/util" and plain.canonical("actor/kl") == "actor/kl"


def test_order_is_primary_then_the_rest_then_hardware() -> None:
    keys = [
        "hw/cpu",
        "train/epoch",
        "validation/token_accuracy",
        "train/lr",
        "validation/loss",
        "train/loss",
        "eval/score",
        "train/grad_norm",
    ]
    assert SFT.order(keys) == [
        "train/loss",
        "validation/loss",
        "train/grad_norm",
        "train/lr",
        "train/epoch",
        "validation/token_accuracy",
        "eval/score",
        "hw/cpu",
    ]
    assert Vocabulary().order(["hw/mem", "train/acc", "validation/loss", "train/loss"]) == [
        "train/loss",
        "validation/loss",
        "train/acc",
        "hw/mem",
    ]


def test_two_raw_keys_for_one_name_keep_the_canonical_or_the_fuller_one() -> None:
    assert SFT.pick(["eval_loss", "validation/eval_loss"], {"eval_loss": 5, "validation/eval_loss": 2}) == {
        "validation/loss": "eval_loss"
    }
    assert SFT.pick(["validation/loss", "eval_loss"], {"eval_loss": 9}) == {"validation/loss": "validation/loss"}
    assert SFT.resolve("loss", ["loss"]) == "loss" and SFT.resolve("train/loss", ["loss"]) == "loss"
    assert SFT.raw_keys("validation/loss", ["eval_loss", "validation/eval_loss", "loss"]) == [
        "eval_loss",
        "validation/eval_loss",
    ]


# ── one run ──────────────────────────────────────────────────────────────────────────────────────


def test_panels_follow_the_vocabulary_and_constants_become_one_line() -> None:
    series = {
        "hw/gpu_util": [(s, float(s % 7)) for s in range(30)],
        "train/lr": [(s, 2e-5) for s in range(30)],
        "validation/loss": [(s, 3.0 - s / 20) for s in range(0, 30, 10)],
        "train/loss": [(s, 3.0 - s / 10) for s in range(30)],
        "train/epoch": [(s, s / 30) for s in range(30)],
    }
    svg = render_svg(series, title="run x", vocab=SFT)
    assert _titles(svg) == ["train/loss", "validation/loss", "train/epoch", "hw/gpu_util"]
    assert "train/lr = 2e-05" in _texts(svg)
    assert not any(t.startswith("train/lr") and "=" not in t for t in _titles(svg))


def test_step_ticks_are_whole_numbers_without_duplicates() -> None:
    svg = render_svg(
        {
            "train/loss": [(s, 1.0 / s) for s in range(1, 8)],
            "validation/loss": [(s, 1.0 + s * 1e-7) for s in range(1, 8)],
        },
        vocab=SFT,
    )
    labels = [
        t.get("x") and "".join(t.itertext())
        for t in ET.fromstring(svg).iter(f"{NS}text")
        if t.get("text-anchor") == "middle" and t.get("y") and "font-size" not in t.attrib
    ]
    steps = [x for x in labels if x]
    assert steps and all(re.fullmatch(r"\d+", x) for x in steps), steps
    assert nice_ticks(1, 7, 7, whole=True) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert nice_ticks(1, 7, 6, whole=True) == [2.0, 4.0, 6.0]
    assert nice_ticks(0, 2, 6, whole=True) == [0.0, 1.0, 2.0]  # never half a step
    assert all(t == int(t) for t in nice_ticks(0, 3, 8, whole=True))
    close = nice_ticks(1.0000001, 1.0000007, 4)
    assert len(set(tick_labels(close))) == len(close)  # tiny ranges still get distinct labels


def test_training_panels_share_one_step_axis() -> None:
    svg = render_svg(
        {
            "train/loss": [(s, 1.0 / (s + 1)) for s in range(100)],
            "validation/loss": [(s, 2.0 / (s + 1)) for s in (0, 50, 99)],
        },
        vocab=SFT,
    )
    root = ET.fromstring(svg)
    ends = [p.get("d", "") for p in root.iter(f"{NS}path")]
    assert len(ends) == 2 and all(d.startswith("M64 ") for d in ends)  # both start at step 0, the left edge


def test_hardware_uses_wall_time_when_it_is_known() -> None:
    svg = render_svg(
        {"train/loss": [(s, 1.0 / (s + 1)) for s in range(10)], "hw/cpu": [(s, float(s)) for s in range(10)]},
        vocab=SFT,
        times={"hw/cpu": [(30.0 * s, float(s)) for s in range(10)]},
    )
    texts = _texts(svg)
    assert "hw/cpu (wall time)" in texts and "time since the first sample" in texts
    assert any(re.fullmatch(r"\d+m(\d\ds)?", t) for t in texts), texts


def test_hardware_panels_share_one_wall_clock_from_the_first_sample() -> None:
    from tuneplane.views.charts import wall_times

    start = 1_700_000_000.0
    timed = {
        "hw/cpu": [(s, float(s % 2), start + 10.0 * s) for s in range(30)],  # 0 s .. 290 s
        "hw/gpu": [(s, float(s % 3), start + 150.0 + 10.0 * s) for s in range(15)],  # from 150 s
        "hw/old": [(0, 1.0, None), (1, 2.0, None)],  # a store without times: left to the step axis
        "train/loss": [(s, 1.0, start + s) for s in range(3)],
    }  # not hardware: steps
    times = wall_times(timed)
    assert sorted(times) == ["hw/cpu", "hw/gpu"]
    assert times["hw/cpu"][0] == (0.0, 0.0) and times["hw/gpu"][0] == (150.0, 0.0)
    svg = render_svg({k: [(s, v) for s, v, _ in p] for k, p in timed.items()}, vocab=SFT, times=times)
    root = ET.fromstring(svg)
    paths = [p.get("d", "") for p in root.iter(f"{NS}path")]
    starts = [int(d[1:].split()[0]) for d in paths]
    assert starts[-3] == 64 and starts[-2] > 64 + (760 - 80) // 3  # hw/gpu starts half-way along the axis
    assert starts[-1] == 64  # hw/old: its own step axis


def test_a_committed_chart_stays_small() -> None:
    long = {f"train/m{i}": [(s, (s * 7919 % 101) / 101) for s in range(5000)] for i in range(8)}
    svg = render_svg(long, vocab=SFT, compact=True)
    assert len(_titles(svg)) == 3 and len(svg) < 6000


def test_a_committed_chart_draws_the_trend_evenly_spaced() -> None:
    """Few bytes per point: bucket means at even steps (relative moves repeat), not each bucket's
    first, min and max point, which zigzag at uneven spacing."""
    noisy = {"train/loss": [(s, 2.0 - s / 5000 + (0.3 if s % 2 else -0.3)) for s in range(1, 5001)]}
    path = next(ET.fromstring(render_svg(noisy, vocab=SFT, compact=True)).iter(f"{NS}path")).get("d", "")
    moves = [(int(dx), int(dy)) for dx, dy in re.findall(r"l(-?\d+)[ ]?(-?\d+)", path)]
    assert 20 <= len(moves) < 32
    assert max(dx for dx, _ in moves) - min(dx for dx, _ in moves) <= 1  # evenly spaced
    assert all(dy >= 0 for _, dy in moves)  # the trend falls steadily: the ±0.3 noise is averaged out
    full = next(ET.fromstring(render_svg(noisy, vocab=SFT)).iter(f"{NS}path")).get("d", "")
    assert len(full) > 10 * len(path)  # `tp job metrics --plot` keeps the detail


def test_the_table_follows_the_vocabulary_when_given_one() -> None:
    summary = {
        k: {"last": 1.0, "min": 1.0, "max": 1.0, "count": 1, "last_step": 1}
        for k in ("hw/cpu", "train/lr", "train/loss")
    }
    rows = render_table(summary, vocab=SFT).splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["train/loss", "train/lr", "hw/cpu"]


# ── several runs ─────────────────────────────────────────────────────────────────────────────────


def test_compare_overlays_runs_with_a_legend_of_what_differs() -> None:
    params = {
        "run-a": {"lr": 1e-4, "epochs": 3, "profile": "local"},
        "run-b": {"lr": 3e-4, "epochs": 3, "profile": "local"},
    }
    legend = changed_parameters(params)
    assert legend == {"run-a": "lr=0.0001", "run-b": "lr=0.0003"}
    runs = {
        "run-a": {"train/loss": [(s, 2.0 - s / 10) for s in range(10)]},
        "run-b": {"train/loss": [(s, 1.5 - s / 20) for s in range(10)], "hw/cpu": [(0, 1.0), (1, 2.0)]},
    }
    svg = render_compare_svg(runs, legend=legend, vocab=SFT)
    root = ET.fromstring(svg)
    assert _titles(svg) == ["train/loss", "hw/cpu"]
    assert "run-a — lr=0.0001" in _texts(svg) and "run-b — lr=0.0003" in _texts(svg)
    colours = {p.get("stroke") for p in root.iter(f"{NS}path")}
    assert len(colours) == 2  # one colour per run, the same on every panel


def test_keys_rewritten_by_the_hf_callback_land_on_the_same_names() -> None:
    # transformers' spelling (`eval/loss`, `train/loss`) and upstream's `validation/eval_loss` read as one name
    assert [
        SFT.canonical(k)
        for k in ("train/loss", "eval/loss", "train/mean_token_accuracy", "train/learning_rate", "validation/eval_loss")
    ] == ["train/loss", "validation/loss", "train/token_accuracy", "train/lr", "validation/loss"]
    plain = Vocabulary()
    assert plain.canonical("eval/accuracy") == "validation/accuracy"
    assert plain.canonical("test/accuracy") == "eval/accuracy"
    assert plain.canonical("train/grad_norm") == "train/grad_norm"


def test_compare_draws_each_runs_hardware_from_its_own_start() -> None:
    from tuneplane.views.runmetrics import RunMetrics, compare_svg

    def run(start: float, every: float) -> RunMetrics:
        timed = {
            "loss": [(s, 1.0 / (s + 1), start + s) for s in range(5)],
            "hw/gpu_util": [(s, float(s % 2), start + every * s) for s in range(5)],
        }
        summary = {k: {"last": p[-1][1], "min": 0.0, "max": 1.0, "count": 5, "last_step": 4} for k, p in timed.items()}
        return RunMetrics(summary, lambda k: [(s, v) for s, v, _ in timed[k]], SFT, lambda k: timed[k])

    svg = compare_svg(
        {"run-a": run(1_700_000_000.0, 60.0), "run-b": run(1_800_000_000.0, 120.0)},
        {"run-a": {"lr": 1}, "run-b": {"lr": 2}},
    )
    texts = _texts(svg)
    assert "hw/gpu_util (wall time)" in texts
    assert {"0m", "2m", "4m", "6m", "8m"} <= set(texts)  # both from 0 s; run-b's 480 s set the axis (one unit)
    hw_paths = [p.get("d", "") for p in ET.fromstring(svg).iter(f"{NS}path")][-2:]
    assert all(d.startswith("M64 ") for d in hw_paths)


def test_wall_time_ticks_are_round_durations_at_every_span() -> None:
    """The labels the chart draws (`time_labels`: one unit per axis) on round durations."""
    from tuneplane.views.charts_axes import time_labels, time_ticks

    expected = {
        7: ["0s", "2s", "4s", "6s"],
        405: ["0m", "2m", "4m", "6m"],
        30 * 86400: ["0d", "7d", "14d", "21d", "28d"],
        86400 * 3: ["0h", "12h", "24h", "36h", "48h", "60h", "72h"],
    }
    for span, labels in expected.items():
        assert time_labels(time_ticks(0.0, span)) == labels
    for span in (1, 59, 3599, 86399, 86400 * 3, 86400 * 400):
        ticks = time_ticks(0.0, float(span))
        assert 1 <= len(ticks) <= 7 and len(set(time_labels(ticks))) == len(ticks), span


# ── hostile values ───────────────────────────────────────────────────────────────────────────────


def _step_labels(svg: str) -> list[list[str]]:
    """The step tick labels under each panel, panel by panel."""
    panels: list[list[str]] = [[]]
    for t in ET.fromstring(svg).iter(f"{NS}text"):
        text = "".join(t.itertext())
        if text == "step":
            panels.append([])
        elif t.get("text-anchor") == "middle" and "font-size" not in t.attrib:
            panels[-1].append(text)
    return [p for p in panels if p]


def test_huge_step_numbers_get_whole_distinct_ticks() -> None:
    for base in (10**15, 2**53, 2**62):
        svg = render_svg({"train/loss": [(base + 10 * i, 1.0 / (i + 1)) for i in range(11)]})
        (labels,) = _step_labels(svg)
        assert len(labels) >= 3 and len(set(labels)) == len(labels), (base, labels)
        assert all(re.fullmatch(r"\d+", x) and base <= int(x) <= base + 100 for x in labels), (base, labels)
        ticks = nice_ticks(base, base + 100, 6, whole=True)
        assert len(set(ticks)) == len(ticks) >= 3 and all(t == int(t) for t in ticks), (base, ticks)


def test_tiny_values_are_drawn_not_called_constant() -> None:
    for scale in (1e-8, 1e-14, 1e-30):
        values = [(s, scale * (1 + s)) for s in range(5)]  # a learning-rate warm-up at any scale
        texts = _texts(render_svg({"train/lr": values}))
        assert "train/lr" in texts and not [t for t in texts if t.startswith("train/lr =")], (scale, texts)
        ticks = nice_ticks(scale, 5 * scale, 5)
        assert len(set(ticks)) == len(ticks) >= 3 and scale * 0.99 <= ticks[0] and ticks[-1] <= 5.01 * scale
        labels = tick_labels(ticks)
        assert len(set(labels)) == len(labels), labels
    assert "train/lr = 1e-14" in _texts(render_svg({"train/lr": [(s, 1e-14) for s in range(5)]}))


def test_negative_values_and_a_single_point() -> None:
    svg = render_svg({"train/reward": [(s, -5.0 + s) for s in range(4)], "validation/loss": [(3, 0.25)]})
    texts = _texts(svg)
    assert "train/reward" in texts and "-5" in texts
    assert "validation/loss = 0.25" in texts


def test_names_with_markup_and_control_characters_make_well_formed_svg() -> None:
    keys = ["loss<&>\"'", "a\x00b", "c\x1b[31md", "e\ud800f", "g\ufffeh"]
    svg = render_compare_svg(
        {"run<1>": {k: [(0, 1.0), (1, 2.0)] for k in keys}, "run&2": {keys[0]: [(0, 3.0)]}},
        legend={"run<1>": "lr=<1e-3>", "run&2": "x=\x07"},
        title="t<i>t\x01le",
    )
    svg.encode("utf-8")  # writable as UTF-8 (no lone surrogate)
    texts = _texts(svg)  # parses as XML
    assert "loss<&>\"'" in texts and "t<i>t\ufffdle" in texts
    assert any(t.startswith("run<1>") and "lr=<1e-3>" in t for t in texts)


# ── every framework's validation spelling ───────────────────────────────────────────────────────


def test_each_frameworks_validation_keys_reach_validation_names() -> None:
    from tuneplane.views.runmetrics import vocabulary_of

    cases = {
        # NeMo-RL's SFT logs its validation metrics as `val_loss` under the `validation` prefix
        "nemo-rl/sft": (
            ["train/loss", "validation/val_loss", "train/lr", "timing/train/total_step_time"],
            ["train/loss", "validation/loss", "train/lr"],
        ),
        # Keras-style names in a custom script
        "custom/custom": (["loss", "val_loss", "val_accuracy", "hw/cpu_util"], ["train/loss", "validation/loss"]),
        # TRL DPO: evaluation keys with a slash take the training name's alias
        "trl/dpo": (
            ["loss", "eval_loss", "rewards/margins", "eval_rewards/margins", "eval/rewards/chosen"],
            ["train/loss", "validation/loss", "train/reward_margin"],
        ),
        "verl/sft": (["train/loss", "val/loss"], ["train/loss", "validation/loss"]),
    }
    for method, (raw, first) in cases.items():
        names = vocabulary_of(method).pick(raw)
        assert list(names)[: len(first)] == first, (method, names)
    custom = vocabulary_of("custom/custom").pick(["loss", "val_loss", "val_accuracy", "hw/cpu_util"])
    assert custom == {
        "train/loss": "loss",
        "validation/loss": "val_loss",
        "validation/accuracy": "val_accuracy",
        "hw/cpu_util": "hw/cpu_util",
    }
    dpo = vocabulary_of("trl/dpo")
    assert dpo.canonical("eval_rewards/margins") == "validation/reward_margin"
    assert dpo.canonical("eval/rewards/chosen") == "validation/reward_chosen"
    assert dpo.resolve("eval_rewards/margins", ["eval_rewards/margins"]) == "eval_rewards/margins"  # raw stays


def test_many_runs_overlaid_stay_distinguishable_and_named() -> None:
    runs = {f"run-{n:02d}": {"train/loss": [(s, (n + 1) / (s + 1)) for s in range(5)]} for n in range(20)}
    legend = changed_parameters({run: {"lr": n * 1e-4, "seed": 1} for n, run in enumerate(runs)})
    root = ET.fromstring(render_compare_svg(runs, legend=legend))
    looks = [(p.get("stroke"), p.get("stroke-dasharray")) for p in root.iter(f"{NS}path")]
    assert len(looks) == 20 and len(set(looks)) == 20, looks
    swatches = [
        (s.get("stroke"), s.get("stroke-dasharray")) for s in root.iter(f"{NS}line") if s.get("stroke-width") == "3"
    ]
    assert swatches == looks  # the legend shows each run's own line
    texts = _texts(ET.tostring(root, encoding="unicode"))
    assert "run-19 — lr=0.0019" in texts and not [t for t in texts if "seed" in t]


def test_values_at_the_ends_of_the_float_range_make_a_chart_not_a_crash() -> None:
    """A diverging run logs what it logs: a span past the float range, denormals, inf and NaN mixed
    with finite values. The bot charts every finished run, so none of it may raise."""
    biggest = 1.7976931348623157e308
    for series in (
        [(1, 1e308), (2, -1e308)],
        [(1, biggest), (2, -biggest), (3, 0.0)],
        [(1, 5e-324), (2, -5e-324)],
        [(1, float("nan")), (2, float("inf")), (3, 0.5), (4, -biggest)],
        [(2**62, biggest), (0, 1.0)],
    ):
        for compact in (True, False):
            svg = render_svg(
                {"train/loss": series, "hw/gpu_util": series}, title="t", vocab=Vocabulary(), compact=compact
            )
            root = ET.fromstring(svg)  # well-formed, and every coordinate a number
            coords = [v for el in root.iter() for k, v in el.attrib.items() if k in ("x", "y", "x1", "y1", "x2", "y2")]
            assert coords and all(math.isfinite(float(v)) for v in coords), coords
    assert nice_ticks(-biggest, biggest) and all(math.isfinite(t) for t in nice_ticks(-biggest, biggest))
    table = render_table(
        {"train/loss": {"last": 0.0, "min": -biggest, "max": biggest, "count": 3}},
        {"train/loss": [(1, biggest), (2, -biggest), (3, 0.0)]},
    )
    assert "█▁▅" in table


def test_an_emphasised_run_is_drawn_thicker_and_on_top_and_the_x_axis_can_be_named() -> None:
    runs = {
        "lr=1e-05": {"train/loss": [(0.0, 2.0), (50.0, 1.2), (100.0, 0.9)]},
        "lr=3e-05": {"train/loss": [(0.0, 2.0), (100.0, 0.4)]},
        "lr=1e-04": {"train/loss": [(0.0, 2.0), (100.0, 1.5)]},
    }
    plain = ET.fromstring(render_compare_svg(runs))
    assert {p.get("stroke-width") for p in plain.iter(f"{NS}path")} == {"1.5"}
    assert "step" in _texts(ET.tostring(plain, encoding="unicode"))
    svg = render_compare_svg(runs, bold=["lr=3e-05"], x_caption="% of the run")
    root = ET.fromstring(svg)
    paths = list(root.iter(f"{NS}path"))
    assert [p.get("stroke-width") for p in paths] == ["1.5", "1.5", "3"]  # the emphasised one last: on top
    swatches = [s.get("stroke") for s in root.iter(f"{NS}line") if s.get("stroke-width") == "3"]
    assert paths[-1].get("stroke") == swatches[1]  # still the colour its legend line shows
    assert "% of the run" in _texts(svg) and "step" not in _texts(svg)
