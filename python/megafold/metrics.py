"""A run's metrics (`<run>/metrics.jsonl`, one JSON object per line, `kind` = train or
validation) as columns, as a PNG of the curves, or as TensorBoard scalars.

    import megafold.metrics
    m = megafold.metrics.load("runs/x")          # {"train": {"step": [...], "loss": [...]}, "validation": {...}}
    megafold.metrics.plot("runs/x")              # runs/x/metrics.png (needs matplotlib)
    megafold.metrics.to_tensorboard("runs/x")    # runs/x/tensorboard/events.out.tfevents.* (no TensorBoard needed)

or from a shell: `python -m megafold.metrics runs/x [--png FILE] [--tensorboard DIR]`.
"""
import argparse
import json
import math
import os
import pathlib
import socket
import struct
import time

__all__ = ["load", "plot", "to_tensorboard"]


def load(run_dir):
    """Columns per kind: {kind: {key: [value per row]}}, rows in file order; a key a row lacks is nan.
    Raises ValueError naming the file and line for a line that is not a JSON object."""
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    rows = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object")
            rows.setdefault(row.get("kind", "train"), []).append(row)
    out = {}
    for kind, kind_rows in rows.items():
        keys = sorted({k for r in kind_rows for k in r if k != "kind" and isinstance(r[k], (int, float))})
        out[kind] = {k: [r.get(k, math.nan) for r in kind_rows] for k in keys}
    return out


# What the figure shows: (kind, key, panel title), where present.
CURVES = [("train", "loss", "training loss"), ("train", "distogram_loss", "distogram loss"),
          ("validation", "lddt_ca", "validation lDDT-CA"), ("validation", "lddt_all_atom", "validation lDDT (all atoms)"),
          ("validation", "plddt", "validation mean pLDDT")]


def plot(run_dir, out=None):
    """Loss, lDDT and pLDDT curves against the step as a PNG (default <run>/metrics.png); returns its path."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("megafold.metrics.plot needs matplotlib (pip install matplotlib)") from e
    m = load(run_dir)
    panels = [(k, key, title) for k, key, title in CURVES if key in m.get(k, {})]
    if not panels:
        raise ValueError(f"{run_dir}: no loss, lDDT or pLDDT in metrics.jsonl")
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (kind, key, title) in zip(axes[0], panels):
        ax.plot(m[kind]["step"], m[kind][key], marker="o" if kind == "validation" else None, lw=1)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = pathlib.Path(out) if out else pathlib.Path(run_dir) / "metrics.png"
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


# ---- TensorBoard event files, written directly (record framing + the few protobuf fields used) ----

def _crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data):
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _event(wall_time, step=None, file_version=None, scalars=()):
    """An Event message: wall_time (1, double), step (2, int64), file_version (3) or summary (5)
    of Values with tag (1) and simple_value (2, float)."""
    msg = b"\x09" + struct.pack("<d", wall_time)
    if step is not None:
        msg += b"\x10" + _varint(step)
    if file_version is not None:
        v = file_version.encode()
        msg += b"\x1a" + _varint(len(v)) + v
    if scalars:
        summary = b""
        for tag, value in scalars:
            t = tag.encode()
            val = b"\x0a" + _varint(len(t)) + t + b"\x15" + struct.pack("<f", value)
            summary += b"\x0a" + _varint(len(val)) + val
        msg += b"\x2a" + _varint(len(summary)) + summary
    return msg


def _record(data):
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", _masked_crc(header)) + data + struct.pack("<I", _masked_crc(data))


def to_tensorboard(run_dir, logdir=None):
    """Every numeric metric as a TensorBoard scalar `<kind>/<key>` at its step (default logdir
    <run>/tensorboard); returns the event file's path."""
    m = load(run_dir)
    logdir = pathlib.Path(logdir) if logdir else pathlib.Path(run_dir) / "tensorboard"
    logdir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    path = logdir / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}"
    with open(path, "wb") as f:
        f.write(_record(_event(now, file_version="brain.Event:2")))
        for kind, cols in m.items():
            for i, step in enumerate(cols.get("step", [])):
                scalars = [(f"{kind}/{k}", float(v[i])) for k, v in cols.items()
                           if k != "step" and not math.isnan(float(v[i]))]
                f.write(_record(_event(now, step=int(step), scalars=scalars)))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--png", help="write the curves here (default <run>/metrics.png)")
    ap.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard scalars to DIR")
    args = ap.parse_args()
    if args.tensorboard:
        print(to_tensorboard(args.run_dir, args.tensorboard))
    try:
        print(plot(args.run_dir, args.png))
    except ImportError as e:
        if not args.tensorboard:
            raise
        print(f"no PNG: {e}")


if __name__ == "__main__":
    main()
