#!/usr/bin/env python3
"""Table of a fused-operator A/B run: bench/fused_ops.py --profile logs DIR/abf_NAME_ROUND.log and
results DIR/abf_NAME_ROUND.json (one per library and round, as bench/device_session.sh's stage
`fused-variants` writes them). One row per (op, N, kernel) and per (op, N) for the op's fwd+bwd
median, one column per library with every round's time and, beside each variant, the change of
its mean against the base's. Kernels are matched by name.

usage: python3 bench/ab_fused.py DIR BASE [VARIANT...]
"""
import json
import pathlib
import re
import sys

# The lines bench/fused_ops.py prints (header_line, kernel_line).
HEADER = re.compile(r"^(\w+) N=(\d+): per fwd\+bwd, ms")
KERNEL = re.compile(r"^\s+([\d.]+)\s{2}(.*?)(?:\s{2,}\d+ GB/s.*)?$")
PREFIX = re.compile(r"^void megafold::ops::cuda::\(anonymous namespace\)::")
OP_LABEL = "op fwd+bwd (bench/fused_ops.py)"


def read(log):
    """{(op, n, kernel): ms} of one round of one library."""
    times, key = {}, None
    for line in log.read_text().splitlines():
        if m := HEADER.match(line):
            key = (m.group(1), int(m.group(2)))
        elif key is not None and (m := KERNEL.match(line)):
            times[(*key, PREFIX.sub("", m.group(2).strip()))] = float(m.group(1))
    if (timed := log.with_suffix(".json")).exists():
        for row in json.loads(timed.read_text())["rows"]:
            times[(row["op"], row["n"], OP_LABEL)] = row["fwdbwd_ms"]
    return times


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
    runs = {name: [read(p) for p in sorted(out.glob(f"abf_{name}_*.log"))] for name in names}
    keys = sorted({k for rounds in runs.values() for r in rounds for k in r})
    mean = lambda vals: sum(vals) / len(vals)
    print("| op | N | kernel | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for op, n, kernel in keys:
        base = [r[(op, n, kernel)] for r in runs[names[0]] if (op, n, kernel) in r]
        cells = []
        for name in names:
            vals = [r[(op, n, kernel)] for r in runs[name] if (op, n, kernel) in r]
            cell = " / ".join(f"{v:.4f}" for v in vals) or "-"
            if name != names[0] and vals and base:
                cell += f" ({100 * (mean(vals) / mean(base) - 1):+.1f}%)"
            cells.append(cell)
        print(f"| {op} | {n} | {kernel[:60]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
