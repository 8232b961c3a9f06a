#!/usr/bin/env python3
"""One Pairformer block (AF3 SI Alg. 17: c_s 384, c_z 128, TriMul hidden 128, triangle attention
4 heads x 32, single attention 16 heads x 24, transitions n=4, dropout 0.25 row/column-wise),
forward + backward on random inputs, bf16 autocast over fp32 residual streams, side by side:

  megafold-kernel     our C++ model's block (`megafold dev block`), CUDA kernels where registered;
                      as the trainer runs a crop without padding, i.e. without masks (the PyTorch
                      blocks below take masks of ones)
  megafold-reference  the same block with every op on its ATen reference (the "before")
  megafold-kernel-rows  megafold-kernel with the pair stack on its row-sharded path, one rank
                      (the cost of that path at P = 1; not in the default list)
  megafold-kernel-rows-pP  the pair rows sharded over P ranks, one GPU each (NCCL): a step takes
                      as long as the slowest rank, peak memory is the fullest rank's
  eager               the same block written in plain PyTorch below
  compile             torch.compile of that PyTorch block
  compile-cueq        torch.compile of that block with NVIDIA cuEquivariance's triangle attention
                      and triangle multiplication kernels (cuequivariance-ops-torch)
  compile-flex        torch.compile of that block with FlexAttention (bias as score_mod) for
                      triangle attention and cuEquivariance's triangle multiplication

usage: python3 bench/pairformer_block.py --bin build/megafold --out bench/results/pairformer_block.json
           [--n 384 768] [--impl megafold-kernel megafold-reference eager compile]
Rows are written after every measurement; medians over --steps steps after a warm-up.
"""
import argparse
import datetime
import json
import math
import pathlib
import subprocess

import torch
import torch.nn as nn
import torch.nn.functional as F

from train_step import commit, device_name

C_S, C_Z, C_TRI, H_TRI, D_TRI, H_S, D_S, N_TR, P_DROP = 384, 128, 128, 4, 32, 16, 24, 4, 0.25
# Which kernels the PyTorch block's triangle ops use: "torch", "cueq" or "flex" (attention).
KERNELS = {"attention": "torch", "trimul": "torch"}


class Transition(nn.Module):  # Alg. 11
    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c)
        self.w_in = nn.Linear(c, 2 * N_TR * c, bias=False)
        self.w_out = nn.Linear(N_TR * c, c, bias=False)

    def forward(self, x):
        a, b = self.w_in(self.ln(x)).chunk(2, -1)
        return self.w_out(F.silu(a) * b)


class TriMul(nn.Module):  # Alg. 12 (outgoing) / 13 (incoming)
    def __init__(self, outgoing):
        super().__init__()
        self.outgoing = outgoing
        self.ln_in, self.ln_out = nn.LayerNorm(C_Z), nn.LayerNorm(C_TRI)
        self.w_ab = nn.Linear(C_Z, 4 * C_TRI, bias=False)  # a, b and their gates
        self.w_g = nn.Linear(C_Z, C_Z, bias=False)
        self.w_o = nn.Linear(C_TRI, C_Z, bias=False)

    def forward(self, z, pair_mask):
        if KERNELS["trimul"] == "cueq":
            from cuequivariance_ops_torch import triangle_multiplicative_update
            a, b, ga, gb = self.w_ab.weight.chunk(4, 0)
            return triangle_multiplicative_update(
                z, "outgoing" if self.outgoing else "incoming", pair_mask,
                norm_in_weight=self.ln_in.weight, norm_in_bias=self.ln_in.bias,
                p_in_weight=torch.cat([a, b]), g_in_weight=torch.cat([ga, gb]),
                norm_out_weight=self.ln_out.weight, norm_out_bias=self.ln_out.bias,
                p_out_weight=self.w_o.weight, g_out_weight=self.w_g.weight)
        x = self.ln_in(z)
        a, b, ga, gb = self.w_ab(x).chunk(4, -1)
        m = pair_mask.unsqueeze(-1)
        a, b = a * torch.sigmoid(ga) * m, b * torch.sigmoid(gb) * m
        eq = "bikc,bjkc->bijc" if self.outgoing else "bkic,bkjc->bijc"
        return torch.sigmoid(self.w_g(x)) * self.w_o(self.ln_out(torch.einsum(eq, a, b)))


class TriAttention(nn.Module):  # Alg. 14 (starting node) / 15 (ending node)
    def __init__(self, starting):
        super().__init__()
        self.starting = starting
        self.ln = nn.LayerNorm(C_Z)
        self.w_qkvg = nn.Linear(C_Z, 4 * H_TRI * D_TRI, bias=False)
        self.w_b = nn.Linear(C_Z, H_TRI, bias=False)
        self.w_o = nn.Linear(H_TRI * D_TRI, C_Z, bias=False)

    def forward(self, z, pair_mask):
        if not self.starting:
            z, pair_mask = z.transpose(1, 2), pair_mask.transpose(1, 2)
        x = self.ln(z)
        B, N = x.shape[:2]
        q, k, v, g = self.w_qkvg(x).view(B, N, N, 4, H_TRI, D_TRI).unbind(3)
        bias = self.w_b(x).permute(0, 3, 1, 2).unsqueeze(1)  # [B, 1, H, N, N]
        if KERNELS["attention"] == "cueq":
            from cuequivariance_ops_torch import triangle_attention
            heads = lambda t: t.permute(0, 1, 3, 2, 4)  # [B, N, H, N, d], its API's layout
            o = triangle_attention(heads(q), heads(k), heads(v), bias, pair_mask[:, :, None, None, :].bool())
            o = o.permute(0, 1, 3, 2, 4)
        elif KERNELS["attention"] == "flex":
            from torch.nn.attention.flex_attention import flex_attention
            assert B == 1, "the FlexAttention variant is written for B = 1"
            rows = lambda t: t.permute(0, 1, 3, 2, 4).reshape(N, H_TRI, N, D_TRI)  # rows r as the batch
            bias_h, key_mask = bias[0, 0], 1e9 * (pair_mask[0] - 1)  # [H, N, N], [N rows, N keys]

            def score_mod(score, row, h, i, j):
                return score + bias_h[h, i, j] + key_mask[row, j]

            o = flex_attention(rows(q), rows(k), rows(v), score_mod=score_mod)
            o = o.view(B, N, H_TRI, N, D_TRI).permute(0, 1, 3, 2, 4)
        else:
            s = torch.einsum("brihd,brjhd->brhij", q, k) / math.sqrt(D_TRI) + bias
            s = s + (1e9 * (pair_mask - 1))[:, :, None, None, :]
            o = torch.einsum("brhij,brjhd->brihd", torch.softmax(s.float(), -1).to(v.dtype), v)
        o = self.w_o((torch.sigmoid(g) * o).reshape(B, N, N, H_TRI * D_TRI))
        return o if self.starting else o.transpose(1, 2)


class SingleAttention(nn.Module):  # Alg. 24, trunk form
    def __init__(self):
        super().__init__()
        self.ln_s, self.ln_z = nn.LayerNorm(C_S), nn.LayerNorm(C_Z)
        self.w_qkvg = nn.Linear(C_S, 4 * H_S * D_S, bias=False)
        self.b_q = nn.Parameter(torch.zeros(H_S * D_S))
        self.w_z = nn.Linear(C_Z, H_S, bias=False)
        self.w_o = nn.Linear(H_S * D_S, C_S, bias=False)

    def forward(self, s, z, token_mask):
        B, N = s.shape[:2]
        q, k, v, g = self.w_qkvg(self.ln_s(s)).chunk(4, -1)
        q = q + self.b_q
        heads = lambda t: t.view(B, N, H_S, D_S).transpose(1, 2)
        bias = self.w_z(self.ln_z(z)).permute(0, 3, 1, 2) + (1e9 * (token_mask - 1))[:, None, None, :]
        o = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=bias.to(q.dtype))
        return self.w_o(torch.sigmoid(g) * o.transpose(1, 2).reshape(B, N, H_S * D_S))


def shared_dropout(x, rowwise, training):
    """AF3's dropout with one mask shared along rows (rowwise) or columns of the pair tensor."""
    if not training:
        return x
    shape = list(x.shape)
    shape[1 if rowwise else 2] = 1
    keep = (torch.rand(shape, device=x.device) >= P_DROP).to(x.dtype) / (1 - P_DROP)
    return x * keep


class PairformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.tri_mul_out, self.tri_mul_in = TriMul(True), TriMul(False)
        self.tri_attn_start, self.tri_attn_end = TriAttention(True), TriAttention(False)
        self.pair_transition, self.single_transition = Transition(C_Z), Transition(C_S)
        self.single_attention = SingleAttention()

    def forward(self, s, z, token_mask, pair_mask):
        t = self.training
        z = z + shared_dropout(self.tri_mul_out(z, pair_mask), True, t)
        z = z + shared_dropout(self.tri_mul_in(z, pair_mask), True, t)
        z = z + shared_dropout(self.tri_attn_start(z, pair_mask), True, t)
        z = z + shared_dropout(self.tri_attn_end(z, pair_mask), False, t)
        z = z + self.pair_transition(z)
        s = s + self.single_attention(s, z, token_mask)
        return s + self.single_transition(s), z


def torch_block(n, impl, steps, warmup):
    torch.manual_seed(0)
    KERNELS["attention"] = {"compile-cueq": "cueq", "compile-flex": "flex"}.get(impl, "torch")
    KERNELS["trimul"] = "cueq" if impl in ("compile-cueq", "compile-flex") else "torch"
    block = PairformerBlock().cuda().train()
    fn = torch.compile(block) if impl.startswith("compile") else block
    s = torch.randn(1, n, C_S, device="cuda", requires_grad=True)
    z = torch.randn(1, n, n, C_Z, device="cuda", requires_grad=True)
    token_mask, pair_mask = torch.ones(1, n, device="cuda"), torch.ones(1, n, n, device="cuda")
    ds, dz = torch.randn_like(s), torch.randn_like(z)
    fwd, total = [], []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for step in range(warmup + steps):
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            s_out, z_out = fn(s, z, token_mask, pair_mask)
        mid.record()
        torch.autograd.backward([s_out, z_out], [ds, dz])
        end.record()
        torch.cuda.synchronize()
        if step >= warmup:
            fwd.append(start.elapsed_time(mid))
            total.append(start.elapsed_time(end))
        s.grad = z.grad = None
        block.zero_grad(set_to_none=True)
    median = lambda v: sorted(v)[len(v) // 2]
    return {"fwd_ms": round(median(fwd), 3), "fwdbwd_ms": round(median(total), 3), "min_ms": round(min(total), 3),
            "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3)}


def megafold_block(binary, n, impl, steps, warmup):
    # megafold-<ops>[-rows[-pP]]: -rows times the pair stack's row-sharded path, on P ranks.
    parts = impl.split("-")[1:]
    ops, path = parts[0], parts[1] if len(parts) > 1 else "plain"
    ranks = parts[2].removeprefix("p") if len(parts) > 2 else "1"
    out = subprocess.run([binary, "dev", "block", "--n", str(n), "--steps", str(steps), "--warmup", str(warmup),
                          "--ops", ops, "--pair-path", path] + (["--nproc", ranks] if ranks != "1" else []),
                         capture_output=True, text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    return {k: row[k] for k in ("fwd_ms", "fwdbwd_ms", "min_ms", "peak_gb")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[384, 768])
    ap.add_argument("--impl", nargs="+", default=["megafold-kernel", "megafold-reference", "eager", "compile",
                                                  "compile-cueq", "compile-flex"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    result = {"gpu": device_name(), "commit": commit(), "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "rows": []}
    for n in args.n:
        for impl in args.impl:
            try:
                if impl.startswith("megafold-"):
                    timing = megafold_block(args.bin, n, impl, args.steps, args.warmup)
                else:
                    timing = torch_block(n, impl, args.steps, args.warmup)
            except (RuntimeError, ImportError, subprocess.CalledProcessError) as err:  # e.g. out of memory
                timing = {"error": str(err).splitlines()[0][:200]}
            torch.cuda.empty_cache()
            row = {"op": "pairformer_block", "impl": impl, "n": n, "c_s": C_S, "c_z": C_Z, **timing}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
