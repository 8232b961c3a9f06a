"""bench/ab_table.py and bench/ab_fused.py read back what bench/profile_kernels.py and
bench/fused_ops.py print; bench/ncu_stalls.py reads Nsight Compute's source page;
bench/same_outputs.py's comparison and the summary line bench/device_session.sh shows."""
import csv
import importlib.util
import io
import json
import lzma
import subprocess
import sys

import torch


def load(source_dir, name):
    sys.path.insert(0, str(source_dir / "bench"))  # the scripts import each other
    try:
        spec = importlib.util.spec_from_file_location(name, source_dir / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(source_dir / "bench"))
    return module


def write_log(path, profile, rows):
    """A profile_kernels report: rows = {n: [(ms, label), ...]}, the total last."""
    lines = []
    for n, kernels in rows.items():
        lines.append(f"N={n}: per fwd+bwd, median ms")
        lines += [profile.kernel_line(ms, 1, label, "200.0 TFLOP/s = 20.2% tensor, 38.0% exp") for ms, label in kernels]
        lines.append(profile.sum_line(sum(ms for ms, _ in kernels), profile.TOTAL_LABEL))
    path.write_text("\n".join(lines) + "\n")


def test_ab_table_matches_kernels_by_name_and_reports_the_change(source_dir, tmp_path):
    profile = load(source_dir, "profile_kernels")
    # The log orders kernels by time, so the two libraries list them in different orders.
    long_name = "tma_wgmma_dkv_kernel<__nv_bfloat16, 32, true, false>" + "x" * 80  # cut at 100 characters
    for r, scale in ((1, 1.0), (2, 1.02)):
        write_log(tmp_path / f"ab_base_{r}.log", profile,
                  {768: [(1.20 * scale, "sm_90a forward"), (1.10 * scale, "sm_90a dQ"), (0.5, long_name)]})
        write_log(tmp_path / f"ab_new_{r}.log", profile,
                  {768: [(1.15 * scale, "sm_90a dQ"), (0.90 * scale, "sm_90a forward"), (0.5, long_name)]})
    r = subprocess.run([sys.executable, str(source_dir / "bench" / "ab_table.py"), str(tmp_path), "base", "new"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = {line.split("  ")[0].strip(): line for line in r.stdout.splitlines()[1:]}
    assert "0.900 / 0.918 (-25.0%)" in rows["N=768 sm_90a forward"]
    assert "1.100 / 1.122" in rows["N=768 sm_90a dQ"] and "(+4.5%)" in rows["N=768 sm_90a dQ"]
    assert "(+0.0%)" in rows[f"N=768 {long_name[:100]}"]
    total = rows["N=768 total of the kernels"]
    assert "2.800 / 2.846" in total and "2.550 / 2.591 (-8.9%)" in total


def test_same_outputs_summary_counts_equal_tensors_and_the_largest_relative_difference(source_dir, capsys):
    same = load(source_dir, "same_outputs")
    base = {"case": {"out": torch.tensor([1.0, -4.0]), "dq": torch.tensor([2.0, 8.0]), "dk": torch.tensor([3.0])}}
    new = {"case": {"out": torch.tensor([1.0, -4.0]), "dq": torch.tensor([2.0, 8.5]), "dk": torch.tensor([3.3])}}
    assert not same.compare(new, base)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "1 tensors bitwise equal, 2 differ (the largest by 1.00e-01 of the base's largest value)"
    assert same.compare(base, base)
    assert capsys.readouterr().out.splitlines()[-1] == "3 tensors bitwise equal, 0 differ"


def test_ab_fused_reads_fused_ops_profiles_and_reports_the_change(source_dir, tmp_path):
    fused = load(source_dir, "fused_ops")
    forward = "void megafold::ops::cuda::(anonymous namespace)::tma_wgmma_forward_kernel<__nv_bfloat16>"
    for name, scale in (("base", 1.0), ("new", 0.8)):
        for rnd in (1, 2):
            lines = ['{"op": "layernorm_linear", "impl": "megafold", "n": 768}', fused.header_line("layernorm_linear", 768),
                     fused.kernel_line(0.36 * scale, forward, "    2543 GB/s of compulsory traffic"),
                     fused.kernel_line(0.02, "sum_chunks"), fused.kernel_line(0.36 * scale + 0.02, "total")]
            (tmp_path / f"abf_{name}_{rnd}.log").write_text("\n".join(lines) + "\n")
            rows = [{"op": "layernorm_linear", "n": 768, "fwdbwd_ms": 1.0 * scale}]
            (tmp_path / f"abf_{name}_{rnd}.json").write_text(json.dumps({"rows": rows}))
    r = subprocess.run([sys.executable, str(source_dir / "bench" / "ab_fused.py"), str(tmp_path), "base", "new"],
                       capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()[1:]
    row = lambda label: " ".join(next(line for line in lines if line.startswith(f"layernorm_linear N=768 {label} ")).split())
    # The common namespace prefix is dropped; the kernel's name is cut where fused_ops.py cuts it.
    assert row(forward[49:70]).endswith("0.3600 / 0.3600 0.2880 / 0.2880 (-20.0%)")
    assert row("sum_chunks").endswith("(+0.0%)")
    assert row("op fwd+bwd (bench/fused_ops.py)").endswith("1.0000 / 1.0000 0.8000 / 0.8000 (-20.0%)")
    assert lines[-1].startswith("layernorm_linear N=768 total")  # the kernels first, the sums last


def test_ncu_stalls_charges_samples_to_reasons_and_instructions(source_dir, tmp_path):
    # Two kernels in one export, as Nsight Compute writes its source page (SASS, CSV).
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_barrier", "stall_long_sb",
              "stall_barrier (Not Issued)"]
    rows = [["Kernel Name", "first_kernel"], header, ["0x10", "BAR.SYNC 0x0", "0", "0", "0", "0"],
            ["0x20", "BSSY B0", "30", "30", "0", "30"], ["0x30", "PRMT R1, R2", "70", "0", "70", "0"],
            ["Kernel Name", "second_kernel"], header, ["0x10", "EXIT", "5", "5", "0", "5"]]
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(rows)
    path = tmp_path / "sass.csv.xz"
    path.write_bytes(lzma.compress(buf.getvalue().encode()))
    r = subprocess.run([sys.executable, str(source_dir / "bench" / "ncu_stalls.py"), str(path), "--top", "1"],
                       capture_output=True, text=True, check=True)
    first, second = r.stdout.split("second_kernel")
    assert "100 samples over 3 instructions" in first
    assert "long_sb             70.0%" in first and "barrier             30.0%" in first
    assert "0x30  70.0%  PRMT R1, R2" in first and "BSSY" not in first  # --top 1
    assert "5 samples over 1 instructions" in second and "barrier            100.0%" in second
