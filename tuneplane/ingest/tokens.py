"""Per-run ingest tokens: HMAC-SHA256 of the run id under a server secret.

A token is derived, not stored, so the bot (which holds the secret) can mint one when it submits a
run and the receiver can check it without a database lookup. A token only opens its own run.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from tuneplane.errors import UsageError

SECRET_BYTES = 32


def mint_token(secret: bytes, run_id: str) -> str:
    """The token for `run_id`: lowercase hex of HMAC-SHA256(secret, run_id)."""
    if not secret:
        raise ValueError("the ingest secret is empty")
    return hmac.new(secret, run_id.encode("utf-8"), hashlib.sha256).hexdigest()


def verify_token(secret: bytes, run_id: str, token: str | None) -> bool:
    """Constant-time check that `token` was minted for `run_id` under `secret`."""
    if not token or not run_id or not secret or not token.isascii():
        return False  # compare_digest refuses non-ASCII text with a TypeError
    expected = mint_token(secret, run_id)
    return hmac.compare_digest(expected, token.strip().lower())


def load_secret(path: Path) -> bytes:
    """Read a secret file (surrounding whitespace ignored, as Kubernetes Secrets often add a newline)."""
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise UsageError(f"cannot read the ingest secret {path}: {exc.strerror or exc}",
                         "pass --secret-file pointing at a readable file") from exc
    if len(secret) < 16:
        raise UsageError(f"the ingest secret in {path} is shorter than 16 bytes",
                         "use a long random value, e.g. "
                         "`python -c 'import secrets; print(secrets.token_hex(32))'`")
    return secret


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
