"""Row sharding of the pair stack over Gloo in several processes (`megafold shard-check`): each
rank's rows of the output, of the input gradient, and the parameter gradients summed over the
ranks equal the unsharded stack's, in float64 with dropout on, for P in {2, 4}."""
import json
import subprocess

import pytest

# Sharding changes only where sums are split (the gathered contraction runs the same k-order;
# parameter gradients add P partial sums). The longest sum is a weight gradient over
# N * N / P pairs <= 48 * 48 = 2304 terms, so each op's relative error is at most
# ~2304 * 1.1e-16 = 2.6e-13 (the worst-case gamma_K bound); a few of these compound through the
# stack's ~10 ops and their backward: 1e-11 leaves that bound without admitting a wrong row
# or a dropped gradient term (which would be O(1)).
TOL = "1e-11"


@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_pair_stack_equals_unsharded(megafold_bin, ranks):
    r = subprocess.run([megafold_bin, "shard-check", "--nproc", str(ranks), "--tol", TOL, "--seed", str(ranks)],
                       capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    report = json.loads(lines[0])
    assert report["ok"] and report["ranks"] == ranks and report["rows_per_rank"] * ranks == report["n"]
    assert max(report["err_out"], report["err_dz"], report["err_param_grads"]) <= float(TOL)


def test_rows_must_split_evenly(megafold_bin):
    r = subprocess.run([megafold_bin, "shard-check", "--nproc", "2", "--n", "25"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "25 tokens do not split into 2 equal row blocks" in r.stderr, r.stderr
