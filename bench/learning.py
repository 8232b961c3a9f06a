#!/usr/bin/env python3
"""Learning check of the diffusion module: overfit one real chain and record the
lDDT of structures sampled from the model (EMA weights) along the way.

Trains `megafold train` with the built-in cpu-diffusion config (or --base) on a directory
holding only the chosen bundled entry, with data.overfit (train and validate on that entry), no dropout
and a short EMA, and writes one row per validation to --out (bench/results/learning.json):
test, steps, lddt_ca, lddt_all_atom, the all-atom lDDT of each molecule type the entry has
(lddt_protein, lddt_dna, lddt_rna, lddt_ligand), whether the sampled structure is the entry's
mirror image (mirrored, which lDDT cannot see), with a confidence head pTM, mean PAE and (with
several chains) ipTM, device, commit, date.

usage: python3 bench/learning.py --bin build/megafold --entry 1a8o --steps 1500 \
           --out bench/results/learning.json
       python3 bench/learning.py --bin build/megafold --entry 1lcd --name overfit-protein-dna --crop 80 ...
       python3 bench/learning.py --bin build/megafold --entry 4cup --name overfit-protein-ligand --crop 136 ...
       python3 bench/learning.py --bin build/megafold --entry 3u8v --name overfit-homodimer --crop 168 \
           --set model.confidence.n_blocks=1 --set model.confidence.every=1 \
           --set model.confidence.rollout_steps=20 --set model.diffusion.samples=16 ...

--run DIR keeps the run folder (checkpoints at every validation); run the same command again to
resume a run that was cut short, or record what it has with --from-run DIR --entry ENTRY.

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
    ap.add_argument("--base", default="cpu-diffusion", help="config the run starts from")
    ap.add_argument("--crop", type=int, default=72, help="crop size (cover the whole entry to overfit all of it)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads of the run (0: all)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--val-every", type=int, default=250)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config key for megafold train (repeatable)")
    ap.add_argument("--run", help="run folder to train in and keep (default: a temporary one); "
                    "an existing one is resumed from its newest checkpoint")
    ap.add_argument("--out", required=True)
    ap.add_argument("--from-run", help="record the validations of this run folder instead of training")
    ap.add_argument("--device", help="with --from-run: the machine that ran it (default: this one)")
    ap.add_argument("--commit", help="with --from-run: the commit it ran (default: this checkout's)")
    args = ap.parse_args()
    if args.from_run:
        return record_run(pathlib.Path(args.from_run), pathlib.Path(args.out), args.device, args.commit, args.entry)
    if not args.bin:
        ap.error("--bin is required to train")
    files = sorted((ROOT / "data" / "pdb").glob(args.entry + ".*"))
    if not files:
        raise SystemExit(f"no bundled entry {args.entry} under data/pdb")
    with tempfile.TemporaryDirectory() as tmp:
        run = pathlib.Path(args.run) if args.run else pathlib.Path(tmp) / "run"
        data = run.parent / f"{run.name}-data"
        data.mkdir(parents=True, exist_ok=True)
        if not (data / files[0].name).exists():
            (data / files[0].name).symlink_to(files[0].resolve())
        # Checkpoints at every validation, so a run cut short resumes where it stopped.
        config = {"base": args.base, "name": args.name or f"overfit-{args.entry}", "threads": args.threads,
                  "data": {"dir": str(data), "crop_size": args.crop, "val_crop_size": args.crop,
                           "overfit": True},
                  "model": {"dropout": 0.0},
                  "optim": {"warmup_steps": 50, "decay_every": 100000, "ema_decay": 0.99},
                  "steps": args.steps, "val_every": args.val_every, "log_every": 50,
                  "checkpoint_every": args.val_every}
        cfg = run.parent / f"{run.name}-config.json"
        cfg.write_text(json.dumps(config))
        cmd = [args.bin, "train", "--config", str(cfg), "--out", str(run), "--quiet"]
        cmd += [a for kv in args.set for a in ("--set", kv)]
        if (run / "checkpoints").is_dir():
            cmd.append("--resume")
        subprocess.run(cmd, check=True)
        record_run(run, pathlib.Path(args.out), None, None, entry=args.entry)


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


def record_run(run, out, device, rev, entry=None):
    """One row per validation of a run folder. Overfit runs are recorded under the config's name
    with the lDDT of each molecule type; other runs as default-<config>."""
    config = json.loads((run / "config.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    overfit = config.get("data", {}).get("overfit", False)
    test = config["name"] if overfit else f"default-{config['name']}"
    device, rev = device or device_name(), rev or commit()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    types = ("lddt_protein", "lddt_dna", "lddt_rna", "lddt_ligand")
    rows = [r for r in rows if r["kind"] == "validation" and "lddt_ca" in r]
    # A resumed run logs the validations after its checkpoint again: keep the last of each step.
    rows = list({r["step"]: r for r in rows}.values())
    result = {"commit": rev, "date": date, "configs": {test: config}, "rows": [
        {"test": test, **({"entry": entry} if entry else {}), "steps": r["step"],
         "lddt_ca": round(r["lddt_ca"], 4), "lddt_all_atom": round(r["lddt_all_atom"], 4),
         **({t: round(r[t], 4) for t in types if t in r} if overfit else {}),
         **({k: round(r[k], 4) for k in ("ptm", "iptm", "mean_pae", "mirrored") if k in r} if overfit else {}),
         **({} if overfit else {"plddt": round(r["plddt"], 2) if "plddt" in r else None}),
         "distogram_loss": round(r["distogram_loss"], 4), "device": device, "commit": rev, "date": date}
        for r in rows]}
    write_merged(out, result)


if __name__ == "__main__":
    main()
