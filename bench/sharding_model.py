#!/usr/bin/env python3
"""Communication and memory model of a sharded Pairformer trunk, before any of it runs.

For a trunk of AF3 size (48 Pairformer blocks, c_z = 128, TriMul hidden c = 128, triangle
attention 4 heads x 32, pair transition n = 4, bf16 activations, fp32 residual stream, one
checkpoint per block) it counts, per rank and per block, the elements each rank receives in
the forward pass under two ways of splitting the N x N pair tensor over P ranks:

  1d  rows i of z split P ways (DAP, FastFold): row-wise ops are local, every column-wise op
      needs z transposed by an all-to-all and back, and each triangle multiplication gathers
      the whole other operand (its k-contraction runs over all rows).
  2d  z split into a Pr x Pc grid of blocks (Pr * Pc = P, as square as P allows): a
      triangle multiplication gathers one row panel and one column panel of its operands
      (SUMMA-like), triangle attention gathers the keys/values and the bias of its row (or
      column) panel; no transposes.

Backward moves the same volume again (gathers become reduce-scatters of gradients) and
per-block recomputation repeats the forward's, so a step moves 3x the forward volume.

Step time: the single-GPU time of one block, measured on the H200 with our kernels at N=384
(t384, fwd+bwd), scaled by (N / 384)^3 (the N^3 contractions dominate from N=384 up), times
4/3 for recomputation, divided by P; communication at an all-gather/all-to-all bus bandwidth
of 350 GB/s per GPU inside a node of 8 (NVLink 4, 450 GB/s per direction) and 45 GB/s per GPU
between nodes (400 Gb/s InfiniBand). Traffic of a collective whose group spans nodes is split
by the share of peers on other nodes; the 2d grid keeps its row groups (Pc <= 8) inside a
node, so only its column-direction ops cross nodes. "exposed" assumes 70% of the communication hides behind compute (gathers of the next
operand issued while the current product runs); "serial" hides none.

Memory per rank: 48 block checkpoints of z (fp32), the working set of one recomputed block
(about W_ELEMS elements of bf16 per pair and channel, from the ops' saved tensors), the
gathered operand buffers (double-buffered ring chunks in both schemes) and replicated weights
with AdamW state.

usage: python3 bench/sharding_model.py --out bench/results/sharding_model.json
"""
import argparse
import datetime
import json
import math
import pathlib

from train_step import commit

C_Z, C_HID, HEADS, HEAD_DIM, C_S = 128, 128, 4, 32, 384
BLOCKS = 48
BF16, FP32 = 2, 4
W_ELEMS = 24            # bf16 elements per pair and c_z channel alive while one block is recomputed
WEIGHT_BYTES = 1.9e9    # trunk weights fp32 + grad + AdamW moments (~118 M parameters x 16 B)
T384 = 0.028            # s per block fwd+bwd at N=384 on one H200 (gpu-small trunk: 114 ms / 4 blocks)
INTRA, INTER, NODE = 350e9, 45e9, 8
HIDDEN = 0.7            # share of communication overlapped with compute ("exposed" column)


def grid(p):
    """Pr x Pc with Pr * Pc = p, Pc >= Pr, as square as possible."""
    pr = max(d for d in range(1, int(math.isqrt(p)) + 1) if p % d == 0)
    return pr, p // pr


def bandwidth(group, stride):
    """Bus bandwidth per rank of a collective over `group` ranks `stride` GPUs apart (ranks are
    numbered node by node, NODE per node): traffic to peers on other nodes runs at INTER."""
    if group == 1:
        return INTRA
    off = sum(1 for m in range(1, group) if m * stride >= NODE) / (group - 1)  # peers on other nodes
    return 1.0 / ((1 - off) / INTRA + off / INTER)


def ops_1d(n, p):
    """Per rank, forward, one block: list of (op, elements received, group size, group stride)."""
    if p == 1:
        return []
    gather = (p - 1) / p            # share of an all-gathered tensor that comes from peers
    a2a = (p - 1) / p ** 2          # share of the whole tensor a rank receives in an all-to-all
    nn = n * n
    return [
        ("tri_mul_out: all-gather b", nn * C_HID * gather, p, 1),
        ("z to columns: all-to-all", nn * C_Z * a2a, p, 1),
        ("tri_mul_in: all-gather a", nn * C_HID * gather, p, 1),
        ("z to rows: all-to-all", nn * C_Z * a2a, p, 1),
        ("tri_attn_start: all-gather bias", nn * HEADS * gather, p, 1),
        ("z to columns: all-to-all", nn * C_Z * a2a, p, 1),
        ("tri_attn_end: all-gather bias", nn * HEADS * gather, p, 1),
        ("z to rows: all-to-all", nn * C_Z * a2a, p, 1),
        ("single attention: all-gather s update", n * C_S * gather, p, 1),
    ]


def ops_2d(n, p):
    if p == 1:
        return []
    pr, pc = grid(p)
    nn = n * n
    row_panel = nn / pr * (pc - 1) / pc   # rows of my block, all columns, minus my own block
    col_panel = nn / pc * (pr - 1) / pr
    kv = 2 * HEADS * HEAD_DIM
    return [
        # Grid rows are pc consecutive ranks (one node while pc <= NODE); grid columns are
        # pr ranks pc apart.
        ("tri_mul_out: row panels of a, b", nn * C_HID / pr * (pc - 1) / pc + nn * C_HID / pc, pc, 1),
        ("tri_mul_in: column panels of a, b", nn * C_HID / pc * (pr - 1) / pr + nn * C_HID / pr, pr, pc),
        ("tri_attn_start: k, v of the row panel + bias rows", row_panel * kv + nn / pc * HEADS, pc, 1),
        ("tri_attn_end: k, v of the column panel + bias columns", col_panel * kv + nn / pr * HEADS, pr, pc),
        ("single attention: partial outputs along the grid row", n / pr * C_S * (pc - 1), pc, 1),
        ("single attention: s update along the grid column", n * C_S * (pr - 1) / pr, pr, pc),
    ]


def block_comm(ops):
    elems = sum(e for _, e, _, _ in ops)
    seconds = sum(e * BF16 / bandwidth(g, stride) for _, e, g, stride in ops)
    return elems, seconds


def memory(n, p, scheme):
    nn = n * n
    checkpoints = BLOCKS * nn * C_Z * FP32 / p
    working = W_ELEMS * nn * C_Z * BF16 / p
    if p == 1:
        buffers = 0.0
    elif scheme == "1d":
        buffers = 2 * nn * C_HID * BF16 / p       # two ring chunks of the gathered operand
    else:
        pr, pc = grid(p)
        buffers = 2 * nn * C_HID * BF16 * (1 / pr + 1 / pc) / max(pr, pc)  # ring chunks of two panels
    return checkpoints + working + buffers + WEIGHT_BYTES


def rows():
    out = []
    for n in (768, 1536, 3072):
        compute = T384 * (n / 384) ** 3 * 4 / 3 * BLOCKS  # one GPU, fwd + recompute + bwd
        for p in (1, 2, 4, 8, 32):
            for scheme, ops in (("1d", ops_1d(n, p)), ("2d", ops_2d(n, p))):
                if p == 1 and scheme == "2d":
                    continue
                elems, secs = block_comm(ops)
                comm_bytes = 3 * BLOCKS * elems * BF16
                comm_s = 3 * BLOCKS * secs
                mem = memory(n, p, scheme)
                out.append({
                    "n": n, "p": p, "scheme": scheme if p > 1 else "none",
                    "grid": list(grid(p)) if scheme == "2d" else [p, 1],
                    "block_fwd_recv_gb_per_rank": round(elems * BF16 / 1e9, 4),
                    "step_comm_gb_per_rank": round(comm_bytes / 1e9, 2),
                    "per_rank_memory_gb": round(mem / 1e9, 1),
                    "fits_h200": mem < 139e9,
                    "compute_s": round(compute / p, 2),
                    "comm_s": round(comm_s, 2),
                    "step_s_serial": round(compute / p + comm_s, 2),
                    "step_s_exposed": round(compute / p + (1 - HIDDEN) * comm_s, 2),
                    "ops": [{"op": name, "recv_gb": round(e * BF16 / 1e9, 4), "group": g, "stride": st}
                            for name, e, g, st in ops],
                })
    return out


def longest_crop(p, scheme):
    """The longest crop (a multiple of 128 tokens) whose trunk fits one H200 per rank."""
    n = 128
    while memory(n + 128, p, scheme) < 139e9:
        n += 128
    return n


def choose(table):
    """The scheme that moves fewer bytes at each (n, p), p > 1."""
    best = {}
    for r in table:
        if r["p"] == 1:
            continue
        key = (r["n"], r["p"])
        if key not in best or r["step_comm_gb_per_rank"] < best[key]["step_comm_gb_per_rank"]:
            best[key] = r
    return [{"n": n, "p": p, "scheme": r["scheme"]} for (n, p), r in sorted(best.items())]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table = rows()
    doc = {"commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "assumptions": {"blocks": BLOCKS, "c_z": C_Z, "tri_mul_hidden": C_HID, "tri_attn_heads": HEADS,
                           "tri_attn_head_dim": HEAD_DIM, "c_s": C_S, "block_s_at_384": T384,
                           "intra_node_gb_s": INTRA / 1e9, "inter_node_gb_s": INTER / 1e9, "gpus_per_node": NODE,
                           "overlapped_share": HIDDEN, "working_set_elems_per_pair_channel": W_ELEMS,
                           "weights_and_optimizer_gb": WEIGHT_BYTES / 1e9},
           "rows": table, "choice": choose(table),
           "longest_crop": [{"p": p, "scheme": sc, "n": longest_crop(p, sc)}
                            for p in (1, 2, 4, 8, 32) for sc in (("1d", "2d") if p > 1 else ("1d",))]}
    pathlib.Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{'N':>5} {'P':>3} {'scheme':>6} {'fwd GB/block':>12} {'step GB':>8} {'mem GB':>7} "
          f"{'compute s':>9} {'comm s':>7} {'step s':>7}")
    for r in table:
        print(f"{r['n']:>5} {r['p']:>3} {r['scheme']:>6} {r['block_fwd_recv_gb_per_rank']:>12.3f} "
              f"{r['step_comm_gb_per_rank']:>8.1f} {r['per_rank_memory_gb']:>7.1f} {r['compute_s']:>9.2f} "
              f"{r['comm_s']:>7.2f} {r['step_s_exposed']:>7.2f}")
    print("fewer bytes:", ", ".join(f"N={c['n']} P={c['p']}: {c['scheme']}" for c in doc["choice"]))
    print("longest crop that fits (trunk memory only):",
          ", ".join(f"P={c['p']} {c['scheme']}: {c['n']}" for c in doc["longest_crop"]))


if __name__ == "__main__":
    main()
