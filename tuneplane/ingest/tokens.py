"""Per-run ingest tokens, derived from a server secret, scoped to an experiment and a run.

A token is derived, not stored, so the bot (which holds the secret) can mint one when it submits a
run and the receiver can check it without a database lookup. A token only opens its own run.

Two experiments may hold runs with the same id, and the wire (upstream's) names only the run: so
a scoped token carries its experiment's tag in the clear and a MAC that binds tag and run id:
`tag (24 hex: SHA-256 of the experiment name) + mac (40 hex: HMAC-SHA256(secret, tag, run))`, 64 hex
characters as upstream's tokens are. The receiver stores the run under `run_key(run, experiment)`,
so equal run ids of two experiments are two runs, and neither token opens the other's. A token
minted without an experiment (`HMAC-SHA256(secret, run id)`, the earlier form) still opens the
unscoped run of that id, which no scoped token reaches.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from tuneplane.errors import UsageError

SECRET_BYTES = 32
SECRET_MAX_BYTES = 4096  # a secret is a line of hex; anything larger is the wrong file
TAG_HEX = 24
SCOPE_SEP = "\x1f"  # between tag and run id in the store: a run id never holds a control character


def experiment_tag(experiment: str) -> str:
    """The experiment's tag in its tokens and its runs' store names (not secret: the MAC is)."""
    return hashlib.sha256(b"tuneplane-experiment\0" + experiment.encode("utf-8")).hexdigest()[:TAG_HEX]


def run_key(run_id: str, experiment: str | None = None) -> str:
    """The store's name of a run: its id, under its experiment's tag when tokens are scoped."""
    return run_id if experiment is None else f"{experiment_tag(experiment)}{SCOPE_SEP}{run_id}"


def _scoped_mac(secret: bytes, tag: str, run_id: str) -> str:
    message = b"tuneplane-run\0" + tag.encode("ascii") + b"\0" + run_id.encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[: 64 - TAG_HEX]


def mint_token(secret: bytes, run_id: str, experiment: str | None = None) -> str:
    """The token for `run_id` of `experiment` (64 lowercase hex); without an experiment, the
    unscoped form HMAC-SHA256(secret, run_id)."""
    if not secret:
        raise ValueError("the ingest secret is empty")
    if experiment is None:
        return hmac.new(secret, run_id.encode("utf-8"), hashlib.sha256).hexdigest()
    tag = experiment_tag(experiment)
    return tag + _scoped_mac(secret, tag, run_id)


def token_scope(secret: bytes, run_id: str, token: str | None) -> str | None:
    """The store name of the run `token` opens (see `run_key`), or None when it opens none named
    `run_id`. Constant-time comparisons."""
    if not token or not run_id or not secret or not token.isascii():
        return None  # compare_digest refuses non-ASCII text with a TypeError
    token = token.strip().lower()
    tag = token[:TAG_HEX]
    if hmac.compare_digest(_scoped_mac(secret, tag, run_id), token[TAG_HEX:]):
        return f"{tag}{SCOPE_SEP}{run_id}"
    if hmac.compare_digest(mint_token(secret, run_id), token):
        return run_id
    return None


def verify_token(secret: bytes, run_id: str, token: str | None) -> bool:
    """Constant-time check that `token` was minted for `run_id` (of any experiment) under `secret`."""
    return token_scope(secret, run_id, token) is not None


def load_secret(path: Path) -> bytes:
    """Read a secret file (surrounding whitespace ignored, as Kubernetes Secrets often add a newline).

    It must be a small regular file: opened without blocking (a FIFO would wait for a writer
    forever) and read up to a cap (a device such as /dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise UsageError(
            f"cannot read the ingest secret {path}: {exc.strerror or exc}",
            "pass --secret-file pointing at a readable file",
        ) from exc
    try:
        secret = _read_small(fd, path).strip()
    finally:
        os.close(fd)
    if len(secret) < 16:
        raise UsageError(
            f"the ingest secret in {path} is shorter than 16 bytes",
            "use a long random value, e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`",
        )
    return secret


def _read_small(fd: int, path: Path) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        kind = (
            "a folder"
            if stat.S_ISDIR(info.st_mode)
            else "a FIFO"
            if stat.S_ISFIFO(info.st_mode)
            else "a device"
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "a special file"
        )
        raise UsageError(
            f"the ingest secret {path} is not a regular file (it is {kind})",
            "pass --secret-file a small file holding the secret, e.g. one written by "
            "`python -c 'import secrets; print(secrets.token_hex(32))' > ingest.secret`",
        )
    try:
        data = os.read(fd, SECRET_MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(
            f"cannot read the ingest secret {path}: {exc.strerror or exc}",
            "pass --secret-file pointing at a readable file",
        ) from exc
    if len(data) > SECRET_MAX_BYTES or info.st_size > SECRET_MAX_BYTES:
        raise UsageError(
            f"the ingest secret {path} holds {max(info.st_size, len(data))} bytes, over the "
            f"{SECRET_MAX_BYTES}-byte limit of a secret",
            "pass --secret-file the file that holds only the secret (one line of random hex)",
        )
    return data


def ensure_secret(path: Path) -> tuple[bytes, bool]:
    """Load the secret, creating a random one (mode 0600) when the file does not exist yet."""
    if path.exists():
        return load_secret(path), False
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(SECRET_BYTES).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return load_secret(path), False
    with os.fdopen(fd, "wb") as handle:
        handle.write(secret + b"\n")
    return secret, True
