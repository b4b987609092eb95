"""Decodes a TensorBoard event file independently of dtrain and prints JSON.

    read_events.py FILE PROTO_DIR      # protobuf reader (protoc + python3-protobuf)
    read_events.py --accumulator DIR   # TensorBoard's own EventAccumulator

Exit 77: the reader's prerequisites are missing (the test skips).
The CRC-32C here is a bitwise implementation of its own, not dtrain's table.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if length_crc != masked(crc32c(header)):
            raise SystemExit("bad length CRC at offset %d" % pos)
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if len(data) != length or data_crc != masked(crc32c(data)):
            raise SystemExit("bad data CRC at offset %d" % pos)
        yield data
        pos += 16 + length


def protobuf_reader(path, proto_dir):
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        print("python3-protobuf is not installed")
        sys.exit(77)
    protoc = shutil.which("protoc")
    if protoc is None:
        print("protoc is not installed (Debian: protobuf-compiler)")
        sys.exit(77)
    out = tempfile.mkdtemp()
    subprocess.run([protoc, "-I", proto_dir, "--python_out", out,
                    os.path.join(proto_dir, "tensorboard_events.proto")], check=True)
    sys.path.insert(0, out)
    import tensorboard_events_pb2 as pb

    events = []
    for data in records(path):
        event = pb.Event()
        event.ParseFromString(data)
        e = {"wall_time": event.wall_time, "step": event.step,
             "canonical": event.SerializeToString() == data, "values": []}
        if event.HasField("file_version"):
            e["file_version"] = event.file_version
        for v in event.summary.value:
            d = {"tag": v.tag, "kind": v.WhichOneof("value")}
            if d["kind"] == "simple_value":
                d["value"] = v.simple_value
            elif d["kind"] == "histo":
                h = v.histo
                d.update(min=h.min, max=h.max, num=h.num, sum=h.sum, sum_squares=h.sum_squares,
                         bucket_limit=list(h.bucket_limit), bucket=list(h.bucket))
            elif d["kind"] == "tensor":
                d["dtype"] = v.tensor.dtype
                d["shape"] = [dim.size for dim in v.tensor.tensor_shape.dim]
                d["text"] = [s.decode() for s in v.tensor.string_val]
                d["plugin"] = v.metadata.plugin_data.plugin_name
            e["values"].append(d)
        events.append(e)
    print(json.dumps(events))


def accumulator(directory):
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
    except Exception as error:  # ImportError, or a protobuf version clash
        print("TensorBoard is not importable: %s" % error)
        sys.exit(77)
    acc = ea.EventAccumulator(directory, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0,
                                                         ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    out = {"scalars": {}, "histograms": {}, "text": {}}
    for tag in tags["scalars"]:
        out["scalars"][tag] = [[s.step, s.value] for s in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        out["histograms"][tag] = [[h.step, h.histogram_value.num, h.histogram_value.sum]
                                  for h in acc.Histograms(tag)]
    for tag in tags["tensors"]:
        out["text"][tag] = [[t.step, [s.decode() for s in t.tensor_proto.string_val]]
                            for t in acc.Tensors(tag)]
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "--accumulator":
        accumulator(sys.argv[2])
    else:
        protobuf_reader(sys.argv[1], sys.argv[2])
