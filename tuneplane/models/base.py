"""The strict base model every file a person or the bot writes is parsed into, and its name patterns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
LAB_NAME_RE = r"^[A-Za-z0-9._-]+$"
DIGEST_RE = r"^sha256:[0-9a-f]{64}$"


class Strict(BaseModel):
    """Everything users write: unknown keys refused, values immutable once loaded."""

    # defer_build: a command validates a few of the many models; build each validator on first use
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)
