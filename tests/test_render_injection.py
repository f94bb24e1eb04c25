"""Adversarial values cannot add a key, change a structure or reach a shell unquoted.

Each surface a person (or a lab admin) controls gets every payload. A render either refuses the value
with a UsageError, or produces manifests whose shape (keys, list lengths, scalar types) is exactly the
shape rendered for a plain value, that carry the payload verbatim where it belongs, that an independent
YAML parser reads the same way, and whose only shell scripts are the platform's fixed ones.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from podrunner import kubelet_expand
from pydantic import ValidationError
from support.render import (
    INPUTS,
    OBS_URL,
    env_values,
    main_container,
    make_lab,
    pod_templates,
    request,
    resolve_run,
)

from tuneplane.errors import UsageError
from tuneplane.lab.load import Lab
from tuneplane.plan.adapters import compile_plan
from tuneplane.render.manifests import parse_documents, render_documents
from tuneplane.render.scripts import BOOTSTRAP, CHECKOUT_SCRIPT

PAYLOADS = {
    "newline-key": "a\nevil: injected",
    "colon-space": "x: y",
    "jinja": "{{ 7 * 7 }}{% raw %}",
    "shell-subst": "${HOME} $(id) `id`",
    "shell-meta": "'; rm -rf / #&|<>",
    "quotes": '" quoted \' both \\" \\',
    "yaml-tag": "!!python/object/apply:os.system ['id']",
    "anchor-alias": "&anchor *alias <<: *alias",
    "block-list": "- one\n- two",
    "flow-chars": "}{][,#|>%@",
    "unicode-breaks": "\u2028line\u2029sep\x85end",
    "c1-controls": "del\x7f c1\x9f nul-ish\x01 tab\t",
    "nested-map": "key: value\n  nested: {a: 1}\n---\nkind: Secret",
}
PLAIN = "plain-value"
ACCELERATE_SCRIPT = 'exec accelerate launch --machine_rank "$TUNEPLANE_NODE_RANK" "$@"'


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("inject") / "lab")


Rendered = tuple[str, list[dict[str, Any]]]


def render(lab: Lab, exp: str, profile: str = "h200", **fields: Any) -> Rendered:
    spec = resolve_run(lab, request(exp, profile, **fields))
    return render_documents(spec, compile_plan(spec), lab.config)


def with_settings(lab: Lab, **cluster: Any) -> Lab:
    """The lab with changed settings, in memory (admin-controlled values are inputs too)."""
    settings = lab.config
    if "node_selector" in cluster:
        profiles = dict(settings.profiles)
        profiles["h200"] = profiles["h200"].model_copy(update={"node_selector": cluster.pop("node_selector")})
        settings = settings.model_copy(update={"profiles": profiles})
    if "repo_url" in cluster:
        repo = settings.cluster.repo.model_copy(update={"url": cluster.pop("repo_url")})
        cluster["repo"] = repo
    settings = settings.model_copy(update={"cluster": settings.cluster.model_copy(update=cluster)})
    return lab.replace(settings=settings)


def passed_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's env values as the kubelet passes them on (`$(VAR)` and `$$` expanded)."""
    out: dict[str, str] = {}
    for name, value in env_values(container).items():
        out[name] = kubelet_expand(value, out)
    return out


def jobspec(doc: dict[str, Any]) -> dict[str, Any]:
    template = next(pod_templates(doc))
    return json.loads(passed_env(template["spec"]["initContainers"][0])["TUNEPLANE_JOBSPEC"])  # type: ignore[no-any-return]


def trainer_env(doc: dict[str, Any]) -> dict[str, str]:
    return passed_env(main_container(next(pod_templates(doc))))


# ── the surfaces: (render with a value, where the value must show up) ───────────────────────────────

Surface = tuple[Callable[[Lab, str], Rendered], Callable[[list[dict[str, Any]], str], bool]]

SURFACES: dict[str, Surface] = {
    "set-str-param": (
        lambda lab, v: render(lab, "pytorch-exp", set={"arch": v}),
        lambda docs, v: (
            jobspec(docs[0])["spec"]["hyperparams"]["arch"] == v
            and json.loads(jobspec(docs[0])["launch"]["argv"][-1])["arch"] == v
        ),
    ),
    "set-custom-key": (
        lambda lab, v: render(lab, "custom-exp", set={v: 1}),
        lambda docs, v: jobspec(docs[0])["spec"]["hyperparams"] == {v: 1},
    ),
    "set-custom-value": (
        lambda lab, v: render(lab, "custom-exp", set={"note": v}),
        lambda docs, v: jobspec(docs[0])["spec"]["hyperparams"] == {"note": v},
    ),
    "evalkit-suites-argv": (
        lambda lab, v: render(lab, "evalkit-exp", set={"suites": v}),
        lambda docs, v: _after(jobspec(docs[0])["launch"]["argv"], "--suites") == v,
    ),
    "observability-url": (
        lambda lab, v: render(lab, "custom-exp", observability_url=f"{OBS_URL}/{v}"),
        lambda docs, v: trainer_env(docs[0])["TUNEPLANE_EXTERNAL_OBSERVABILITY_URL"] == f"{OBS_URL}/{v}",
    ),
    "requested-by": (
        lambda lab, v: render(lab, "trl-sft-exp", requested_by=v),
        lambda docs, v: docs[0]["metadata"]["annotations"]["tuneplane.dev/requested-by"] == v,
    ),
    "trl-model-argv": (
        lambda lab, v: render(lab, "trl-sft-exp", "h200:16", inputs=dict(INPUTS, model=v)),
        lambda docs, v: _after(jobspec(docs[0])["launch"]["argv"], "--model") == v,
    ),
    "verl-model-hydra": (
        lambda lab, v: render(lab, "verl-grpo-exp", inputs=dict(INPUTS, model=v)),
        lambda docs, v: json.loads(_override(jobspec(docs[0])["launch"]["argv"], "actor_rollout_ref.model.path")) == v,
    ),
    "eval-data-argv": (
        lambda lab, v: render(lab, "trl-sft-exp", operation="eval", inputs={"checkpoint": "/c", "data": v}),
        lambda docs, v: _after(jobspec(docs[0])["launch"]["argv"], "--data") == v,
    ),
    "image": (
        lambda lab, v: render(lab, "custom-exp", image=f"registry.example.com/team/img:{v}"),
        lambda docs, v: main_container(next(pod_templates(docs[0])))["image"].endswith(v),
    ),
    "experiment-name": (
        lambda lab, v: render(lab, v),
        lambda docs, v: docs[0]["metadata"]["annotations"]["tuneplane.dev/experiment"] == v,
    ),
    "lab-user": (
        lambda lab, v: render(with_settings(lab, user=v), "pytorch-exp"),
        lambda docs, v: _safe_segment(docs[0]["metadata"]["annotations"]["tuneplane.dev/user"]),
    ),
    "lab-node-selector": (
        lambda lab, v: render(with_settings(lab, node_selector={"pool": v}), "pytorch-exp"),
        lambda docs, v: next(pod_templates(docs[0]))["spec"]["nodeSelector"] == {"pool": v},
    ),
    "lab-repo-url": (
        lambda lab, v: render(with_settings(lab, repo_url=f"https://git.example.com/{v}"), "pytorch-exp"),
        lambda docs, v: (
            passed_env(next(pod_templates(docs[0]))["spec"]["initContainers"][0])["TUNEPLANE_REPO_URL"]
            == f"https://git.example.com/{v}"
        ),
    ),
}


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _override(argv: list[str], key: str) -> str:
    return next(a.split("=", 1)[1] for a in argv if a.startswith(key + "="))


def _safe_segment(text: str) -> bool:
    import re

    return bool(re.fullmatch(r"[A-Za-z0-9._-]+", text))


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def scripts(docs: list[dict[str, Any]]) -> Iterator[str]:
    """Every string a shell will run: `sh -c`/`bash -c` bodies in commands and argv, the Ray entrypoint."""
    for doc in docs:
        if doc["kind"] == "RayJob":  # KubeRay writes it into the submitter's command: the kubelet expands it
            yield kubelet_expand(doc["spec"]["entrypoint"], {})
        for template in pod_templates(doc):
            for container in template["spec"]["initContainers"] + template["spec"]["containers"]:
                env = passed_env(container)
                yield from _shell_bodies([kubelet_expand(a, env) for a in container.get("command", [])])
            yield from _shell_bodies(jobspec(doc)["launch"]["argv"])


def _shell_bodies(argv: list[str]) -> Iterator[str]:
    for i, arg in enumerate(argv[:-1]):
        if arg == "-c" and argv[i - 1] in ("sh", "bash"):
            yield argv[i + 1]


CASES = [(surface, payload) for surface in SURFACES for payload in PAYLOADS]
PARAMS = CASES


@pytest.mark.parametrize("surface, payload", PARAMS)
def test_payload_is_refused_or_inert(lab: Lab, surface: str, payload: str) -> None:
    make, placed = SURFACES[surface]
    value = PAYLOADS[payload]
    if surface == "experiment-name":
        base_text, base_docs = render(lab, "pytorch-exp")
    else:
        base_text, base_docs = make(lab, PLAIN)
    try:
        text, docs = make(lab, value)
    except (UsageError, ValidationError):
        return  # refused before anything was rendered: the value never reaches a manifest
    assert shape(docs) == shape(base_docs), "the value changed the manifest's structure"
    assert text.count("\n") == base_text.count("\n"), "the value added lines to the rendered YAML"
    assert placed(docs, value), "the value did not arrive verbatim where it belongs"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert [d for d in yaml.load_all(text, Loader=loader) if d] == docs == parse_documents(text)
    assert "evil" not in json.dumps([list(_keys(d)) for d in docs])
    known = {CHECKOUT_SCRIPT, ACCELERATE_SCRIPT}
    for body in scripts(docs):
        assert body in known or shlex.split(body)[:3] == ["python3", "-c", BOOTSTRAP], body


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield key
            yield from _keys(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _keys(sub)


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 20 and len(SURFACES) >= 10


@pytest.mark.parametrize("payload", ["a\nb", "x: y", "{{ x }}", "a b"])
def test_experiment_names_with_structure_are_refused(lab: Lab, payload: str) -> None:
    with pytest.raises(ValidationError):
        request(payload)


def test_hydra_overrides_refuse_newlines(lab: Lab) -> None:
    with pytest.raises(UsageError, match="control character"):
        render(lab, "verl-grpo-exp", inputs=dict(INPUTS, model="a\nb"))


def test_an_inert_value_really_is_rendered_somewhere(lab: Lab) -> None:
    """Guards the test above: a surface whose value vanished would pass it trivially."""
    accepted = 0
    for surface, payload in CASES:
        make, placed = SURFACES[surface]
        try:
            _, docs = make(lab, PAYLOADS[payload])
        except (UsageError, ValidationError):
            continue
        assert placed(docs, PAYLOADS[payload]), (surface, payload)
        accepted += 1
    assert accepted >= 60
