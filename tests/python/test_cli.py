"""The CLI surface: help on every subcommand, info, and errors that say what to do."""
import subprocess


def run(megafold_bin, *args):
    return subprocess.run([megafold_bin, *args], capture_output=True, text=True, timeout=120)


def test_help_everywhere(megafold_bin):
    top = run(megafold_bin, "--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("info", "train", "predict", "eval"))
    for cmd in ("info", "train", "predict", "eval"):
        r = run(megafold_bin, cmd, "--help")
        assert r.returncode == 0, cmd
        assert r.stdout.startswith(f"usage: megafold {cmd}"), r.stdout
    assert "--resume" in run(megafold_bin, "train", "--help").stdout


def test_info_lists_ops_and_configs(megafold_bin):
    r = run(megafold_bin, "info")
    assert r.returncode == 0
    for op in ("triangle_attention", "triangle_multiplication", "layernorm_linear",
               "swiglu_transition", "attention_pair_bias"):
        assert f"megafold::{op}" in r.stdout
    assert "cpu-tiny" in r.stdout and "af3-full" in r.stdout


def test_errors_are_actionable(megafold_bin, tmp_path):
    r = run(megafold_bin, "train", "--stpes", "3")
    assert r.returncode == 1 and "unknown option '--stpes'" in r.stderr and "--steps" in r.stderr
    r = run(megafold_bin, "train", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "does not exist" in r.stderr and "--data" in r.stderr
    r = run(megafold_bin, "train", "--steps", "ten")
    assert r.returncode == 1 and "expects an integer" in r.stderr
    r = run(megafold_bin, "frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr
