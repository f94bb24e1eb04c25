"""TensorBoard event files, read with the standard library: TFRecord framing and the scalar fields of
the `Event` / `Summary` protobufs.

A TFRecord is `uint64 length (LE) · uint32 masked CRC-32C of the length · payload · uint32 masked
CRC-32C of the payload`. A record that is not complete yet (the writer is mid-flush) ends the read
without moving the offset, so it is read once it is whole; a record whose payload CRC does not
match is skipped and counted, and damaged framing (a length whose CRC does not match) is skipped up
to the next valid header, so one bad stretch costs only the records in it. Only what a chart needs
is decoded: `Event.wall_time` (1), `Event.step` (2), `Event.summary` (5) → `Summary.value` (1) →
`tag` (1), `simple_value` (2), and the TensorBoard 2 form: `tensor` (8) holding one
float/double/int/bool value, as `add_scalar(new_style=True)` writes it (a bool as 0 or 1).
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Iterator

from tuneplane.runtime.records import FrozenRecord, Record

_MASK_DELTA = 0xA282EAD8
_F32 = struct.Struct("<f")
_HEADER = 12  # length (8) + its CRC (4)
HEADER_BYTES = _HEADER
MAX_RECORD = 64 * 1024 * 1024  # a larger length is corruption, not an event


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _table()
_CRC_TABLE16: list[int] = []


def _table16() -> list[int]:
    # Two bytes per step (reflected CRC is linear): twice the speed of the byte table in Python.
    t = _CRC_TABLE
    return [t[t[x & 0xFF] & 0xFF ^ (x >> 8)] ^ (t[x & 0xFF] >> 8) for x in range(65536)]


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses; pure Python, 16 bits per step."""
    global _CRC_TABLE16
    if not _CRC_TABLE16:
        _CRC_TABLE16 = _table16()
    crc = 0xFFFFFFFF
    even = len(data) & ~1 if sys.byteorder == "little" else 0  # words are read in native order
    table16 = _CRC_TABLE16
    for word in memoryview(data)[:even].cast("H"):
        crc = table16[(crc ^ word) & 0xFFFF] ^ (crc >> 16)
    for byte in data[even:]:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """One TFRecord around `payload` (used by tests and by tools that write event files)."""
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


class Records(Record):
    """The complete records of `data` from `offset` on: payloads, the offset after the last complete
    one, and how many corrupt records were skipped."""

    payloads: list[bytes]
    offset: int
    corrupt: int


def read_records(data: bytes, offset: int = 0) -> Records:
    payloads: list[bytes] = []
    corrupt = 0
    size = len(data)
    while offset + _HEADER <= size:
        if not header_ok(data, offset):
            # Damaged framing (a bad sector, a writer killed mid-write and restarted): look for the
            # next place where a length and its CRC agree, and carry on from there.
            corrupt += 1
            offset = _resync(data, offset + 1)
            continue
        (length,) = struct.unpack_from("<Q", data, offset)
        end = offset + _HEADER + length + 4
        if end > size:
            break  # incomplete: read it again once the writer has finished it
        payload = data[offset + _HEADER : end - 4]
        (payload_crc,) = struct.unpack_from("<I", data, end - 4)
        if payload_crc == masked_crc(payload):
            payloads.append(payload)
        else:
            corrupt += 1
        offset = end
    return Records(payloads, offset, corrupt)


def header_ok(data: bytes, offset: int) -> bool:
    """Whether a record header starts at `offset`: its length's CRC matches and the length is sane."""
    head = data[offset : offset + 8]
    if len(head) < 8 or offset + _HEADER > len(data):
        return False
    (length,) = struct.unpack("<Q", head)
    (length_crc,) = struct.unpack_from("<I", data, offset + 8)
    return bool(length <= MAX_RECORD and length_crc == masked_crc(head))


def _resync(data: bytes, start: int) -> int:
    """The first offset from `start` where a record header validates; without one, the first offset
    whose header is not all in `data` yet (so a later read, with more bytes, looks there again)."""
    last = len(data) - _HEADER
    offset = start
    while offset <= last:
        if data[offset] == 0 and data[offset : offset + _HEADER] == _ZEROS:
            # A header is never 12 zero bytes (its masked CRC is not 0): step over a zeroed stretch
            # (a crash can leave one, a sparse file is one) at once, to the first window past it.
            offset = zeros_end(data, offset) - _HEADER + 1
            continue
        if header_ok(data, offset):
            return offset
        offset += 1
    return max(start, last + 1)


_ZEROS = bytes(_HEADER)


def zeros_end(data: bytes, offset: int) -> int:
    """Where the run of zero bytes at `offset` ends. Blocks of zeros double in size, then halve, and
    are compared whole (memcmp), so a long run costs microseconds (a regex or lstrip takes
    milliseconds per 256 KiB); only the last few bytes are looked at one by one."""
    size = len(data)
    top = 0
    while top < len(_ZERO_BLOCKS) and data.startswith(_ZERO_BLOCKS[top], offset):
        offset += len(_ZERO_BLOCKS[top])
        top += 1
    for zeros in reversed(_ZERO_BLOCKS[: top + 1]):
        while data.startswith(zeros, offset):
            offset += len(zeros)
    chunk = data[offset : offset + len(_ZERO_BLOCKS[0])]
    return min(size, offset + len(chunk) - len(chunk.lstrip(b"\x00")))


_ZERO_BLOCKS = [bytes(64 << k) for k in range(11)]  # 64 B .. 64 KiB


# ── protobuf wire format ──────────────────────────────────────────────────────────────────────
class ProtoError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ProtoError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field: ints for varint/fixed, bytes for length-delimited."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise ProtoError("truncated fixed64")
            (value,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise ProtoError("truncated bytes field")
            value = buf[pos : pos + length]
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise ProtoError("truncated fixed32")
            (value,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
        yield number, wire, value


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class Scalar(FrozenRecord):
    """One scalar point of an event file: one per point read, so `__slots__` and its own `__init__`."""

    __slots__ = ("tag", "step", "value", "wall_time")
    _fields = __slots__
    tag: str
    step: int
    value: float
    wall_time: float

    def __init__(self, tag: str, step: int, value: float, wall_time: float) -> None:
        set_field = object.__setattr__  # frozen: fields are set past `__setattr__`
        set_field(self, "tag", tag)
        set_field(self, "step", step)
        set_field(self, "value", value)
        set_field(self, "wall_time", wall_time)


def scalars(event: bytes) -> list[Scalar]:
    """The scalar summaries of one serialized `Event` (empty for graph, file-version, log events)."""
    wall_time, step = 0.0, 0
    summaries: list[bytes] = []
    for number, wire, value in fields(event):
        if number == 1 and wire == 1 and isinstance(value, int):
            wall_time = struct.unpack("<d", struct.pack("<Q", value))[0]
        elif number == 2 and wire == 0 and isinstance(value, int):
            step = signed(value)
        elif number == 5 and wire == 2 and isinstance(value, bytes):
            summaries.append(value)
    out: list[Scalar] = []
    for summary in summaries:
        for number, wire, value in fields(summary):
            if number == 1 and wire == 2 and isinstance(value, bytes):
                found = _summary_value(value)
                if found is not None and math.isfinite(found[1]):
                    out.append(Scalar(found[0], step, found[1], wall_time))
    return out


_SESSION_START = 1  # SessionLog.status START


def opening(data: bytes) -> tuple[float | None, int | None, bool]:
    """From a file's first bytes: the wall time of its first event (when its writer opened it), the
    step of a `SessionLog` START among its first events, which `SummaryWriter(purge_step=N)` writes
    and TensorBoard reads as "drop what earlier files logged at steps >= N", and whether that is
    settled: a summary or a 4th event has been read. Torch writes its first three events (file version,
    file version at step N, the START) each in an append of its own, so two on disk settle nothing."""
    opened: float | None = None
    purge: int | None = None
    summary = False
    payloads = read_records(data).payloads
    for payload in payloads[:4]:
        try:
            wall_time, step, session = 0.0, 0, b""
            for number, wire, value in fields(payload):
                if number == 1 and wire == 1 and isinstance(value, int):
                    wall_time = struct.unpack("<d", struct.pack("<Q", value))[0]
                elif number == 2 and wire == 0 and isinstance(value, int):
                    step = signed(value)
                elif number == 5 and wire == 2:
                    summary = True
                elif number == 7 and wire == 2 and isinstance(value, bytes):
                    session = value
            if session and any(n == 1 and w == 0 and v == _SESSION_START for n, w, v in fields(session)):
                purge = step
        except ProtoError:
            break
        if opened is None and math.isfinite(wall_time):
            opened = wall_time
    return opened, purge, summary or len(payloads) >= 4


def _summary_value(buf: bytes) -> tuple[str, float] | None:
    # Fast path for what add_scalar writes: tag (field 1, short) then simple_value (field 2, fixed32).
    if len(buf) > 7 and buf[0] == 0x0A and buf[1] < 0x80 and len(buf) == buf[1] + 7 and buf[buf[1] + 2] == 0x15:
        end = buf[1] + 2
        return _tag(buf[2:end]), _F32.unpack_from(buf, end + 1)[0]
    tag = ""
    number_value: float | None = None
    for number, wire, value in fields(buf):
        if number == 1 and wire == 2 and isinstance(value, bytes):
            tag = _tag(value)
        elif number == 2 and wire == 5 and isinstance(value, int):
            number_value = struct.unpack("<f", struct.pack("<I", value))[0]
        elif number == 8 and wire == 2 and isinstance(value, bytes):
            number_value = _tensor_scalar(value)
    if not tag or number_value is None:
        return None
    return tag, number_value


_TAGS: dict[bytes, str] = {}


def _tag(raw: bytes) -> str:
    """Tags repeat every step: one string per tag, not one per scalar."""
    tag = _TAGS.get(raw)
    if tag is None:
        tag = raw.decode("utf-8", "replace")
        if len(_TAGS) < 10_000:
            _TAGS[raw] = tag
    return tag


_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_BFLOAT16, _DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT_FORMATS = {
    _DT_FLOAT: "<f",
    _DT_DOUBLE: "<d",
    _DT_INT32: "<i",
    _DT_INT64: "<q",
    _DT_HALF: "<e",
    10: "<?",
    4: "<B",
    5: "<h",
    6: "<b",
    17: "<H",
    22: "<I",
    23: "<Q",
}  # uint8, int16, int8, uint16/32/64
_HALF_VAL = 13  # float16 and bfloat16 values, each as the 16 bits of an int32


def _tensor_scalar(buf: bytes) -> float | None:
    """A TensorProto with exactly one number (`float_val`, `double_val`, `int_val`, `int64_val`,
    `half_val` for float16 and bfloat16, `bool_val`, the unsigned fields, or `tensor_content`); anything larger
    (histograms, images) is not a scalar and is skipped."""
    dtype = 0
    values: list[float] = []
    halves: list[int] = []
    content = b""
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0 and isinstance(value, int):
            dtype = value
        elif number == 4 and wire == 2 and isinstance(value, bytes):
            content = value
        elif number == _HALF_VAL:
            halves.extend(int(v) & 0xFFFF for v in _numbers(7, wire, value))
        elif number in (5, 6, 7, 10, 11, 16, 17):  # float, double, int, int64, bool, uint32, uint64 values
            values.extend(_numbers(number, wire, value))
    values.extend(_half(bits, dtype) for bits in halves)
    if content and dtype == _DT_BFLOAT16 and len(content) == 2:
        values.append(_half(int.from_bytes(content, "little"), dtype))
    elif content and dtype in _CONTENT_FORMATS:
        fmt = _CONTENT_FORMATS[dtype]
        if len(content) == struct.calcsize(fmt):
            values.append(float(struct.unpack(fmt, content)[0]))
    return values[0] if len(values) == 1 else None


def _half(bits: int, dtype: int) -> float:
    """A float16 (IEEE half) or bfloat16 (a float32's top 16 bits) from its bits."""
    if dtype == _DT_BFLOAT16:
        return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])
    return float(struct.unpack("<e", struct.pack("<H", bits))[0])


def _numbers(number: int, wire: int, value: int | bytes) -> list[float]:
    if number in (11, 16, 17):  # bool_val (0 or 1, as TensorBoard charts it), uint32_val, uint64_val: varints
        return [float(v) for v in _varints(value)] if isinstance(value, bytes) else [float(value)]
    if number == 5:  # float_val: fixed32, packed or not
        if isinstance(value, bytes):
            return [float(v) for v in struct.unpack(f"<{len(value) // 4}f", value[: len(value) // 4 * 4])]
        return [struct.unpack("<f", struct.pack("<I", value))[0]]
    if number == 6:  # double_val: fixed64
        if isinstance(value, bytes):
            return [float(v) for v in struct.unpack(f"<{len(value) // 8}d", value[: len(value) // 8 * 8])]
        return [struct.unpack("<d", struct.pack("<Q", value))[0]]
    # int_val / int64_val: varints, packed or not
    if isinstance(value, bytes):
        return [float(signed(raw)) for raw in _varints(value)]
    return [float(signed(value))]


def _varints(value: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(value):
        raw, pos = _varint(value, pos)
        out.append(raw)
    return out


# ── writing (tests, and a reference for the format) ───────────────────────────────────────────
def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _encode_varint(len(payload)) + payload


def scalar_event(step: int, wall_time: float, values: dict[str, float]) -> bytes:
    """A serialized `Event` with one `simple_value` per tag, as `SummaryWriter.add_scalar` writes it."""
    summary = b"".join(
        _length_delimited(1, _length_delimited(1, tag.encode()) + _key(2, 5) + struct.pack("<f", value))
        for tag, value in values.items()
    )
    return _key(1, 1) + struct.pack("<d", wall_time) + _key(2, 0) + _encode_varint(step) + _length_delimited(5, summary)


def file_version_event(wall_time: float, step: int = 0, purge: bool = False) -> bytes:
    """The event a writer opens its file with (`brain.Event:2`), and with `purge` the `SessionLog`
    START that `SummaryWriter(purge_step=step)` writes next (tests)."""
    head = _key(1, 1) + struct.pack("<d", wall_time) + _key(2, 0) + _encode_varint(step)
    return head + (_length_delimited(7, _key(1, 0) + b"\x01") if purge else _length_delimited(3, b"brain.Event:2"))
