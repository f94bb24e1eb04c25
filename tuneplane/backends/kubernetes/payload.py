"""What the Kubernetes backend is sent for one run: the rendered objects, and the Secrets around them.

`render_objects` renders and checks a run's manifests (what `tp render` shows), `pack` adds what only
the submit knows: the run's token, the Secrets copied from the namespace and the settings naming them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuneplane.backends.base import BackendError, Payload, SubmitRequest
from tuneplane.constants import HF_TOKEN, JOB_TOKEN
from tuneplane.runtime.jsonvalue import JSONObject
from tuneplane.runtime.records import FrozenRecord

if TYPE_CHECKING:
    from tuneplane.lab.load import Lab
    from tuneplane.models.jobspec import JobSpec
    from tuneplane.plan.launchplan import LaunchPlan


class KubernetesObjects(FrozenRecord):
    """The run's manifests, parsed back from the YAML `text` they were rendered as and validated (None
    for objects made otherwise: `tp render` then prints the documents as YAML)."""

    documents: list[JSONObject]
    text: str | None = None

    def shown(self) -> tuple[str | None, list[JSONObject]]:
        return self.text, self.documents


def render_objects(spec: JobSpec, plan: LaunchPlan, lab: Lab) -> KubernetesObjects:
    """The run's objects, rendered and checked now (so a refusal comes before anything is written)."""
    # lazy: Jinja2 and the schemas load only for a run that is rendered
    from tuneplane.render.manifests import render_documents

    text, documents = render_documents(spec, plan, lab.config)
    return KubernetesObjects(documents, text)


def pack(spec: JobSpec, plan: LaunchPlan, lab: Lab, objects: Payload, job_token: str) -> SubmitRequest:
    """The request for the rendered `objects`: the run's token (if it has one) under the name its pods
    read it by, the
    lab's HF token copied from its Secret, and the setting that names each Secret the pods read."""
    copies = {}
    hf_secret = lab.config.cluster.hf_token_secret
    if hf_secret and HF_TOKEN in plan.secret_env:
        copies[plan.secret_env[HF_TOKEN]] = (hf_secret, "token")
    return SubmitRequest(
        run_id=spec.metadata.run_id,
        experiment=spec.metadata.experiment,
        namespace=lab.config.cluster.namespace,
        object_name=spec.metadata.name,
        payload=objects_of(spec.metadata.run_id, objects),
        secret_data={plan.secret_env[JOB_TOKEN]: job_token} if job_token else {},
        secret_copies=copies,
        secret_settings=_secret_settings(lab),
    )


def objects_of(run_id: str, payload: Payload) -> KubernetesObjects:
    """The payload as this backend's own, or a refusal: another backend's payload is no manifest."""
    if not isinstance(payload, KubernetesObjects):
        raise BackendError(
            f"run {run_id}: the Kubernetes backend takes the run's rendered manifests, and was handed "
            f"{type(payload).__name__} (a run packed for another backend); submit it to the backend it was "
            "rendered for"
        )
    return payload


def _secret_settings(lab: Lab) -> dict[str, str]:
    """Which tuneplane.yaml setting names each Secret the pods read, for the backend's refusals."""
    cluster = lab.config.cluster
    named = {name: "cluster.image_pull_secrets" for name in cluster.image_pull_secrets}
    if cluster.hf_token_secret:
        named[cluster.hf_token_secret] = "cluster.hf_token_secret"
    if cluster.repo.credentials_secret:
        named[cluster.repo.credentials_secret] = "cluster.repo.credentials_secret"
    return named
