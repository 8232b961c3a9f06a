#!/usr/bin/env python3
"""Training-step benchmark: runs `megafold train` for named configs and records the median
step time (steps after the first three) and peak memory, as bench/results/train_step.json rows.

usage: bench/train_step.py --bin build/megafold --out bench/results/train_step.json \
           gpu-small:100 af3-full:12 [--merge]
Each CONFIG:STEPS trains the built-in config for STEPS steps on data/pdb (logging every step,
no validation). Rows name what the step contains: trunk blocks and passes (recycles: training
draws 1..recycles per step), diffusion samples per step, confidence-head blocks and interval. --merge keeps rows of other devices already in --out; every row
carries the device, commit and date of its own run, and the top level names the GPU of the GPU
rows (or the CPU when there are none).
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def device_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if out:
            return out.splitlines()[0]
    except (OSError, subprocess.CalledProcessError):
        pass
    cpu = platform.processor() or "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {cpu}, {os.cpu_count()} threads"


def commit():
    if os.environ.get("MEGAFOLD_COMMIT"):
        return os.environ["MEGAFOLD_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(binary, config, steps, workdir):
    cfg = workdir / f"{config}.json"
    cfg.write_text(json.dumps({"base": config, "log_every": 1, "val_every": -1,
                               "checkpoint_every": 1000000}))
    out = workdir / config
    subprocess.run([binary, "train", "--config", str(cfg), "--data", str(ROOT / "data/pdb"),
                    "--out", str(out), "--steps", str(steps)], check=True)
    rows = [json.loads(l) for l in open(out / "metrics.jsonl")]
    train = [r for r in rows if r["kind"] == "train"]
    resolved = json.loads((out / "config.json").read_text())
    timed = [r["step_ms"] for r in train[3:]] or [r["step_ms"] for r in train]
    return {
        "config": config,
        "blocks": resolved["model"]["n_blocks"],
        "n": resolved["data"]["crop_size"],
        "c_s": resolved["model"]["c_s"],
        "c_z": resolved["model"]["c_z"],
        "steps": len(train),
        "step_ms": round(statistics.median(timed), 2),
        "peak_gb": round(max(r["peak_memory_gb"] for r in train), 3),
        "checkpointing": resolved["model"]["checkpoint_blocks"],
        "recycles": resolved["model"].get("recycles", 1),
        "diffusion_samples": resolved["model"].get("diffusion", {}).get("samples", 0),
        "diffusion_blocks": resolved["model"].get("diffusion", {}).get("n_blocks", 0),
        "confidence_blocks": resolved["model"].get("confidence", {}).get("n_blocks", 0),
        "confidence_every": resolved["model"].get("confidence", {}).get("every", 0),
        "bf16": resolved["bf16"] and not device_name().startswith("CPU"),
        "loss_first": train[0]["loss"],
        "loss_last": train[-1]["loss"],
        "device": device_name(),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("runs", nargs="+", metavar="CONFIG:STEPS")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.runs:
            config, steps = spec.split(":")
            rows.append(run(args.bin, config, int(steps), pathlib.Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    out = pathlib.Path(args.out)
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        rows = [r for r in old["rows"] if r["device"] != device_name()] + rows
    gpus = [r["device"] for r in rows if not r["device"].startswith("CPU")]
    result = {"gpu": gpus[0] if gpus else device_name(), "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "rows": rows}
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
