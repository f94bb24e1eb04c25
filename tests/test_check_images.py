"""Image references, the registry allowlist and the digest policy (CONTRACT §8)."""

from __future__ import annotations

import pytest

from tuneplane.check.images import (
    ALLOWLIST_ENV,
    LEGACY_ALLOWLIST_ENV,
    ImageError,
    allowed_registries,
    allowlist_variable,
    check_allowed,
    check_digest_policy,
    parse_image,
)

DIGEST = "sha256:" + "0123456789abcdef" * 4
ALLOWED = ["registry.example.com"]


@pytest.mark.parametrize(
    "text,host,repository,tag,digest",
    [
        ("python", "docker.io", "python", "", ""),
        ("python:3.12-slim", "docker.io", "python", "3.12-slim", ""),
        ("library/python:3.12", "docker.io", "library/python", "3.12", ""),
        ("team/trainer", "docker.io", "team/trainer", "", ""),
        ("localhost/trainer", "localhost", "trainer", "", ""),
        ("localhost:5000/a/b:1", "localhost:5000", "a/b", "1", ""),
        ("registry.example.com/team/trainer:1.0", "registry.example.com", "team/trainer", "1.0", ""),
        (f"registry.example.com/team/trainer:1.0@{DIGEST}", "registry.example.com", "team/trainer", "1.0", DIGEST),
        (f"registry.example.com/trainer@{DIGEST}", "registry.example.com", "trainer", "", DIGEST),
        ("registry.example.com:443/x", "registry.example.com:443", "x", "", ""),
        ("ghcr.io/org/repo/sub:v1.2.3_rc", "ghcr.io", "org/repo/sub", "v1.2.3_rc", ""),
    ],
)
def test_parse_splits_host_repository_tag_digest(text: str, host: str, repository: str, tag: str, digest: str) -> None:
    ref = parse_image(text)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (host, repository, tag, digest)


@pytest.mark.parametrize(
    "text,says",
    [
        ("registry.example.com@evil.io/x", "not a valid image reference"),
        ("REGISTRY.EXAMPLE.COM/x", "lower case"),
        ("registry.example.com/Team/x", "not a valid image reference"),
        ("registry.example.com/x@sha256:abc", "malformed digest"),
        ("registry.example.com/x@sha256:" + "A" * 64, "malformed digest"),
        ("registry.example.com/x@md5:" + "a" * 32, "malformed digest"),
        ("", "not a valid image reference"),
        ("registry.example.com/x:tag with space", "not a valid image reference"),
        ("https://registry.example.com/x", "not a valid image reference"),
        ("registry.example.com//x", "not a valid image reference"),
        ("registry.example.com/x\n", "not a valid image reference"),
    ],
)
def test_parse_refuses_malformed_references(text: str, says: str) -> None:
    with pytest.raises(ImageError) as info:
        parse_image(text)
    assert says in str(info.value)
    assert info.value.hint


@pytest.mark.parametrize(
    "text",
    [
        "registry.example.com.evil.io/x",
        "evil.io/registry.example.com/x",
        "registry.example.com:5000/x",
        "registry.example.co/x",
        "xregistry.example.com/x",
        "python:3.12",
        "registry/x",  # no dot: the first part is a Docker Hub namespace, not a host
    ],
)
def test_allowlist_compares_hosts_exactly(text: str) -> None:
    ref = parse_image(text)
    with pytest.raises(ImageError) as info:
        check_allowed(ref, ALLOWED)
    assert repr(ref.host) in str(info.value)
    assert "administrator" in info.value.hint and ref.host in info.value.hint


def test_allowlist_admits_the_exact_host() -> None:
    check_allowed(parse_image(f"registry.example.com/team/x:1@{DIGEST}"), ALLOWED)


def test_no_allowlist_allows_any_registry() -> None:
    check_allowed(parse_image("evil.io/x"), None)


def test_empty_allowlist_refuses_every_custom_image() -> None:
    with pytest.raises(ImageError) as info:
        check_allowed(parse_image("registry.example.com/x"), [])
    assert "empty" in str(info.value)
    assert "administrator" in info.value.hint


@pytest.mark.parametrize(
    "env,lab,expected",
    [
        ({}, None, None),
        ({}, ["a.io"], ["a.io"]),
        ({ALLOWLIST_ENV: "b.io, c.io:5000 ,"}, ["a.io"], ["b.io", "c.io:5000"]),
        ({ALLOWLIST_ENV: ""}, None, []),
        ({ALLOWLIST_ENV: " , "}, ["a.io"], []),
    ],
)
def test_environment_allowlist_wins_over_the_lab(
    env: dict[str, str], lab: list[str] | None, expected: list[str] | None
) -> None:
    assert allowed_registries(env, lab) == expected


@pytest.mark.parametrize(
    "env,lab,expected",
    [
        ({LEGACY_ALLOWLIST_ENV: ""}, None, []),  # set but empty: StarForge refused every custom image
        ({LEGACY_ALLOWLIST_ENV: ""}, ["a.io"], []),
        ({LEGACY_ALLOWLIST_ENV: "b.io, c.io"}, ["a.io"], ["b.io", "c.io"]),
        ({LEGACY_ALLOWLIST_ENV: "", ALLOWLIST_ENV: "d.io"}, None, ["d.io"]),  # ours wins
        ({LEGACY_ALLOWLIST_ENV: "b.io", ALLOWLIST_ENV: ""}, None, []),
    ],
)
def test_starforge_allowlist_variable_is_honoured(
    env: dict[str, str], lab: list[str] | None, expected: list[str] | None
) -> None:
    assert allowed_registries(env, lab) == expected


def test_refusal_names_the_variable_in_force() -> None:
    env = {LEGACY_ALLOWLIST_ENV: ""}
    with pytest.raises(ImageError) as info:
        check_allowed(parse_image("registry.example.com/x:1"), allowed_registries(env, None), allowlist_variable(env))
    assert "is empty, so no custom image is accepted" in str(info.value)
    assert f"add 'registry.example.com' to {LEGACY_ALLOWLIST_ENV}" in info.value.hint
    assert allowlist_variable({}) == allowlist_variable({LEGACY_ALLOWLIST_ENV: "", ALLOWLIST_ENV: ""}) == ALLOWLIST_ENV


def test_digest_policy() -> None:
    check_digest_policy(parse_image("registry.example.com/x:1"), require_digest=False)
    check_digest_policy(parse_image(f"registry.example.com/x@{DIGEST}"), require_digest=True)
    with pytest.raises(ImageError, match="not pinned by digest"):
        check_digest_policy(parse_image("registry.example.com/x:1"), require_digest=True)
