#!/usr/bin/env python3
"""Per-kernel table of an A/B run: bench/profile_kernels.py logs DIR/ab_NAME_ROUND.log (one per
library and round, as bench/device_session.sh's stage `variants` writes them), one row per
(N, kernel), one column per library with every round's median and, beside each variant, the
change of its mean against the base's. The kernels are matched by name, not by their order in
the log (which sorts them by time). Where bench/triangle_attention.py's results sit beside a
log (ab_NAME_ROUND.json), the op's fwd+bwd median adds a row per N.

usage: python3 bench/ab_table.py DIR BASE [VARIANT...]
"""
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from profile_kernels import TOTAL_LABEL, WALL_LABEL  # noqa: E402  (the report's own labels)

# The lines bench/profile_kernels.py prints (kernel_line, sum_line).
KERNEL = re.compile(r"^\s+([\d.]+)\s+x\d+\s+(.*?)(?:\s{2,}|\s*$)")
TOTAL = re.compile(rf"^\s+([\d.]+)\s+({re.escape(TOTAL_LABEL)}|{re.escape(WALL_LABEL)})")
OP_LABEL = "op fwd+bwd (bench/triangle_attention.py)"


def read(path):
    """{(n, kernel): ms} of one log."""
    times, n = {}, None
    for line in path.read_text().splitlines():
        if m := re.match(r"N=(\d+)", line):
            n = int(m.group(1))
        elif n is not None and (m := KERNEL.match(line) or TOTAL.match(line)):
            times[(n, m.group(2).strip())] = float(m.group(1))
    for row in timed_rows(path):
        times[(row["n"], OP_LABEL)] = row["fwdbwd_ms"]
    return times


def timed_rows(log):
    """The result rows of the op's own timing written beside a log (LOG.json), if any."""
    timed = log.with_suffix(".json")
    return json.loads(timed.read_text())["rows"] if timed.exists() else []


def print_table(runs, names, label, order=None, digits=3):
    """One row per key of the base's rounds (label(key) names it), one column per library
    (names[0] the base): every round's value and, beside each variant, the change of its mean
    against the base's. bench/ab_fused.py prints its table with this too."""
    base = names[0]
    keys = sorted({k for r in runs[base] for k in r}, key=order)
    width = max(len(label(k)) for k in keys) if keys else 10
    print(f"{'':{width}s}  " + "  ".join(f"{name:>22s}" for name in names))
    for key in keys:
        cells, base_mean = [], None
        for name in names:
            values = [r[key] for r in runs[name] if key in r]
            if not values:
                cells.append(f"{'-':>22s}")
                continue
            mean = sum(values) / len(values)
            text = " / ".join(f"{v:.{digits}f}" for v in values)
            if name == base:
                base_mean = mean
            elif base_mean:
                text += f" ({100 * (mean / base_mean - 1):+.1f}%)"
            cells.append(f"{text:>22s}")
        print(f"{label(key):{width}s}  " + "  ".join(cells))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
    runs = {name: [read(p) for p in sorted(out.glob(f"ab_{name}_*.log"))] for name in names}
    sums = (TOTAL_LABEL, WALL_LABEL, OP_LABEL)
    print_table(runs, names, lambda k: "N=%d %s" % k, order=lambda k: (k[0], k[1] in sums, k[1]))


if __name__ == "__main__":
    main()
