"""Data parallelism through the CLI (`megafold train --nproc N`, Gloo on CPU): every rank
averages its gradients with the others (in buckets summed while backward runs), so ranks that see
the same example train exactly as one process does; rank 0 alone logs and writes checkpoints; a
bad launch variable is named."""
import json
import os
import shutil
import subprocess

CONFIG = {
    "base": "cpu-tiny",
    "model": {"c_s": 16, "c_z": 8, "n_blocks": 1, "tri_attn_heads": 1, "tri_attn_head_dim": 8,
              "tri_mul_hidden": 8, "single_attn_heads": 2, "single_attn_head_dim": 8, "recycles": 1,
              "diffusion": {"samples": 1, "sampler_steps": 2}, "confidence": {"n_blocks": 0}},
    # One entry, cropped whole (66 residues < 96): every rank draws the same example.
    "data": {"crop_size": 96, "val_crop_size": 96, "overfit": True, "workers": 1},
    "device": "cpu", "steps": 4, "log_every": 1, "val_every": 0, "checkpoint_every": 4, "threads": 1,
}


def train_rows(run_dir):
    with open(run_dir / "metrics.jsonl") as f:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, f) if r["kind"] == "train"]


def test_ranks_on_the_same_example_train_exactly_as_one_process(megafold_bin, source_dir, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(source_dir / "data/pdb/1a8o.cif.gz", data)
    config = tmp_path / "dp.json"
    config.write_text(json.dumps(CONFIG))
    runs = {}
    for name, extra in (("one", []), ("two", ["--nproc", "2"]), ("three", ["--nproc=3"]),
                        ("small_buckets", ["--nproc", "2", "--bucket-mb", "0.01"])):
        out = tmp_path / name
        subprocess.run([megafold_bin, "train", "--config", str(config), "--data", str(data), "--out", str(out),
                        "--quiet", *extra], check=True, timeout=300)
        runs[name] = out
    one = train_rows(runs["one"])
    assert len(one) == 4
    # Two ranks: bitwise, since (g + g) / 2 == g exactly in floating point; also with buckets of
    # ~10 KB, summed one after another while backward runs.
    assert train_rows(runs["two"]) == one
    assert train_rows(runs["small_buckets"]) == one
    with open(runs["small_buckets"] / "metrics.jsonl") as f:
        rows = [r for r in map(json.loads, f) if r["kind"] == "train"]
    assert all(r["grad_buckets"] > 10 and r["grad_buckets_during_backward"] == r["grad_buckets"] for r in rows), rows
    # Three: (g + g + g) / 3 rounds, so agreement to float32 rounding, compounded over 4 steps.
    for (s3, l3, g3), (s1, l1, g1) in zip(train_rows(runs["three"]), one):
        assert s3 == s1 and abs(l3 - l1) <= 1e-5 * abs(l1) and abs(g3 - g1) <= 1e-4 * abs(g1), (s3, l3, l1, g3, g1)
    for name in ("two", "three"):
        assert sorted(p.name for p in (runs[name] / "checkpoints").iterdir()) == [
            "step_00000004.pt", "step_00000004.pt.crc32"]


def test_parameters_without_a_gradient_in_a_step(megafold_bin, source_dir, tmp_path):
    """The confidence head trains every other step: in the steps between, its parameters get no
    gradient, which the all-reduce fills with zeros (and the optimiser's zero_grad must still
    work on them); two ranks still train as one process."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(source_dir / "data/pdb/1a8o.cif.gz", data)
    config = tmp_path / "conf.json"
    model = dict(CONFIG["model"], confidence={"n_blocks": 1, "every": 2, "rollout_steps": 2})
    config.write_text(json.dumps(dict(CONFIG, model=model)))
    runs = {}
    for name, extra in (("one", []), ("two", ["--nproc", "2", "--bucket-mb", "0.01"])):
        runs[name] = tmp_path / name
        subprocess.run([megafold_bin, "train", "--config", str(config), "--data", str(data), "--out", str(runs[name]),
                        "--quiet", *extra], check=True, timeout=300)
    assert len(train_rows(runs["one"])) == 4
    assert train_rows(runs["two"]) == train_rows(runs["one"])


def test_a_bad_launch_variable_is_named(megafold_bin, source_dir, tmp_path):
    env = dict(os.environ, RANK="5", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999")
    r = subprocess.run([megafold_bin, "train", "--config", "cpu-tiny", "--data", str(source_dir / "data/pdb"),
                        "--out", str(tmp_path / "bad"), "--quiet", "--steps", "1"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "RANK (or SLURM_PROCID) must lie in [0, 2), got 5" in r.stderr, r.stderr


def test_a_checkpoint_resumes_at_another_world_size(megafold_bin, source_dir, tmp_path):
    """One logical checkpoint: written by 2 ranks and resumed by 1, or written by 1 and resumed
    by 2, the run continues exactly as an uninterrupted single process (same example on every
    rank, and (g + g) / 2 == g, so bitwise)."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(source_dir / "data/pdb/1a8o.cif.gz", data)
    config = tmp_path / "dp.json"
    config.write_text(json.dumps(dict(CONFIG, checkpoint_every=2)))

    def train(out, *extra):
        subprocess.run([megafold_bin, "train", "--config", str(config), "--data", str(data), "--out", str(out),
                        "--quiet", *extra], check=True, timeout=300)

    train(tmp_path / "whole")
    whole = train_rows(tmp_path / "whole")
    for name, first, second in (("2to1", ["--nproc", "2"], []), ("1to2", [], ["--nproc", "2"])):
        out = tmp_path / name
        train(out, "--steps", "2", *first)
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
            "step_00000002.pt", "step_00000002.pt.crc32"]
        train(out, "--resume", *second)
        assert train_rows(out) == whole, name
