"""The REST side of the Kubernetes backend: the API client, one retry loop, and messages a person can act on.

Every request goes through `Rest.call` (bounded attempts, capped and jittered exponential backoff,
Retry-After honoured), and every failure becomes a `BackendError` that names the object, the API path,
what the server said and what to check. Secret values never reach a message or a log line. The
`kubernetes` package is imported inside functions only: `tp --help` and `tp validate` never pay for it.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

from tuneplane.backends.base import BackendError
from tuneplane.runtime.records import FrozenRecord

log = logging.getLogger("tuneplane.backends.kubernetes")

FIELD_MANAGER = "tuneplane"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"  # said explicitly: the generated client sends a create with no Content-Type
STRICT = "Strict"  # fieldValidation: an older CRD that does not know a field refuses it instead of dropping it
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
MESSAGE_LIMIT = 4000
RBAC_COMMAND = "tp cluster rbac"  # prints the bot's Role (rbac.py) for a lab
RBAC_FILE = "cluster/bot-rbac.yaml"  # where `tp init --backend kubernetes` writes it

T = TypeVar("T")
Items = list[dict[str, Any]]  # named here: inside Rest, `list` is its method


class ApiRetry(FrozenRecord):
    """How hard the client tries one API request (a run's retries are `models.base.RetryPolicy`): bounded
    attempts, capped and jittered exponential backoff, a per-request timeout.

    Defaults suit a CI bot talking to a busy API server; tests shrink `backoff_base` and `timeout`.
    """

    attempts: int = 5
    backoff_base: float = 0.5  # seconds before the first retry (before jitter)
    backoff_cap: float = 10.0
    timeout: float = 30.0  # seconds for one request, connect and read together
    max_retry_after: float = 60.0  # a server asking for longer is still retried, after this long

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Equal jitter: half the capped exponential step, plus up to as much again at random."""
        step = min(self.backoff_cap, self.backoff_base * (2**attempt))
        jittered = step / 2 + rng.uniform(0, step / 2)
        if retry_after is None:
            return float(jittered)
        return float(max(min(retry_after, self.max_retry_after), jittered))


DEFAULT_RETRY = ApiRetry()  # frozen: one shared default is safe


class Kind(FrozenRecord):
    """A resource type we talk to: how to name it in messages and reach it over REST."""

    api_version: str
    kind: str
    plural: str
    job: bool = False  # a job object: what a run is, and the owner of its Secret
    core: bool = False  # reached through the typed clients rather than CustomObjectsApi

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        root = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        parts = [root, "namespaces", namespace, self.plural, name, sub]
        return "/".join(p for p in parts if p)


JOB = Kind("batch/v1", "Job", "jobs", job=True, core=True)
JOBSET = Kind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", job=True)
RAYJOB = Kind("ray.io/v1", "RayJob", "rayjobs", job=True)
SECRET = Kind("v1", "Secret", "secrets", core=True)
CONFIGMAP = Kind("v1", "ConfigMap", "configmaps", core=True)
POD = Kind("v1", "Pod", "pods", core=True)
EVENT = Kind("v1", "Event", "events", core=True)
# Kueue >= 0.15 stores v1beta2 and serves v1beta1 deprecated (a warning on every request); older ones serve
# v1beta1 only. The newest first; kueue.py falls back on a 404 and remembers what the server answered.
WORKLOADS = (
    Kind("kueue.x-k8s.io/v1beta2", "Workload", "workloads"),
    Kind("kueue.x-k8s.io/v1beta1", "Workload", "workloads"),
)
LOCALQUEUES = {
    "kueue.x-k8s.io/v1beta2": Kind("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues"),
    "kueue.x-k8s.io/v1beta1": Kind("kueue.x-k8s.io/v1beta1", "LocalQueue", "localqueues"),
}
SUBMITTABLE = {(k.api_version, k.kind): k for k in (JOB, JOBSET, RAYJOB, CONFIGMAP)}
JOB_KINDS = {k.kind: k for k in (JOB, JOBSET, RAYJOB)}
_TYPED = {
    "Job": ("batch", "job"),
    "Secret": ("core", "secret"),
    "ConfigMap": ("core", "config_map"),
    "Pod": ("core", "pod"),
    "Event": ("core", "event"),
}


def build_api_client(kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False) -> Any:
    """An ApiClient from a kubeconfig (default discovery when None) or the pod's service account.

    urllib3's own retries are switched off: our ApiRetry is the one place that decides.
    """
    # lazy: the kubernetes client is a heavy import; only cluster calls pay it
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
    except (ConfigException, OSError) as exc:
        raise BackendError(_config_message(kubeconfig, context, in_cluster, exc)) from exc
    cfg.retries = False
    return client.ApiClient(cfg)


def _config_message(kubeconfig: str | None, context: str | None, in_cluster: bool, exc: Exception) -> str:
    if in_cluster:
        return (
            f"could not load the in-cluster Kubernetes configuration: {exc}. "
            "This only works inside a pod with a service account; elsewhere pass a kubeconfig."
        )
    where = kubeconfig or "the default kubeconfig ($KUBECONFIG or ~/.kube/config)"
    ctx = f" (context {context!r})" if context else ""
    return f"could not load {where}{ctx}: {exc}. Check the file exists and names the context you want."


class _Op(FrozenRecord):
    """One API request, described for messages (never with a body)."""

    action: str  # "apply", "read", "list", "delete", "patch", "read logs of"
    what: str  # "JobSet team-a/exp-1"
    method: str
    path: str
    kind: Kind


class _Failure(FrozenRecord):
    kind: str  # "http" | "timeout" | "connection"
    status: int = 0
    detail: str = ""
    reason: str = ""  # the Status reason, e.g. "AlreadyExists"
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind != "http" or self.status in RETRYABLE_STATUS


class Conflict(Exception):
    """A 409: the object exists already (create) or someone changed it (update)."""

    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


class Rest:
    """The REST verbs the backend uses, on raw JSON (plain dicts, never the client's models)."""

    def __init__(self, api_client: Any, retry: ApiRetry, sleep: Callable[[float], None], rng: random.Random) -> None:
        # lazy: the CLI's fast paths never load the client
        from kubernetes import client

        self.client = api_client
        self.retry = retry
        self._sleep = sleep
        self._rng = rng
        self.served: dict[str, Kind] = {}  # the version of a kind this server answered for, by kind
        self._server_time: float | None = None  # the Date header of the server's last answer
        self._apis: dict[str, Any] = {
            "core": client.CoreV1Api(api_client),
            "batch": client.BatchV1Api(api_client),
            "custom": client.CustomObjectsApi(api_client),
        }

    def get(self, kind: Kind, ns: str, name: str, redact: Iterable[str] = ()) -> dict[str, Any] | None:
        op = _Op("read", f"{kind.kind} {ns}/{name}", "GET", kind.path(ns, name), kind)
        if kind.core:
            fn = self._typed("read", kind)
            return self.json(op, lambda: fn(name, ns, **self._opts()), missing_ok=True, redact=redact)
        args = (kind.group, kind.version, ns, kind.plural, name)
        custom = self._apis["custom"]
        return self.json(
            op, lambda: custom.get_namespaced_custom_object(*args, **self._opts()), missing_ok=True, redact=redact
        )

    def list(
        self, kind: Kind, ns: str, selector: str | None, missing_ok: bool = False, fields: str | None = None
    ) -> list[dict[str, Any]]:
        return self.list_if_served(kind, ns, selector, missing_ok, fields) or []

    def list_if_served(
        self, kind: Kind, ns: str, selector: str | None, missing_ok: bool = True, fields: str | None = None
    ) -> Items | None:
        """A list (by labels, and by `fields`: a field selector the server indexes for the kind), or None on
        a 404 (with `missing_ok`): the server does not serve this kind at this version."""
        what = f"{kind.plural} in namespace {ns}" + (f" with labels {selector}" if selector else "")
        what += f" with fields {fields}" if fields else ""
        op = _Op("list", what, "GET", kind.path(ns), kind)
        opts = self._opts(
            **({"label_selector": selector} if selector else {}), **({"field_selector": fields} if fields else {})
        )
        if kind.core:
            fn = self._typed("list", kind)
            result = self.json(op, lambda: fn(ns, **opts), missing_ok=missing_ok)
        else:
            args = (kind.group, kind.version, ns, kind.plural)
            custom = self._apis["custom"]
            result = self.json(op, lambda: custom.list_namespaced_custom_object(*args, **opts), missing_ok=missing_ok)
        return None if result is None else list(result.get("items") or [])

    def create(self, kind: Kind, ns: str, manifest: dict[str, Any], redact: Iterable[str]) -> dict[str, Any]:
        """POST, refusing fields the server does not know (`fieldValidation=Strict`); 409 → `Conflict`."""
        name = manifest["metadata"]["name"]
        op = _Op("create", f"{kind.kind} {ns}/{name}", "POST", kind.path(ns), kind)
        opts = self._opts(field_manager=FIELD_MANAGER, field_validation=STRICT, _headers={"Content-Type": JSON})
        if not kind.group:
            raise AssertionError(f"create is only used for job objects, not {kind.kind}")  # pragma: no cover
        # Through the generic path for every kind (batch/v1 too): the typed client would re-validate the body
        # with its own models, which refuse what the server accepts (an integer GPU quantity).
        args = (kind.group, kind.version, ns, kind.plural, manifest)
        custom = self._apis["custom"]
        result = self.json(
            op, lambda: custom.create_namespaced_custom_object(*args, **opts), conflict=True, redact=redact
        )
        return cast(dict[str, Any], result)

    def apply(self, kind: Kind, ns: str, manifest: dict[str, Any], redact: Iterable[str]) -> dict[str, Any]:
        """Server-side apply of an object only tuneplane writes (forced, strict field validation)."""
        name = manifest["metadata"]["name"]
        op = _Op("apply", f"{kind.kind} {ns}/{name}", "PATCH", kind.path(ns, name), kind)
        opts = self._opts(field_manager=FIELD_MANAGER, force=True, field_validation=STRICT, _content_type=APPLY_PATCH)
        if kind.core:
            fn = self._typed("patch", kind)
            result = self.json(op, lambda: fn(name, ns, manifest, **opts), redact=redact)
        else:
            args = (kind.group, kind.version, ns, kind.plural, name, manifest)
            custom = self._apis["custom"]
            result = self.json(op, lambda: custom.patch_namespaced_custom_object(*args, **opts), redact=redact)
        return cast(dict[str, Any], result)

    def merge(self, kind: Kind, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        op = _Op("patch", f"{kind.kind} {ns}/{name}", "PATCH", kind.path(ns, name), kind)
        opts = self._opts(_content_type=MERGE_PATCH, field_manager=FIELD_MANAGER)
        if kind.core:
            fn = self._typed("patch", kind)
            return self.json(op, lambda: fn(name, ns, patch, **opts), missing_ok=True)
        args = (kind.group, kind.version, ns, kind.plural, name, patch)
        custom = self._apis["custom"]
        return self.json(op, lambda: custom.patch_namespaced_custom_object(*args, **opts), missing_ok=True)

    def delete(self, kind: Kind, ns: str, name: str, propagation_policy: str) -> None:
        op = _Op("delete", f"{kind.kind} {ns}/{name}", "DELETE", kind.path(ns, name), kind)
        opts = self._opts(propagation_policy=propagation_policy)
        if kind.core:
            fn = self._typed("delete", kind)
            self.json(op, lambda: fn(name, ns, **opts), missing_ok=True)
            return
        args = (kind.group, kind.version, ns, kind.plural, name)
        custom = self._apis["custom"]
        self.json(op, lambda: custom.delete_namespaced_custom_object(*args, **opts), missing_ok=True)

    def pod_log(self, ns: str, pod: str, container: str, tail: int | None, follow: bool, read: bool) -> Any:
        """Open a log stream, or (`read`) read it whole inside the retry loop, so a slow body is retried."""
        op = _Op("read logs of", f"container {container!r} in pod {ns}/{pod}", "GET", POD.path(ns, pod, "log"), POD)
        kwargs: dict[str, Any] = {"container": container, "follow": follow, "_preload_content": False}
        if tail is not None:
            kwargs["tail_lines"] = tail
        if not follow:  # a followed stream lives as long as the container does
            kwargs["_request_timeout"] = self.retry.timeout
        core = self._apis["core"]

        def request() -> Any:
            response = core.read_namespaced_pod_log(pod, ns, **kwargs)
            return read_body(response) if read else response

        return self.call(op, request)

    def openapi(self, kind: Kind) -> dict[str, Any] | None:
        """The server's OpenAPI v3 document of the kind's group version, None where it is not served."""
        path = f"/openapi/v3/apis/{kind.api_version}"
        op = _Op("read the API schema of", f"{kind.api_version} ({kind.kind})", "GET", path, kind)

        def request() -> Any:
            headers, auth = {"Accept": JSON}, ["BearerToken"]
            if hasattr(self.client, "param_serialize"):  # clients generated by openapi-generator 7
                param = self.client.param_serialize("GET", path, header_params=headers, auth_settings=auth)
                return self.client._call_with_legacy_options(param, {}, None, False, self.retry.timeout, True)
            return self.client.call_api(
                path, "GET", header_params=headers, auth_settings=auth, _return_http_data_only=True, **self._opts()
            )

        return self.json(op, request, missing_ok=True)

    def _typed(self, verb: str, kind: Kind) -> Callable[..., Any]:
        api, snake = _TYPED[kind.kind]
        return getattr(self._apis[api], f"{verb}_namespaced_{snake}")  # type: ignore[no-any-return]

    def _opts(self, **extra: Any) -> dict[str, Any]:
        """Raw responses (we read plain JSON, not models) and a bounded wait for each request."""
        return {"_preload_content": False, "_request_timeout": self.retry.timeout, **extra}

    def json(
        self,
        op: _Op,
        fn: Callable[[], Any],
        missing_ok: bool = False,
        conflict: bool = False,
        redact: Iterable[str] = (),
    ) -> dict[str, Any] | None:
        data = self.call(op, lambda: self._body(fn()), missing_ok=missing_ok, conflict=conflict, redact=redact)
        if data is None:
            return None
        try:
            return dict(json.loads(data or b"{}"))
        except (ValueError, TypeError) as exc:
            raise BackendError(
                f"could not {op.action} {op.what}: the API server answered with no JSON ({exc})"
            ) from exc

    def _body(self, response: Any) -> bytes:
        when = _date_header(response)
        if when is not None:
            self._server_time = when
        return read_body(response)

    def now(self) -> float:
        """The API server's time at its last answer (its Date header), else this machine's. How long a
        pod has waited is measured on the clock that stamped it, whatever this machine's clock says."""
        return self._server_time if self._server_time is not None else time.time()

    def call(
        self, op: _Op, fn: Callable[[], T], missing_ok: bool = False, conflict: bool = False, redact: Iterable[str] = ()
    ) -> T | None:
        """Run one request with retries; 404 → None when `missing_ok`; 409 → `Conflict` when `conflict`."""
        attempts = max(1, self.retry.attempts)
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as exc:  # classified here; anything that is not an API failure is re-raised
                failure = classify(exc)
                if failure is None:
                    raise
                if failure.kind == "http" and failure.status == 404 and missing_ok:
                    return None
                if failure.kind == "http" and failure.status == 409 and conflict:
                    raise Conflict(failure) from exc
                if not failure.retryable or attempt + 1 == attempts:
                    raise BackendError(redact_text(self._message(op, failure, attempt + 1), redact)) from exc
            delay = self.retry.delay(attempt, failure.retry_after, self._rng)
            log.info(
                "retrying: %s (attempt %d of %d, in %.2f s)",
                redact_text(f"{op.action} {op.what}: {_describe(failure, self.retry.timeout)}", redact),
                attempt + 2,
                attempts,
                delay,
            )
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _message(self, op: _Op, failure: _Failure, attempts: int) -> str:
        host = getattr(getattr(self.client, "configuration", None), "host", "") or "the API server"
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        return (
            f"could not {op.action} {op.what}: {_describe(failure, self.retry.timeout)} "
            f"({op.method} {op.path} on {host}, {tries}). {_hint(op, failure)}"
        )


# ==================================================================== failure classification
def classify(exc: BaseException) -> _Failure | None:
    """API errors, timeouts and broken connections; None for anything else (a bug, re-raised)."""
    # lazy: loaded with the kubernetes client
    import urllib3.exceptions as u3
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return _http_failure(exc) if exc.status else _Failure("connection", detail=str(exc.reason or exc))
    if isinstance(exc, u3.MaxRetryError) and exc.reason is not None:
        return classify(exc.reason) or _Failure("connection", detail=str(exc.reason))
    if isinstance(exc, u3.NewConnectionError):
        return _Failure("connection", detail=_short(exc))
    if isinstance(exc, u3.TimeoutError | TimeoutError):
        return _Failure("timeout", detail=_short(exc))
    if isinstance(exc, u3.HTTPError | ConnectionError):
        return _Failure("connection", detail=_short(exc))
    return None


def _http_failure(exc: Any) -> _Failure:
    body: Any = {}
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    body = body if isinstance(body, dict) else {}
    status = int(exc.status)
    # A proxy in front of the API server may answer with HTML: keep a short, single-line excerpt.
    message = str(body.get("message") or " ".join(str(exc.body or "").split())[:300] or exc.reason or "")
    headers = exc.headers or {}
    return _Failure(
        "http",
        status=status,
        detail=f"{status} {exc.reason or ''}".strip() + (f": {message}" if message else ""),
        reason=str(body.get("reason") or ""),
        retry_after=_retry_after(headers.get("Retry-After") if hasattr(headers, "get") else None),
    )


def _retry_after(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # the HTTP-date form: fall back to our own backoff


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split(": ", 1)[-1] if "object at 0x" in text else text


def _describe(failure: _Failure, timeout: float) -> str:
    if failure.kind == "timeout":
        return f"no answer within the {timeout:g} s timeout"
    if failure.kind == "connection":
        return f"the connection failed ({failure.detail})"
    return f"the API server answered {failure.detail}"


def _hint(op: _Op, failure: _Failure) -> str:
    ns = op.path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in op.path else ""
    if failure.kind == "timeout":
        return "Check network access to the API server and its load, then retry."
    if failure.kind == "connection":
        return "Check the server address in your kubeconfig and that the cluster is reachable from here."
    status, kind = failure.status, op.kind
    if status == 401:
        return "Check the credentials in your kubeconfig (an expired token?)."
    if status == 403 and "admission webhook" in failure.detail:
        return (
            "An admission webhook of the cluster refused the object (a policy, not your access): "
            "read its message above, change the run or ask the cluster's administrators about the policy."
        )
    if status == 403:
        return _forbidden_hint(op, ns)
    if status == 404 and not kind.core:
        return f"Is the {kind.kind} CRD installed? Check with: kubectl get crd {kind.plural}.{kind.group}."
    if status in {400, 422}:
        return "The server refused the object; compare `tp render` output with the cluster's API versions."
    if status == 429:
        return "The API server is rate-limiting this client; retry later."
    if status >= 500:
        return "Check the API server's health (kubectl get --raw /readyz) and retry."
    return "Check the object and your access, then retry."


REDACTED = "[redacted]"
FRAGMENT = 8  # a secret cut short by a length limit still gives this much of itself away


def _forbidden_hint(op: _Op, ns: str) -> str:
    """RBAC refused: which permission, how to check it, and where the Role the bot needs comes from."""
    verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "POST": "create"}.get(op.method, op.method.lower())
    if op.action == "list":
        verb = "list"
    # a server-side apply that makes the object needs `create` as well as `patch`
    verbs = ["create", "patch"] if op.action == "apply" else [verb]
    resource = op.kind.plural + ("/log" if op.action == "read logs of" else "")
    resource += f".{op.kind.group}" if op.kind.group else ""
    checks = " and ".join(f"kubectl auth can-i {v} {resource} -n {ns}" for v in verbs)
    return (
        f"The identity in your kubeconfig lacks this permission (check: {checks}). `{RBAC_COMMAND}` prints the "
        f"Role, RoleBinding and ServiceAccount the bot needs; an administrator applies them ({RBAC_FILE} in a lab "
        "that tp init made)."
    )


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` without the secret values, also where a length limit (a clipped message, a log tail that
    keeps the end) cut one short at the end or the start of a line."""
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
            if len(value) > FRAGMENT and (value[:FRAGMENT] in text or value[-FRAGMENT:] in text):
                text = _fragments(value).sub(REDACTED, text)
    return text


def _fragments(value: str) -> re.Pattern[str]:
    sizes = range(len(value) - 1, FRAGMENT - 1, -1)  # longest first
    heads = "|".join(re.escape(value[:n]) for n in sizes)
    tails = "|".join(re.escape(value[-n:]) for n in sizes)
    return re.compile(f"(?:{heads})$|^(?:{tails})", re.MULTILINE)


def clip(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 20] + "\n… (truncated)"


def _date_header(response: Any) -> float | None:
    headers: Any = getattr(response, "headers", None)
    value = headers.get("Date") if hasattr(headers, "get") else None
    try:
        return email.utils.parsedate_to_datetime(str(value)).timestamp() if value else None
    except (TypeError, ValueError):
        return None


def read_body(response: Any) -> bytes:
    """The whole body of a raw response, and the connection back to the pool."""
    try:
        return bytes(response.data or b"")
    finally:
        response.release_conn()


def stream_lines(response: Any, what: str) -> Iterator[str]:
    """Decode a log response line by line as it arrives; a broken stream ends with a clear error."""
    # lazy: loaded with the kubernetes client
    import urllib3.exceptions as u3

    pending = b""
    try:
        for chunk in response.stream(4096, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    except (u3.HTTPError, OSError) as exc:
        raise BackendError(f"the log stream of {what} broke off: {_short(exc)}; run the command again") from exc
    finally:
        response.release_conn()
