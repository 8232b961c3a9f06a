#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's source page (SASS, CSV: `ncu --import R
--page source --print-source sass --csv`, as bench/device_session.sh's stage `ncu` exports it,
xz-compressed or not): per kernel, the share of the warp-state samples by stall reason and the
instructions that collect the most samples with their two largest reasons. A sample is charged
to the instruction the warp is about to issue, so a wait shows on the instruction after the one
that caused it (a barrier's wait on the instruction after BAR.SYNC, a load's on its first use).

usage: python3 bench/ncu_stalls.py FILE [--top 12]
"""
import argparse
import csv
import io
import lzma
import pathlib

SAMPLES = "Warp Stall Sampling (All Samples)"


def kernels(text):
    """[(kernel name, header, rows)] of one export: a "Kernel Name" line opens each kernel."""
    out = []
    reader = csv.reader(io.StringIO(text))
    for row in reader:
        if row and row[0] == "Kernel Name":
            out.append((row[1] if len(row) > 1 else "?", next(reader), []))
        elif out and len(row) == len(out[-1][1]):
            out[-1][2].append(row)
    return out


def summary(name, header, rows, top):
    """The report lines for one kernel."""
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    count = lambda row, h: int(row[col[h]] or 0)
    total = sum(count(r, SAMPLES) for r in rows)
    lines = [f"{name[:150]}", f"  {total} samples over {len(rows)} instructions"]
    if total == 0:
        return lines
    by_reason = sorted(((sum(count(r, h) for r in rows), h) for h in reasons), reverse=True)
    lines += [f"  {h.removeprefix('stall_'):18s} {100 * v / total:5.1f}%" for v, h in by_reason if v > 0.01 * total]
    lines.append("  top instructions (address, share, SASS, largest reasons):")
    for r in sorted(rows, key=lambda r: -count(r, SAMPLES))[:top]:
        main = sorted(((count(r, h), h) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{h.removeprefix('stall_')} {100 * v / total:.1f}%" for v, h in main if v)
        lines.append(f"    {r[col['Address']][-5:]} {100 * count(r, SAMPLES) / total:5.1f}%  "
                     f"{r[col['Source']].strip()[:56]:56s} {why}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=pathlib.Path)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    raw = args.file.read_bytes()
    text = (lzma.decompress(raw) if args.file.suffix == ".xz" else raw).decode()
    for name, header, rows in kernels(text):
        print("\n".join(summary(name, header, rows, args.top)))


if __name__ == "__main__":
    main()
