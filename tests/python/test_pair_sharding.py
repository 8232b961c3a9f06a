"""Row sharding of the pair stack over Gloo in several processes (`megafold dev shard-check`): each
rank's rows of the output, of the input gradient, and the parameter gradients summed over the
ranks equal the unsharded stack's, in float64 with dropout on, for P in {2, 4}; and what a rank
keeps for backward is ~1/P of what the unsharded stack keeps. The same for a whole Pairformer
block as the trainer runs it. Training with `--pair-shards P` (alone and combined with data
parallelism) gives the losses of one process."""
import json
import shutil
import subprocess

import pytest

from test_data_parallel import CONFIG, train_rows

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
    r = subprocess.run([megafold_bin, "dev", "shard-check", "--nproc", str(ranks), "--n", str(N), "--c-z", str(C_Z),
                        "--tol", TOL, "--seed", str(ranks)], capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    report = json.loads(lines[0])
    assert report["ok"] and report["ranks"] == ranks and report["rows_per_rank"] * ranks == N
    assert max(report["err_out"], report["err_dz"], report["err_param_grads"]) <= float(TOL)
    # The whole block as the trainer shards it: replicated single track, split/join of z, and
    # the trainer's gradient rule (row parameters summed over the ranks, the rest as they are).
    assert max(report["err_block_out"], report["err_block_input_grads"],
               report["err_block_param_grads"]) <= float(TOL), report
    # Activations per rank ~ 1/P (the gathered operands of the contractions are not kept).
    assert 1 / ranks - 0.01 <= report["held_rows_ratio"] <= 1 / ranks + REPLICATED, report


def test_rows_must_split_evenly(megafold_bin):
    r = subprocess.run([megafold_bin, "dev", "shard-check", "--nproc", "2", "--n", "25"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "25 tokens do not split into 2 equal row blocks" in r.stderr, r.stderr


@pytest.mark.parametrize("nproc,shards", [(2, 2), (4, 4), (4, 2)])
def test_pair_sharded_training_gives_the_losses_of_one_process(megafold_bin, source_dir, tmp_path, nproc, shards):
    """One example (cropped whole) on every rank: P ranks per example, nproc / P data-parallel
    groups. float32 on CPU, where the sharded path splits some sums (the float64 check above is
    exact to rounding), so agreement to float32 rounding compounded over 4 steps, as for three
    data-parallel ranks in test_data_parallel.py."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(source_dir / "data/pdb/1a8o.cif.gz", data)
    config = tmp_path / "ps.json"
    config.write_text(json.dumps(CONFIG))

    def train(out, *extra):
        subprocess.run([megafold_bin, "train", "--config", str(config), "--data", str(data), "--out", str(out),
                        "--quiet", *extra], check=True, timeout=300)
        return train_rows(out)

    one = train(tmp_path / "one")
    sharded = train(tmp_path / "sharded", "--nproc", str(nproc), "--pair-shards", str(shards))
    assert len(sharded) == len(one) == 4
    for (s, l, g), (s1, l1, g1) in zip(sharded, one):
        assert s == s1 and abs(l - l1) <= 1e-5 * abs(l1) and abs(g - g1) <= 1e-4 * abs(g1), (s, l, l1, g, g1)
    assert sorted(p.name for p in (tmp_path / "sharded" / "checkpoints").iterdir()) == [
        "step_00000004.pt", "step_00000004.pt.crc32"]


def test_pair_shards_must_divide_the_ranks(megafold_bin, source_dir, tmp_path):
    r = subprocess.run([megafold_bin, "train", "--config", "cpu-tiny", "--data", str(source_dir / "data/pdb"),
                        "--out", str(tmp_path / "bad"), "--quiet", "--steps", "1", "--nproc", "2",
                        "--pair-shards", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--pair-shards 3 must divide the number of ranks (2)" in r.stderr, r.stderr


def usable_gpus(megafold_bin):
    """The GPUs this build of megafold sees (none for a CPU-only build)."""
    info = subprocess.run([megafold_bin, "info"], capture_output=True, text=True, timeout=120).stdout
    return sum(line.startswith("device cuda:") for line in info.splitlines())


@pytest.mark.parametrize("shards", [1, 2])
def test_two_gpus_over_nccl_train_as_one(megafold_bin, source_dir, tmp_path, shards):
    """Two ranks on two GPUs (NCCL): data parallel (shards = 1) or one example's pair rows split
    between them (shards = 2), against one process on one GPU. bf16 autocast on the GPU rounds
    differently where the sharded path splits sums, and ATen's GPU backward kernels are not all
    deterministic, so agreement to 1e-3 over 4 steps (a dropped gradient term or a wrong row
    would be O(1))."""
    if usable_gpus(megafold_bin) < 2:
        pytest.skip("needs two GPUs and a CUDA build")
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(source_dir / "data/pdb/1a8o.cif.gz", data)
    config = tmp_path / "gpu.json"
    config.write_text(json.dumps(dict(CONFIG, device="cuda")))

    def train(out, *extra):
        r = subprocess.run([megafold_bin, "train", "--config", str(config), "--data", str(data), "--out", str(out),
                            *extra], check=True, timeout=300, capture_output=True, text=True)
        return train_rows(out), r.stdout

    one, _ = train(tmp_path / "one")
    two, log = train(tmp_path / "two", "--nproc", "2", "--pair-shards", str(shards))
    assert "(NCCL)" in log, log
    assert len(two) == len(one) == 4
    for (s, l, g), (s1, l1, g1) in zip(two, one):
        assert s == s1 and abs(l - l1) <= 1e-3 * abs(l1) and abs(g - g1) <= 1e-3 * abs(g1), (s, l, l1, g, g1)


def test_block_timing_on_sharded_ranks(megafold_bin):
    """`megafold dev block --nproc P` (the multi-GPU measurement of the sharded block) runs its ranks
    and reports one row for all of them; the tokens must split evenly."""
    r = subprocess.run([megafold_bin, "dev", "block", "--nproc", "2", "--n", "8", "--device", "cpu", "--steps", "2",
                        "--warmup", "1"], capture_output=True, text=True, timeout=300, check=True)
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["impl"] == "megafold-kernel-rows-p2" and row["ranks"] == 2 and row["n"] == 8, row
    assert 0 < row["fwd_ms"] <= row["fwdbwd_ms"], row
    bad = subprocess.run([megafold_bin, "dev", "block", "--nproc", "2", "--n", "7", "--device", "cpu", "--steps", "1"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "7 tokens do not split into 2 equal row blocks" in bad.stderr, bad.stderr
