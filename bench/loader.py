#!/usr/bin/env python3
"""Loader benchmark: samples/s of `megafold dev loader` at 384- and 768-token crops, per
sample from raw structure files (parsed each time) and from a feature cache (memory-mapped each
time), on this host; plus the cache build throughput. Rows go to bench/results/loader.json
(mode, crop, samples_per_s, host, ...), merged with other hosts' rows.

usage: python3 bench/loader.py --bin build/megafold --out bench/results/loader.json [--workers N]
       python3 bench/loader.py --out bench/results/loader.json --from-run RUN --host "NVIDIA H200 host"
The second form records the fraction of step time a real training run waited for data
(metrics.jsonl's data_wait_ms over step_ms, first 5 steps excluded) as a row of mode "train".
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import tempfile

from train_step import ROOT, commit, device_name


def host():
    return device_name() if device_name().startswith("CPU") else f"{device_name()} host, {os.cpu_count()} threads"


def measure(args):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = pathlib.Path(tmp) / "cache"
        out = subprocess.run([args.bin, "cache", "--input", str(ROOT / "data/pdb"), "--out", str(cache), "--quiet",
                              "--jobs", str(args.workers)], capture_output=True, text=True, check=True).stdout
        inputs_per_s = float(out.rsplit("(", 1)[1].split()[0])
        rows.append({"mode": "cache-build", "crop": None, "samples_per_s": None, "files_per_s": inputs_per_s,
                     "files_per_s_per_core": inputs_per_s / args.workers, "workers": args.workers})
        for crop in (384, 768):
            for mode, data in (("raw", ROOT / "data/pdb"), ("cache", cache)):
                r = subprocess.run([args.bin, "dev", "loader", "--data", str(data), "--crop", str(crop), "--samples",
                                    str(args.samples), "--workers", str(args.workers)],
                                   capture_output=True, text=True, check=True)
                rows.append(json.loads(r.stdout))
    return rows


def from_run(args):
    rows = [json.loads(l) for l in (pathlib.Path(args.from_run) / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"][5:]
    wait, total = sum(r["data_wait_ms"] for r in train), sum(r["step_ms"] for r in train)
    config = json.loads((pathlib.Path(args.from_run) / "config.json").read_text())
    return [{"mode": "train", "crop": config["data"]["crop_size"], "samples_per_s": round(1e3 * len(train) / total, 3),
             "data_wait_fraction": wait / total, "steps": len(train), "workers": config["data"]["workers"],
             "config": config["name"]}]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--from-run")
    ap.add_argument("--host")
    ap.add_argument("--commit")
    args = ap.parse_args()
    if not args.from_run and not args.bin:
        ap.error("--bin is required to measure")
    new = from_run(args) if args.from_run else measure(args)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for r in new:
        r.update({"host": args.host or host(), "commit": args.commit or commit(), "date": date})
    out = pathlib.Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    keys = {(r["mode"], r["host"]) for r in new}
    rows = [r for r in rows if (r["mode"], r["host"]) not in keys] + new
    out.write_text(json.dumps({"commit": args.commit or commit(), "date": date, "rows": rows}, indent=2) + "\n")
    for r in new:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
