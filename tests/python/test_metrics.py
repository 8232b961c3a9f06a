"""megafold.metrics: a run's metrics as columns, and as TensorBoard event files whose framing and
fields are checked here by an independent reader (CRC32C, protobuf fields)."""
import json
import math
import struct

import pytest

from megafold import metrics

ROWS = [
    {"kind": "train", "step": 1, "loss": 3.0, "grad_norm": 1.5, "lr": 1e-4},
    {"kind": "train", "step": 2, "loss": 2.5, "lr": 2e-4},
    {"kind": "validation", "step": 2, "lddt_ca": 0.4, "plddt": 55.0, "pairs": 100},
]


def write_run(tmp_path, rows=ROWS):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_load_gives_columns_per_kind(tmp_path):
    m = metrics.load(write_run(tmp_path))
    assert m["train"]["step"] == [1, 2] and m["train"]["loss"] == [3.0, 2.5]
    assert m["train"]["grad_norm"][0] == 1.5 and math.isnan(m["train"]["grad_norm"][1])  # absent in row 2
    assert m["validation"] == {"lddt_ca": [0.4], "pairs": [100], "plddt": [55.0], "step": [2]}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not JSON"):
        metrics.load(tmp_path)


def varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message (wire types 0, 1, 2, 5)."""
    i, out = 0, []
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        out.append((num, wire, v))
    return out


def crc32c(data):  # bitwise, the Castagnoli polynomial
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_tensorboard_events_are_well_formed(tmp_path):
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    path = metrics.to_tensorboard(write_run(tmp_path))
    data, i, events = path.read_bytes(), 0, []
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(header)
        body = data[i + 12:i + 12 + length]
        assert struct.unpack("<I", data[i + 12 + length:i + 16 + length])[0] == masked(body)
        events.append(fields(body))
        i += 16 + length
    assert (3, 2, b"brain.Event:2") in events[0]
    scalars = {}
    for ev in events[1:]:
        step = next(v for n, w, v in ev if n == 2)
        summary = next(v for n, w, v in ev if n == 5)
        for _, _, value in fields(summary):
            f = dict((n, v) for n, _, v in fields(value))
            scalars[(f[1].decode(), step)] = struct.unpack("<f", f[2])[0]
    assert scalars[("train/loss", 2)] == pytest.approx(2.5)
    assert scalars[("validation/lddt_ca", 2)] == pytest.approx(0.4)
    assert ("train/grad_norm", 2) not in scalars  # not measured at step 2: no point


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = metrics.plot(write_run(tmp_path))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_megafold_plot_writes_the_png(tmp_path, megafold_bin):
    import subprocess
    (tmp_path / "run").mkdir()
    run = write_run(tmp_path / "run")
    r = subprocess.run([megafold_bin, "plot", str(run), "--png", str(tmp_path / "curves.png")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = subprocess.run([megafold_bin, "plot", str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert missing.returncode == 1 and "nowhere/metrics.jsonl: no such file" in missing.stderr
