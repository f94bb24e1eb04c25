"""A bot that adopts a job another bot created records the commit the job really runs."""

from __future__ import annotations

import copy
from typing import Any

from test_backends_kubernetes import FAST, NS, documents, request_for

from tuneplane.backends.base import BackendRef
from tuneplane.backends.kubernetes.backend import KubernetesBackend
from tuneplane.backends.kubernetes.payload import KubernetesObjects

pytest_plugins = ("fakekube",)

CREATOR = "a" * 40


def _annotated(request: Any, commit: str) -> Any:
    manifests = copy.deepcopy(documents(request))
    manifests[0]["metadata"].setdefault("annotations", {}).update(
        {"tuneplane.dev/commit": commit, "tuneplane.dev/jobspec-digest": "sha256:" + "1" * 64}
    )
    return request.replace(payload=KubernetesObjects(manifests))


def test_the_ref_carries_the_commit_of_the_object_that_exists(fake_kube: Any, kube_client: Any) -> None:
    first = KubernetesBackend(NS, api_client=kube_client, retry=FAST).submit(_annotated(request_for("Job"), CREATOR))
    second = KubernetesBackend(NS, api_client=fake_kube.api_client(), retry=FAST).submit(
        _annotated(request_for("Job"), "b" * 40)
    )
    assert first.commit == CREATOR and second.commit == CREATOR  # adopted, not re-applied
    assert fake_kube.creations[("Job", NS, "sft-demo-r1")] == 1


def test_status_of_an_adopted_job_names_the_creators_commit(tmp_path: Any) -> None:
    from support.render import make_lab

    from tuneplane.models.run import RunRequest
    from tuneplane.runs.prepare import prepare
    from tuneplane.runs.status import submitted_status

    lab = make_lab(tmp_path / "lab", {"img": "pytorch/image-classification"})
    request = RunRequest(experiment="img", run_id="20260101-000000-abcdef", profile="h200:8")
    run = prepare(lab, request, commit="b" * 40, dirty=False)
    ours = BackendRef("kubernetes", "Job", run.spec.metadata.name, NS, "uid", commit="b" * 40)
    theirs = ours.replace(commit=CREATOR, jobspec_digest="sha256:" + "1" * 64)
    assert submitted_status(request, run.spec, ours, "2026-01-01T00:00:00Z").provenance.commit == "b" * 40
    adopted = submitted_status(request, run.spec, theirs, "2026-01-01T00:00:00Z")
    assert adopted.provenance.commit == CREATOR
    assert adopted.provenance.jobspec_digest == "sha256:" + "1" * 64
    assert "adopted" in adopted.message and CREATOR[:12] in adopted.message
