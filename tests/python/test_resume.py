"""Kill-and-resume through the CLI: a run SIGKILLed after a checkpoint and resumed with
--resume logs bitwise the same training losses as an uninterrupted run (CPU), under every
memory mode."""
import json
import os
import signal
import subprocess
import time

import pytest

CONFIG = {
    "base": "cpu-tiny",
    "model": {"c_s": 16, "c_z": 8, "n_blocks": 1, "tri_attn_heads": 1, "tri_attn_head_dim": 8,
              "tri_mul_hidden": 8, "single_attn_heads": 2, "single_attn_head_dim": 8},
    "data": {"crop_size": 24, "val_crop_size": 24},
    "optim": {"warmup_steps": 3},
    "device": "cpu", "steps": 60, "log_every": 1, "val_every": 0, "checkpoint_every": 10, "threads": 1,
}


def losses(run_dir):
    out = {}
    with open(run_dir / "metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            if row["kind"] == "train":
                assert row["step"] not in out, f"step {row['step']} logged twice"
                out[row["step"]] = (row["loss"], row["grad_norm"])
    return out


def train(megafold_bin, source_dir, config, out, *extra, **popen):
    cmd = [megafold_bin, "train", "--config", str(config), "--data", str(source_dir / "data/pdb"),
           "--out", str(out), "--quiet", *extra]
    return subprocess.Popen(cmd, **popen)


@pytest.mark.parametrize("memory", ["fast", "balanced", "frontier"])
def test_killed_run_resumes_with_identical_losses(megafold_bin, source_dir, tmp_path, memory):
    config = tmp_path / "tiny.json"
    # 100 pairs per chunk: the row-chunked ops of balanced/frontier run on 4 rows of 24 at a time.
    model = {**CONFIG["model"], "memory": memory, "memory_chunk_pairs": 100}
    config.write_text(json.dumps({**CONFIG, "model": model}))

    full = tmp_path / "full"
    assert train(megafold_bin, source_dir, config, full).wait() == 0
    reference = losses(full)
    assert sorted(reference) == list(range(1, 61))

    killed = tmp_path / "killed"
    proc = train(megafold_bin, source_dir, config, killed)
    deadline = time.time() + 300
    while not (killed / "checkpoints" / "step_00000020.pt").exists():
        assert proc.poll() is None, "run ended before the checkpoint to kill at"
        assert time.time() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    interrupted_at = max(losses(killed))
    assert interrupted_at < 60, "the run finished before it was killed; nothing was tested"

    assert train(megafold_bin, source_dir, config, killed, "--resume").wait() == 0
    resumed = losses(killed)
    assert resumed == reference  # bitwise: floats are logged with 17 significant digits
    assert not list((killed / "checkpoints").glob("*.tmp"))


def test_resume_without_checkpoint_starts_fresh(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**CONFIG, "steps": 3}))
    out = tmp_path / "run"
    proc = train(megafold_bin, source_dir, config, out, "--resume", stdout=subprocess.PIPE, text=True)
    stdout, _ = proc.communicate()
    assert proc.returncode == 0
    assert sorted(losses(out)) == [1, 2, 3]
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["c_z"] == 8 and saved["steps"] == 3


def refused(megafold_bin, source_dir, config, out, *extra):
    """Runs train expecting exit code 1; returns stderr."""
    proc = train(megafold_bin, source_dir, config, out, *extra, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate()
    assert proc.returncode == 1, stderr
    return stderr


def finished_run(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**CONFIG, "steps": 2}))
    out = tmp_path / "run"
    assert train(megafold_bin, source_dir, config, out).wait() == 0
    return config, out


def test_bad_config_key_is_reported(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "bad.json"
    config.write_text('{"model": {"c_zz": 4}}')
    stderr = refused(megafold_bin, source_dir, config, tmp_path / "x")
    assert "unknown key 'c_zz'" in stderr and "bad.json" in stderr


def test_new_run_refuses_a_folder_with_checkpoints(megafold_bin, source_dir, tmp_path):
    config, out = finished_run(megafold_bin, source_dir, tmp_path)
    stderr = refused(megafold_bin, source_dir, config, out)
    assert "already holds checkpoints" in stderr and "--resume" in stderr


def test_resume_with_other_model_is_refused(megafold_bin, source_dir, tmp_path):
    config, out = finished_run(megafold_bin, source_dir, tmp_path)
    config.write_text(json.dumps({**CONFIG, "steps": 4, "model": {**CONFIG["model"], "c_z": 16}}))
    assert "model.c_z 8 -> 16" in refused(megafold_bin, source_dir, config, out, "--resume")


def exported(megafold_bin, checkpoint, out):
    from safetensors.torch import load_file
    r = subprocess.run([megafold_bin, "export", "--checkpoint", str(checkpoint), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return load_file(out / "model.safetensors"), load_file(out / "ema.safetensors")


def test_init_starts_a_new_stage_from_a_checkpoint(megafold_bin, source_dir, tmp_path):
    config, first = finished_run(megafold_bin, source_dir, tmp_path)
    # The next stage: another crop and schedule, the same model; a learning rate so small that
    # one step leaves the weights where they started (to 1e-20).
    stage = tmp_path / "stage.json"
    stage.write_text(json.dumps({**CONFIG, "steps": 1, "data": {"crop_size": 32, "val_crop_size": 32},
                                 "optim": {"lr": 1e-30, "warmup_steps": 1}, "checkpoint_every": 1}))
    out = tmp_path / "stage"
    assert train(megafold_bin, source_dir, stage, out, "--init", str(first / "checkpoints/step_00000002.pt")).wait() == 0
    assert sorted(losses(out)) == [1]  # a fresh run: step 1
    before, before_ema = exported(megafold_bin, first / "checkpoints/step_00000002.pt", tmp_path / "a")
    after, after_ema = exported(megafold_bin, out / "checkpoints/step_00000001.pt", tmp_path / "b")
    assert set(before) == set(after)
    assert max((before[k] - after[k]).abs().max().item() for k in before) < 1e-20
    # The EMA started from the checkpoint's EMA, not from the weights: one update moved it by
    # 1 - decay of the gap between them.
    gap = max((before_ema[k] - before[k]).abs().max().item() for k in before)
    assert gap > 0
    assert max((after_ema[k] - before_ema[k]).abs().max().item() for k in before) < 0.01 * gap
    # Another model's checkpoint does not fit; the error names it.
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**CONFIG, "steps": 1, "model": {**CONFIG["model"], "c_z": 16}}))
    stderr = refused(megafold_bin, source_dir, other, tmp_path / "o", "--init",
                     str(first / "checkpoints/step_00000002.pt"))
    assert "step_00000002.pt" in stderr and "in this run's model" in stderr
