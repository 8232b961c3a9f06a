"""Row sharding of the pair stack over Gloo in several processes (`megafold shard-check`): each
rank's rows of the output, of the input gradient, and the parameter gradients summed over the
ranks equal the unsharded stack's, in float64 with dropout on, for P in {2, 4}; and what a rank
keeps for backward is ~1/P of what the unsharded stack keeps."""
import json
import subprocess

import pytest

N, C_Z = 96, 32
# Sharding changes only where sums are split (the gathered contraction runs the same k-order;
# parameter gradients add P partial sums). The longest sum is a weight gradient over
# N * N = 9216 pairs, so one op's relative error is at most ~9216 * 1.1e-16 = 1e-12 (the
# worst-case gamma_K bound); compounded through the stack's ~10 ops and their backward, ~1e-11.
# 1e-10 leaves that bound with margin without admitting a wrong row or a dropped gradient term
# (which would be O(1)).
TOL = "1e-10"
# Replicated on every rank: the two gathered attention biases (H = 2 heads of N^2) and the pair
# mask, ~1% of the unsharded stack's saved tensors at this size; 0.03 leaves allocator rounding.
REPLICATED = 0.03


@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_pair_stack_equals_unsharded(megafold_bin, ranks):
    r = subprocess.run([megafold_bin, "shard-check", "--nproc", str(ranks), "--n", str(N), "--c-z", str(C_Z),
                        "--tol", TOL, "--seed", str(ranks)], capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    report = json.loads(lines[0])
    assert report["ok"] and report["ranks"] == ranks and report["rows_per_rank"] * ranks == N
    assert max(report["err_out"], report["err_dz"], report["err_param_grads"]) <= float(TOL)
    # Activations per rank ~ 1/P (the gathered operands of the contractions are not kept).
    assert 1 / ranks - 0.01 <= report["held_rows_ratio"] <= 1 / ranks + REPLICATED, report


def test_rows_must_split_evenly(megafold_bin):
    r = subprocess.run([megafold_bin, "shard-check", "--nproc", "2", "--n", "25"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "25 tokens do not split into 2 equal row blocks" in r.stderr, r.stderr
