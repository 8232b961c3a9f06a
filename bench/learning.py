#!/usr/bin/env python3
"""Learning check of the diffusion module (issue 5): overfit one real chain and record the
lDDT of structures sampled from the model (EMA weights) along the way.

Trains `megafold train` with the built-in cpu-diffusion config on a directory holding only
the chosen bundled entry, with data.overfit (train and validate on that entry), no dropout
and a short EMA, and writes one row per validation to --out (bench/results/learning.json):
test, steps, lddt_ca, lddt_all_atom, device, commit, date.

usage: python3 bench/learning.py --bin build/megafold --entry 1a8o --steps 1500 \
           --out bench/results/learning.json
"""
import argparse
import datetime
import json
import pathlib
import subprocess
import tempfile

from train_step import ROOT, commit, device_name  # same commit and host description as the step benchmark


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--entry", default="1a8o")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--val-every", type=int, default=250)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    files = sorted((ROOT / "data" / "pdb").glob(args.entry + ".*"))
    if not files:
        raise SystemExit(f"no bundled entry {args.entry} under data/pdb")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "data").mkdir()
        (tmp / "data" / files[0].name).symlink_to(files[0])
        config = {"base": "cpu-diffusion", "name": f"overfit-{args.entry}",
                  "data": {"dir": str(tmp / "data"), "crop_size": 72, "val_crop_size": 72, "overfit": True},
                  "model": {"dropout": 0.0},
                  "optim": {"warmup_steps": 50, "decay_every": 100000, "ema_decay": 0.99},
                  "steps": args.steps, "val_every": args.val_every, "log_every": 50, "checkpoint_every": 100000}
        (tmp / "config.json").write_text(json.dumps(config))
        subprocess.run([args.bin, "train", "--config", str(tmp / "config.json"), "--out", str(tmp / "run"),
                        "--quiet"], check=True)
        rows = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    device = device_name()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    result = {"commit": commit(), "date": date, "config": config, "rows": [
        {"test": f"overfit-{args.entry}", "steps": r["step"], "lddt_ca": round(r["lddt_ca"], 4),
         "lddt_all_atom": round(r["lddt_all_atom"], 4), "distogram_loss": round(r["distogram_loss"], 4),
         "device": device, "commit": commit(), "date": date}
        for r in rows if r["kind"] == "validation"]}
    out = pathlib.Path(args.out)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for r in result["rows"]:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
