#!/usr/bin/env python3
"""Memory frontier: which crops train on this GPU under each memory mode, at what step time and
peak memory, and the longest crop each mode fits (found by search). Each measurement is one
`megafold fit` process (a clean allocator; an out-of-memory failure ends only that process),
and writes bench/results/frontier.json:

  {"gpu", "commit", "date", "rows": [{"model", "n", "memory_mode", "step_s", "peak_gb", ...}
                                     or {..., "error": "out of memory"}],
   "longest": [{"model", "memory_mode", "n", "fits_below"}]}

Workloads (src/cli/workload.h): trunk48 = the 48-block Pairformer stack, one pass, random
inputs; af3-full = the whole model of configs/af3-full.json (4 trunk passes, 48 diffusion
samples, pLDDT head every step, the template embedder with 4 templates) on bundled 3kpr
cropped or padded to n tokens with 1024 MSA rows (query + random).

usage: bench/frontier.py --bin build/megafold --out bench/results/frontier.json \\
           [--run MODEL:N:MODE[:STEPS] ...] [--search MODEL:MODE:FROM:STEP[:LIMIT] ...]
           [--set KEY=VALUE ...] [--merge]
  --run      one row (default steps 3; the step time is the median after the first step)
  --search   from crop FROM (known to fit) upwards in steps of STEP with one-step probes until one
             runs out of memory, then bisect to STEP / 4; LIMIT caps the crops tried; a probe
             over --probe-seconds ends the search ("longest" then says the search stopped there)
  --set      af3-full config overrides for every row of this run (`megafold fit --set`; e.g.
             model.templates.n_blocks=0 for the model without templates); rows record them
  --merge    keep the rows of --out whose (model, n, memory_mode, set) were not measured again
"""
import argparse
import datetime
import json
import pathlib
import subprocess
import sys
import time

from train_step import commit, device_name

ROOT = pathlib.Path(__file__).resolve().parent.parent


def fit(binary, model, n, mode, steps, timeout, assignments=()):
    """One `megafold fit` process: its JSON row (or the error), stamped with the commit and date
    so that a file merged from several runs keeps them apart."""
    return {**measure(binary, model, n, mode, steps, timeout, assignments), "commit": commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def measure(binary, model, n, mode, steps, timeout, assignments=()):
    cmd = [binary, "fit", "--model", model, "--n", str(n), "--memory", mode, "--steps", str(steps),
           "--data", str(ROOT / "data/pdb")] + [a for kv in assignments for a in ("--set", kv)]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": model, "n": n, "memory_mode": mode, "error": f"timeout after {timeout} s",
                **({"set": list(assignments)} if assignments else {})}
    sys.stderr.write(p.stderr[-2000:])
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"model": model, "n": n, "memory_mode": mode,
                "error": f"exit {p.returncode}: " + (p.stderr.strip().splitlines() or ["no output"])[-1][:300],
                **({"set": list(assignments)} if assignments else {})}
    row = json.loads(lines[-1])
    row["wall_s"] = round(time.time() - t0, 1)
    return row


def search(binary, model, mode, start, step, limit, probe_seconds, rows, assignments=()):
    """The longest crop (to step / 4) that fits, probing upwards from `start` (known to fit)."""
    fits, fails = start, None
    n = start + step
    while n <= limit:
        row = fit(binary, model, n, mode, 1, probe_seconds, assignments)
        row["search"] = True
        rows.append(row)
        print(json.dumps(row), flush=True)
        if "error" in row and "timeout" in row["error"]:
            return {"model": model, "memory_mode": mode, "n": fits, "fits_below": None,
                    "note": f"search stopped: a probe at {n} tokens ran over {probe_seconds} s"}
        if "error" in row:
            fails = n
            break
        fits = n
        n += step
    if fails is None:
        return {"model": model, "memory_mode": mode, "n": fits, "fits_below": None,
                "note": f"search stopped at the limit of {limit} tokens"}
    granule = max(step // 4, 32)
    while fails - fits > granule:
        mid = (fits + fails) // 2 // 32 * 32
        if mid <= fits:
            break
        row = fit(binary, model, mid, mode, 1, probe_seconds, assignments)
        row["search"] = True
        rows.append(row)
        print(json.dumps(row), flush=True)
        if "error" in row and "timeout" in row["error"]:
            break
        if "error" in row:
            fails = mid
        else:
            fits = mid
    return {"model": model, "memory_mode": mode, "n": fits, "fits_below": fails}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", nargs="*", default=[])
    ap.add_argument("--search", nargs="*", default=[])
    ap.add_argument("--timeout", type=int, default=900, help="seconds per measured row")
    ap.add_argument("--probe-seconds", type=int, default=240, help="seconds per search probe")
    ap.add_argument("--set", nargs="*", default=[], dest="assignments")
    ap.add_argument("--merge", action="store_true")
    args = ap.parse_args()
    rows, longest = [], []
    for spec in args.run:
        model, n, mode, *steps = spec.split(":")
        row = fit(args.bin, model, int(n), mode, int(steps[0]) if steps else 3, args.timeout, args.assignments)
        rows.append(row)
        print(json.dumps(row), flush=True)
    for spec in args.search:
        model, mode, start, step, *limit = spec.split(":")
        longest.append(search(args.bin, model, mode, int(start), int(step), int(limit[0]) if limit else 8192,
                              args.probe_seconds, rows, args.assignments))
        print(json.dumps(longest[-1]), flush=True)
    out = pathlib.Path(args.out)
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        key = lambda r: (r["model"], r["n"], r["memory_mode"], tuple(r.get("set", ())), bool(r.get("search")))
        mine = {key(r) for r in rows}
        rows = [r for r in old["rows"] if key(r) not in mine] + rows
        done = {(l["model"], l["memory_mode"]) for l in longest}
        longest = [l for l in old.get("longest", []) if (l["model"], l["memory_mode"]) not in done] + longest
    rows.sort(key=lambda r: (r["model"], r["memory_mode"], r["n"], tuple(r.get("set", ())), bool(r.get("search"))))
    result = {"gpu": device_name(), "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "rows": rows, "longest": longest}
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
