"""Scalars as TensorBoard's own protobufs carry them, decoded by our standard-library reader: every
dtype a one-value tensor summary can have (float16 and bfloat16 as `half_val` bits or
`tensor_content`, the unsigned fields), written by TensorBoard's own event file writer."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from tuneplane.collector import sources, tfevents

np = pytest.importorskip("numpy")


def test_one_value_tensors_of_every_numeric_dtype_are_read(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    cases = {
        "half": (tensor_util.make_tensor_proto(np.float16(-0.1)), float(np.float16(-0.1))),
        "half_content": (
            tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, tensor_content=np.float16(1.25).tobytes()),
            1.25,
        ),
        "bfloat16": (tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, half_val=[0x4060]), 3.5),
        "bfloat16_content": (tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, tensor_content=b"\x60\x40"), 3.5),
        "uint64": (tensor_util.make_tensor_proto(np.uint64(2**40)), float(2**40)),
        "uint32": (tensor_util.make_tensor_proto(np.uint32(7)), 7.0),
        "int8": (tensor_util.make_tensor_proto(np.int8(-3)), -3.0),
        "uint8_content": (tensor_pb2.TensorProto(dtype=types_pb2.DT_UINT8, tensor_content=bytes([200])), 200.0),
        "float": (tensor_util.make_tensor_proto(np.float32(0.5)), 0.5),
        "double": (tensor_util.make_tensor_proto(np.float64(0.25)), 0.25),
        "int64": (tensor_util.make_tensor_proto(np.int64(-(2**40))), float(-(2**40))),
        # a bool is charted as 0 or 1, as TensorBoard's scalars plugin reads it
        "bool": (tensor_util.make_tensor_proto(np.bool_(True)), 1.0),
        "bool_false": (tensor_util.make_tensor_proto(np.bool_(False)), 0.0),
        "bool_content": (tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL, tensor_content=b"\x01"), 1.0),
    }
    scalars = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    writer = EventFileWriter(str(tmp_path))
    for step in range(3):
        values = [
            summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=scalars) for tag, (tensor, _) in cases.items()
        ]
        writer.add_event(event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=values)))
    # a two-value half tensor is not a scalar
    pair = tensor_util.make_tensor_proto(np.array([1, 2], dtype=np.float16))
    writer.add_event(
        event_pb2.Event(
            step=9,
            summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="pair", tensor=pair, metadata=scalars)]),
        )
    )
    writer.close()
    (path,) = glob.glob(os.path.join(tmp_path, "events.out.tfevents.*"))
    records = tfevents.read_records(Path(path).read_bytes())
    assert records.corrupt == 0
    points = sources.tb_points(sources.Source("tensorboard", "."), os.path.basename(path), records.payloads, {})
    got: dict[str, list[tuple[int, float]]] = {}
    for step, _, values in points:
        for key, value in values.items():
            got.setdefault(key, []).append((step, value))
    assert got == {tag: [(0, want), (1, want), (2, want)] for tag, (_, want) in cases.items()}
