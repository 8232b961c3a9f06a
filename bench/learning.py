#!/usr/bin/env python3
"""Learning check of the diffusion module: overfit one real chain and record the
lDDT of structures sampled from the model (EMA weights) along the way.

Trains `megafold train` with the built-in cpu-diffusion config on a directory holding only
the chosen bundled entry, with data.overfit (train and validate on that entry), no dropout
and a short EMA, and writes one row per validation to --out (bench/results/learning.json):
test, steps, lddt_ca, lddt_all_atom, the all-atom lDDT of each molecule type the entry has
(lddt_protein, lddt_dna, lddt_rna, lddt_ligand), device, commit, date.

usage: python3 bench/learning.py --bin build/megafold --entry 1a8o --steps 1500 \
           --out bench/results/learning.json
       python3 bench/learning.py --bin build/megafold --entry 1lcd --name overfit-protein-dna --crop 80 ...
       python3 bench/learning.py --bin build/megafold --entry 4cup --name overfit-protein-ligand --crop 136 ...

The default training run (the README's main command) is recorded from its run folder, on the
machine that ran it: one row per validation of the held-out entries, test "default-<config>",
merged into --out beside the other tests' rows.

usage: python3 bench/learning.py --from-run runs/default --out bench/results/learning.json \
           [--device "NVIDIA H200"] [--commit REV]
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
    ap.add_argument("--bin", help="megafold binary (required unless --from-run)")
    ap.add_argument("--entry", default="1a8o")
    ap.add_argument("--name", help="the test's name (default overfit-ENTRY)")
    ap.add_argument("--crop", type=int, default=72, help="crop size (cover the whole entry to overfit all of it)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads of the run (0: all)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--val-every", type=int, default=250)
    ap.add_argument("--out", required=True)
    ap.add_argument("--from-run", help="record the validations of this run folder instead of training")
    ap.add_argument("--device", help="with --from-run: the machine that ran it (default: this one)")
    ap.add_argument("--commit", help="with --from-run: the commit it ran (default: this checkout's)")
    args = ap.parse_args()
    if args.from_run:
        return record_run(args)
    if not args.bin:
        ap.error("--bin is required to train")
    files = sorted((ROOT / "data" / "pdb").glob(args.entry + ".*"))
    if not files:
        raise SystemExit(f"no bundled entry {args.entry} under data/pdb")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "data").mkdir()
        (tmp / "data" / files[0].name).symlink_to(files[0])
        name = args.name or f"overfit-{args.entry}"
        config = {"base": "cpu-diffusion", "name": name, "threads": args.threads,
                  "data": {"dir": str(tmp / "data"), "crop_size": args.crop, "val_crop_size": args.crop,
                           "overfit": True},
                  "model": {"dropout": 0.0},
                  "optim": {"warmup_steps": 50, "decay_every": 100000, "ema_decay": 0.99},
                  "steps": args.steps, "val_every": args.val_every, "log_every": 50, "checkpoint_every": 100000}
        (tmp / "config.json").write_text(json.dumps(config))
        subprocess.run([args.bin, "train", "--config", str(tmp / "config.json"), "--out", str(tmp / "run"),
                        "--quiet"], check=True)
        rows = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    device = device_name()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    types = ("lddt_protein", "lddt_dna", "lddt_rna", "lddt_ligand")
    result = {"commit": commit(), "date": date, "configs": {name: config}, "rows": [
        {"test": name, "entry": args.entry, "steps": r["step"], "lddt_ca": round(r["lddt_ca"], 4),
         "lddt_all_atom": round(r["lddt_all_atom"], 4),
         **{t: round(r[t], 4) for t in types if t in r},
         "distogram_loss": round(r["distogram_loss"], 4), "device": device, "commit": commit(), "date": date}
        for r in rows if r["kind"] == "validation"]}
    write_merged(pathlib.Path(args.out), result)


def write_merged(out, result):
    """Writes result, keeping the rows (and configs) of other tests already in out."""
    tests = {r["test"] for r in result["rows"]}
    if out.exists():
        old = json.loads(out.read_text())
        old_configs = old.get("configs") or ({old["rows"][0]["test"]: old["config"]} if "config" in old else {})
        result["configs"] = {**{k: v for k, v in old_configs.items() if k not in tests}, **result["configs"]}
        result["rows"] = [r for r in old["rows"] if r["test"] not in tests] + result["rows"]
    out.write_text(json.dumps(result, indent=2) + "\n")
    for r in result["rows"]:
        print(json.dumps(r))


def record_run(args):
    run = pathlib.Path(args.from_run)
    config = json.loads((run / "config.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    test = f"default-{config['name']}"
    device, rev = args.device or device_name(), args.commit or commit()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    result = {"commit": rev, "date": date, "configs": {test: config}, "rows": [
        {"test": test, "steps": r["step"], "lddt_ca": round(r["lddt_ca"], 4), "lddt_all_atom": round(r["lddt_all_atom"], 4),
         "plddt": round(r["plddt"], 2) if "plddt" in r else None, "distogram_loss": round(r["distogram_loss"], 4),
         "device": device, "commit": rev, "date": date}
        for r in rows if r["kind"] == "validation" and "lddt_ca" in r]}
    write_merged(pathlib.Path(args.out), result)


if __name__ == "__main__":
    main()
