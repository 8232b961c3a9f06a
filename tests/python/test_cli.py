"""The CLI surface: help on every subcommand, info, and errors that say what to do."""
import subprocess


def run(megafold_bin, *args):
    return subprocess.run([megafold_bin, *args], capture_output=True, text=True, timeout=120)


def test_help_everywhere(megafold_bin):
    top = run(megafold_bin, "--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("info", "train", "predict", "eval"))
    for cmd in ("info", "train", "predict", "eval", "export", "config", "cache", "dev block", "dev loader",
                "dev shard-check", "dev hand-probe"):
        r = run(megafold_bin, *cmd.split(), "--help")
        assert r.returncode == 0, cmd
        assert r.stdout.startswith(f"usage: megafold {cmd}"), r.stdout
    assert "dev block" in run(megafold_bin, "--help").stdout and "shard-check" in run(megafold_bin, "dev").stdout
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


def test_cache_and_loader_throughput(megafold_bin, source_dir, tmp_path):
    cache = tmp_path / "cache"
    r = run(megafold_bin, "cache", "--input", str(source_dir / "data/pdb"), "--out", str(cache), "--jobs", "2")
    assert r.returncode == 0, r.stderr
    n = sum(1 for f in (source_dir / "data/pdb").iterdir() if f.name.endswith((".cif.gz", ".pdb.gz")))
    assert f"{n} entries ({n} built, 0 already cached), 0 skipped" in r.stdout
    again = run(megafold_bin, "cache", "--input", str(source_dir / "data/pdb"), "--out", str(cache))
    assert f"(0 built, {n} already cached)" in again.stdout
    import json
    for data in (source_dir / "data/pdb", cache):
        r = run(megafold_bin, "dev", "loader", "--data", str(data), "--crop", "64", "--samples", "20", "--workers", "2")
        assert r.returncode == 0, r.stderr
        row = json.loads(r.stdout)
        assert row["mode"] == ("cache" if data == cache else "raw") and row["samples_per_s"] > 0


def test_block_timing(megafold_bin):
    import json
    rows = []
    cases = (("kernel", "plain", "megafold-kernel"), ("reference", "plain", "megafold-reference"),
             ("kernel", "rows", "megafold-kernel-rows"))
    for ops, path, _ in cases:
        r = run(megafold_bin, "dev", "block", "--n", "24", "--steps", "2", "--warmup", "1", "--ops", ops,
                "--pair-path", path, "--device", "cpu")
        assert r.returncode == 0, r.stderr
        rows.append(json.loads(r.stdout))
    for row, (_, _, impl) in zip(rows, cases):
        assert row["impl"] == impl and row["n"] == 24 and row["c_z"] == 128
        assert 0 < row["fwd_ms"] <= row["fwdbwd_ms"] and row["peak_gb"] > 0
        # On the CPU the host's time to issue a step is the step itself.
        assert abs(row["host_ms"] - row["fwdbwd_ms"]) <= 0.05 * row["fwdbwd_ms"] + 0.5
    r = run(megafold_bin, "dev", "block", "--ops", "fast")
    assert r.returncode == 1 and "--ops must be kernel or reference" in r.stderr
    r = run(megafold_bin, "dev", "block", "--pair-path", "cols")
    assert r.returncode == 1 and "--pair-path must be plain or rows" in r.stderr


def test_set_overrides_reach_the_saved_config(megafold_bin, source_dir, tmp_path):
    """`train --set` assignments apply over the config and land in <out>/config.json; `config show`
    prints the same resolution without training."""
    import json
    base = tmp_path / "tiny.json"
    base.write_text(json.dumps({
        "base": "cpu-tiny", "device": "cpu", "threads": 1, "log_every": 1, "val_every": -1,
        "model": {"c_s": 16, "c_z": 8, "n_blocks": 1, "tri_attn_heads": 1, "tri_attn_head_dim": 8,
                  "tri_mul_hidden": 8, "single_attn_heads": 2, "single_attn_head_dim": 8,
                  "msa": {"n_blocks": 0}, "diffusion": {"samples": 0}, "confidence": {"n_blocks": 0}},
        "data": {"crop_size": 24, "val_crop_size": 24}}))
    out = tmp_path / "run"
    r = run(megafold_bin, "train", "--config", str(base), "--data", str(source_dir / "data/pdb"),
            "--out", str(out), "--quiet", "--set", "optim.lr=1e-4", "--set", "steps=5")
    assert r.returncode == 0, r.stderr
    saved = json.loads((out / "config.json").read_text())
    assert saved["optim"]["lr"] == 1e-4 and saved["steps"] == 5
    shown = run(megafold_bin, "config", "show", str(base), "--set", "optim.lr=1e-4", "--set", "steps=5")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {**saved, "data": {**saved["data"], "dir": json.loads(shown.stdout)["data"]["dir"]}}
    bad = run(megafold_bin, "config", "show", "cpu-tiny", "--set", "optim.lrr=1")
    assert bad.returncode == 1 and "--set optim.lrr=1" in bad.stderr and "unknown key 'lrr'" in bad.stderr
    assert "cpu-tiny" in run(megafold_bin, "config", "list").stdout


def test_inspect_reports_molecule_types_and_survives_a_bad_ccd_table(megafold_bin, source_dir, tmp_path):
    import json
    r = run(megafold_bin, "inspect", str(source_dir / "data/pdb/1lcd.cif.gz"), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [c["mol_type"] for c in d["chains"]] == ["dna", "dna", "protein", "ligand"]
    assert d["components"] == ["NA"]
    assert all(c["msa_rows"] == 0 and c["templates"] == [] for c in d["chains"])  # a structure file has neither
    # A damaged table: proteins and nucleic acids still load, ligands are skipped by name.
    bad = tmp_path / "bad.mfccd"
    bad.write_bytes(b"not a table" * 10)
    import os
    env = dict(os.environ, MEGAFOLD_CCD=str(bad))
    r = subprocess.run([megafold_bin, "inspect", str(source_dir / "data/pdb/1lcd.cif.gz"), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [c["mol_type"] for c in json.loads(r.stdout)["chains"]] == ["dna", "dna", "protein"]
    assert f"{bad}: not a CCD table" in r.stderr and "ligands and non-standard residues skipped" in r.stderr


def test_block_trace_records_the_step(megafold_bin, source_dir, tmp_path):
    """--trace writes one more step's timeline; the gap summary refuses a trace without kernels by
    naming the file."""
    import json
    import sys
    trace = tmp_path / "step.json"
    r = run(megafold_bin, "dev", "block", "--n", "12", "--steps", "1", "--warmup", "0", "--device", "cpu",
            "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events if e.get("cat") == "cpu_op"}
    # The step's own operators, forward and backward, are in it.
    assert "megafold::triangle_attention_projected" in names or "megafold::triangle_attention" in names, names
    assert any(n.startswith("autograd::engine::evaluate_function") for n in names)
    g = subprocess.run([sys.executable, str(source_dir / "bench" / "trace_gaps.py"), str(trace)],
                       capture_output=True, text=True)
    assert g.returncode != 0 and str(trace) in g.stderr and "no kernels" in g.stderr


def test_trace_gaps_charges_idle_time_to_the_launching_operator(source_dir, tmp_path):
    """A synthetic step: a runtime launch inside a nested operator and a driver launch (as cuBLAS
    issues GEMMs); each gap is charged to the innermost operator around the launch after it."""
    import json
    import sys

    def op(name, ts, dur, tid=1):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid}

    def launch(cat, ts, corr, tid=1):
        return {"ph": "X", "cat": cat, "name": "launch", "ts": ts, "dur": 2, "tid": tid,
                "args": {"correlation": corr}}

    def kernel(name, ts, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "tid": 9,
                "args": {"correlation": corr}}

    # Many short children before the launch, so the innermost operator starts long before it.
    children = [op("aten::empty", 101 + 0.5 * k, 0.2) for k in range(100)]
    events = [op("outer", 0, 400), op("aten::mm", 100, 100), *children, launch("cuda_driver", 180, 2),
              op("megafold::x", 250, 50), launch("cuda_runtime", 260, 1),
              kernel("k1", 10, 20, 0), kernel("k2", 270, 10, 1), kernel("gemm", 330, 10, 2)]
    trace = tmp_path / "synthetic.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    r = subprocess.run([sys.executable, str(source_dir / "bench" / "trace_gaps.py"), str(trace)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    totals = json.loads(r.stdout.splitlines()[0])
    # Busy 20 + 10 + 10 us of a 330 us span; gaps of 240 us (before k2) and 50 us (before gemm).
    assert totals["device_busy_ms"] == 0.04 and totals["idle_ms"] == 0.29 and totals["gaps"] == 2
    charged = {line.split()[-1]: float(line.split()[0]) for line in r.stdout.splitlines()
               if line.startswith("  ") and " gaps " in line}
    assert charged == {"megafold::x": 0.24, "aten::mm": 0.05}, r.stdout
