#!/usr/bin/env python3
"""Loader at PDB scale: feature caches of 1k, 10k and 100k entries (the bundled structures under
new ids, with synthetic MSAs of --msa-rows rows per chain; `megafold dev synth-cache`), read as
training reads them (`megafold dev loader`: the index at start, each entry memory-mapped and
decoded when sampled). Per cache: start-up time, resident memory after start and after
--samples samples, samples/s, and the resident memory each entry adds to the start (growth over
the smallest cache, per added entry). Results: bench/results/loader_scale.json (`host` or
`gpu`, `commit`, `date`, `rows`).

usage: python3 bench/loader_scale.py --bin build/megafold --out bench/results/loader_scale.json
           [--entries 1000 10000 100000] [--msa-rows 1024] [--samples 200] [--work DIR]
The caches are written under --work (default: a temporary directory; 100k entries with 1024-row
MSAs take ~20 GB) and removed afterwards.
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

from train_step import ROOT, commit, device_name


def run_json(cmd):
    out = subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--entries", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--msa-rows", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count()))
    ap.add_argument("--work")
    args = ap.parse_args()
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="megafold_loader_scale_"))
    rows = []
    try:
        for n in sorted(args.entries):
            cache = work / f"cache_{n}"
            t0 = time.time()
            built = run_json([args.bin, "dev", "synth-cache", "--from", ROOT / "data/pdb", "--entries", n,
                              "--msa-rows", args.msa_rows, "--out", cache])
            build_s = time.time() - t0
            m = run_json([args.bin, "dev", "loader", "--data", cache, "--samples", args.samples,
                          "--workers", args.workers])
            rows.append({"entries": n, "msa_rows": args.msa_rows, "cache_gb": round(built["bytes"] / 1e9, 3),
                         "build_s": round(build_s, 1), "startup_s": round(m["startup_s"], 4),
                         "rss_start_gb": round(m["rss_start_gb"], 4), "rss_after_gb": round(m["rss_after_gb"], 4),
                         "samples_per_s": round(m["samples_per_s"], 1)})
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(cache)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    base = rows[0]
    for r in rows:
        extra = r["entries"] - base["entries"]
        r["rss_bytes_per_entry"] = round((r["rss_start_gb"] - base["rss_start_gb"]) * 1e9 / extra) if extra else None
    name = device_name()
    result = {("host" if name.startswith("CPU") else "gpu"): name, "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "workers": args.workers, "samples": args.samples, "rows": rows}
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
