"""Faults a training run must survive or report by name (CPU, through the CLI): damaged
checkpoints on resume, diverging losses, two runs into one folder, stop signals."""
import json
import signal
import subprocess
import time

from test_resume import CONFIG, losses, refused, train


def test_resume_falls_back_past_a_damaged_checkpoint(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**CONFIG, "steps": 20, "checkpoint_every": 5}))
    out = tmp_path / "run"
    assert train(megafold_bin, source_dir, config, out).wait() == 0
    ckpts = sorted((out / "checkpoints").glob("step_*.pt"))
    assert [p.name for p in ckpts] == ["step_00000010.pt", "step_00000015.pt", "step_00000020.pt"]
    assert all((p.parent / (p.name + ".crc32")).exists() for p in ckpts)
    # A flipped bit in the newest one, a truncated one before it.
    data = bytearray(ckpts[2].read_bytes())
    data[len(data) // 2] ^= 0x10
    ckpts[2].write_bytes(bytes(data))
    ckpts[1].write_bytes(ckpts[1].read_bytes()[:1000])
    config.write_text(json.dumps({**CONFIG, "steps": 22, "checkpoint_every": 5}))
    proc = train(megafold_bin, source_dir, config, out, "--resume", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True)
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    assert "step_00000020.pt: checksum mismatch" in stdout + stderr
    assert "step_00000015.pt: checksum mismatch" in stdout + stderr
    assert sorted(losses(out))[-1] == 22
    # Every checkpoint damaged: the resume stops and names each.
    for p in (out / "checkpoints").glob("step_*.pt"):
        p.write_bytes(b"\0" * 64)
    stderr = refused(megafold_bin, source_dir, config, out, "--resume")
    assert "no usable checkpoint" in stderr and "step_00000022.pt" in stderr


def test_diverging_run_skips_steps_then_stops_naming_the_entries(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**CONFIG, "steps": 40, "max_skipped_steps": 3,
                                  "optim": {"lr": 1e30, "warmup_steps": 0, "clip_grad_norm": 0}}))
    out = tmp_path / "run"
    proc = train(megafold_bin, source_dir, config, out, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate()
    assert proc.returncode == 1, stderr
    assert "3 steps in a row" in stderr and "non-finite loss or gradient" in stderr and "entries " in stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    skipped = [r for r in rows if r["kind"] == "train" and r["skipped"] == 1]
    assert len(skipped) >= 2 and skipped[-1]["skipped_total"] >= 2


def test_second_run_into_a_busy_folder_is_refused_and_a_stop_signal_exits_75(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**CONFIG, "steps": 100000, "checkpoint_every": 1000}))
    out = tmp_path / "run"
    first = train(megafold_bin, source_dir, config, out, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
        assert first.poll() is None, first.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    stderr = refused(megafold_bin, source_dir, config, out, "--resume")
    assert f"is in use by another megafold train (pid {first.pid})" in stderr
    first.send_signal(signal.SIGHUP)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 75, stderr
    assert "stopped by a signal" in stderr and "--resume" in stderr
    assert list((out / "checkpoints").glob("step_*.pt")), "no checkpoint written on the stop signal"
    # The lock went with the process: the run resumes.
    config.write_text(json.dumps({**CONFIG, "steps": max(losses(out)) + 1, "checkpoint_every": 1000}))
    assert train(megafold_bin, source_dir, config, out, "--resume").wait() == 0
