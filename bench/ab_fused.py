#!/usr/bin/env python3
"""Table of a fused-operator A/B run: bench/fused_ops.py --profile logs DIR/abf_NAME_ROUND.log and
results DIR/abf_NAME_ROUND.json (one per library and round, as bench/device_session.sh's stage
`fused-variants` writes them). One row per (op, N, kernel) and per (op, N) for the op's fwd+bwd
median, laid out as bench/ab_table.py's: one column per library with every round's time and,
beside each variant, the change of its mean against the base's. Kernels are matched by name.

usage: python3 bench/ab_fused.py DIR BASE [VARIANT...]
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ab_table import print_table, timed_rows  # noqa: E402  (one table for both kinds of A/B run)

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
    for row in timed_rows(log):
        times[(row["op"], row["n"], OP_LABEL)] = row["fwdbwd_ms"]
    return times


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
    runs = {name: [read(p) for p in sorted(out.glob(f"abf_{name}_*.log"))] for name in names}
    print_table(runs, names, lambda k: f"{k[0]} N={k[1]} {k[2]}",
                order=lambda k: (k[0], k[1], k[2] in ("total", OP_LABEL), k[2]), digits=4)


if __name__ == "__main__":
    main()
