#!/usr/bin/env python3
"""Per-module memory profile of a training step of the whole model (configs/af3-full.json) at
several crops and memory modes: `megafold memory` for each, rows collected into
bench/results/memory.json ({"gpu", "commit", "date", "rows"}). Each row names the crop, the
memory mode and the module, with held_gb (what its forward leaves for backward, outputs
included), forward_peak_gb and backward_peak_gb (from the same base); plus the optimizer state
and the whole step's peak. A crop that does not fit gives one row with "error".

usage: bench/memory.py --bin build/megafold --out bench/results/memory.json \\
           [--crops 384 768 1024] [--modes fast balanced frontier] [--merge]
"""
import argparse
import datetime
import json
import pathlib
import subprocess
import sys

from train_step import commit, device_name

ROOT = pathlib.Path(__file__).resolve().parent.parent


def profile(binary, n, mode, timeout):
    cmd = [binary, "memory", "--n", str(n), "--memory", mode, "--data", str(ROOT / "data/pdb")]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"crop": n, "memory_mode": mode, "error": f"timeout after {timeout} s"}]
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        rows.append({"crop": n, "memory_mode": mode,
                     "error": "out of memory" if "out of memory" in p.stderr else f"exit {p.returncode}: {tail[:300]}"})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--crops", type=int, nargs="+", default=[384, 768, 1024])
    ap.add_argument("--modes", nargs="+", default=["fast", "balanced", "frontier"])
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--merge", action="store_true")
    args = ap.parse_args()
    rows = []
    for n in args.crops:
        for mode in args.modes:
            got = profile(args.bin, n, mode, args.timeout)
            for r in got:
                print(json.dumps(r), flush=True)
            rows += got
    out = pathlib.Path(args.out)
    if args.merge and out.exists():
        done = {(r["crop"], r["memory_mode"]) for r in rows}
        rows = [r for r in json.loads(out.read_text())["rows"] if (r["crop"], r["memory_mode"]) not in done] + rows
    result = {"gpu": device_name(), "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": rows}
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
