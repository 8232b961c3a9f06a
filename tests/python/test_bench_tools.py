"""bench/ab_table.py reads back what bench/profile_kernels.py prints; bench/same_outputs.py's
comparison and the summary line bench/device_session.sh shows."""
import importlib.util
import subprocess
import sys

import torch


def load(source_dir, name):
    spec = importlib.util.spec_from_file_location(name, source_dir / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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
