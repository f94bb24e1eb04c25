"""Image references: exact parsing, the registry allowlist and resolution order (CONTRACT §8). Pure."""

from __future__ import annotations

from tuneplane.runtime.patterns import lazy_pattern
from tuneplane.runtime.records import FrozenRecord

DOCKER_HUB = "docker.io"
ALLOWLIST_ENV = "TUNEPLANE_ALLOWED_IMAGE_REGISTRIES"
# StarForge's name for the same allowlist, same meaning (set but empty refuses every custom image);
# a deployment still setting it keeps its policy. Ours wins when both are set.
LEGACY_ALLOWLIST_ENV = "FORGE_ALLOWED_IMAGE_REGISTRIES"

_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_REF = lazy_pattern(
    rf"^(?P<name>(?:(?P<host>{_HOST})/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>[a-z0-9]+:[a-zA-Z0-9]+))?$"
)
_DIGEST = lazy_pattern(r"^sha256:[0-9a-f]{64}$")


class ImageRef(FrozenRecord):
    __slots__ = ("text", "host", "repository", "tag", "digest")
    _fields = __slots__
    text: str
    host: str
    repository: str
    tag: str
    digest: str

    def __init__(self, text: str, host: str, repository: str, tag: str, digest: str) -> None:
        self._set(text, host, repository, tag, digest)


class ImageError(ValueError):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def parse_image(text: str) -> ImageRef:
    m = _REF().fullmatch(text)
    if not m:
        raise ImageError(
            f"{text!r} is not a valid image reference",
            "write [registry/]repository[:tag][@sha256:<64 hex>], lower-case repository",
        )
    name, digest = m.group("name"), m.group("digest") or ""
    if digest and not _DIGEST().match(digest):
        raise ImageError(
            f"{text!r} has a malformed digest {digest!r}", "a digest is sha256: and 64 lower-case hex digits"
        )
    first, _, rest = name.partition("/")
    is_host = bool(rest) and ("." in first or ":" in first or first == "localhost")
    host, repo = (first, rest) if is_host else (DOCKER_HUB, name)
    if host != host.lower():
        raise ImageError(
            f"{text!r}: registry host {host!r} must be written in lower case",
            f"write {host.lower()!r}; hosts are compared exactly",
        )
    return ImageRef(text, host, repo, m.group("tag") or "", digest)


def allowlist_variable(env: dict[str, str]) -> str:
    """The environment variable whose allowlist is in force (ours unless only StarForge's is set)."""
    return LEGACY_ALLOWLIST_ENV if ALLOWLIST_ENV not in env and LEGACY_ALLOWLIST_ENV in env else ALLOWLIST_ENV


def allowed_registries(env: dict[str, str], lab_allowed: list[str] | None) -> list[str] | None:
    """The allowlist in force: the environment wins over the lab; None allows any registry."""
    variable = allowlist_variable(env)
    if variable in env:
        return [h.strip() for h in env[variable].split(",") if h.strip()]
    return lab_allowed


def check_allowed(ref: ImageRef, allowed: list[str] | None, variable: str = ALLOWLIST_ENV) -> None:
    """Refuse `ref` unless its registry host is on the allowlist; `variable` is the one to name."""
    if allowed is None or ref.host in allowed:
        return
    where = "is empty, so no custom image is accepted" if not allowed else f"allows: {', '.join(allowed)}"
    raise ImageError(
        f"image registry {ref.host!r} is not allowed: the registry allowlist {where}",
        f"ask an administrator to add {ref.host!r} to {variable} (or images.allowed_registries in tuneplane.yaml)",
    )


def check_digest_policy(ref: ImageRef, require_digest: bool) -> None:
    if require_digest and not ref.digest:
        raise ImageError(
            f"image {ref.text!r} is not pinned by digest and this lab requires digests",
            "append @sha256:<digest> (for example from `docker buildx imagetools inspect`)",
        )
