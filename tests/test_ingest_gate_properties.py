"""Property tests for the receiver's request parser (`tuneplane.ingest.gate.read_body`): whatever the
headers and body, it returns a payload or refuses with an HTTP status; nothing else escapes, and the
work stays bounded. Run for a bounded time (a fixed number of examples, each with a deadline)."""

from __future__ import annotations

import email.parser
import gzip
import io
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuneplane.ingest import mint_token
from tuneplane.ingest.gate import Limits, Refused, read_body

SECRET = b"p" * 32
LIMITS = Limits(max_body=64 * 1024, max_decoded=256 * 1024, max_points=500, max_hparams=500)
BOUNDED = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
STATUSES = {400, 401, 403, 411, 413, 415, 422}

json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=40,
)


def headers_of(pairs: list[tuple[str, str]]) -> Any:
    text = "".join(f"{name}: {value}\r\n" for name, value in pairs) + "\r\n"
    return email.parser.Parser().parsestr(text, headersonly=True)


def call(pairs: list[tuple[str, str]], body: bytes) -> None:
    try:
        result = read_body(io.BytesIO(body), headers_of(pairs), SECRET, LIMITS)
    except Refused as exc:
        assert exc.status in STATUSES and exc.message
        return
    assert isinstance(result.payload, dict) and isinstance(result.run_id, str)


header_values = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\r\n"), max_size=80
)
header_names = st.sampled_from(
    ["Content-Length", "Transfer-Encoding", "Content-Encoding", "X-TunePlane-Token", "X-TunePlane-Run", "X-Other"]
)


@BOUNDED
@given(st.lists(st.tuples(header_names, header_values), max_size=8), st.binary(max_size=2048))
def test_arbitrary_headers_and_bytes_are_answered(pairs: list[tuple[str, str]], body: bytes) -> None:
    call(pairs, body)


@BOUNDED
@given(json_values, st.sampled_from(["r1", "r2"]), st.booleans(), st.booleans())
def test_arbitrary_json_with_a_valid_frame(value: Any, run: str, zipped: bool, claim: bool) -> None:
    body = json.dumps({"run_id": "r1", "points": value} if claim else value).encode()
    if zipped:
        body = gzip.compress(body)
    pairs = [("Content-Length", str(len(body))), ("X-TunePlane-Token", mint_token(SECRET, run))]
    if zipped:
        pairs.append(("Content-Encoding", "gzip"))
    if claim:
        pairs.append(("X-TunePlane-Run", "r1"))
    call(pairs, body)


@BOUNDED
@given(st.integers(min_value=1, max_value=3000), st.sampled_from(["[", '{"a":']))
def test_nesting_of_any_depth_is_refused_not_raised(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    body = ('{"run_id": "r1", "params": ' + opener * depth + "1" + closer * depth + "}").encode()
    pairs = [("Content-Length", str(len(body))), ("X-TunePlane-Token", mint_token(SECRET, "r1"))]
    call(pairs, body)


@BOUNDED
@given(st.binary(min_size=1, max_size=512), st.integers(min_value=0, max_value=600))
def test_truncated_or_overlong_bodies(body: bytes, declared: int) -> None:
    pairs = [("Content-Length", str(declared)), ("X-TunePlane-Token", mint_token(SECRET, "r1"))]
    call(pairs, body)
