#!/usr/bin/env python3
"""Per-kernel GPU time of one megafold triangle_attention fwd+bwd (B=1, H=4, d=32, bf16, the
shapes of bench/triangle_attention.py), from the torch profiler, with each attention kernel's
distance from its two ceilings: tensor-core FLOP/s (989 TFLOP/s dense bf16 on H100/H200) and
the exponential unit (16 ex2 per clock per SM: 132 SMs x 1.98 GHz = 4.18e12/s).
Per (row, query, key) each kernel does one exponential and 2*d FLOPs per product:
forward 2 products (QK^T, PV; tma_wgmma_forward_kernel on sm_90a, forward_kernel elsewhere), dq 3 (QK^T, dO V^T, dS K), dkv 4 (+ P^T dO, dS^T Q), dbias 2.

usage: python3 bench/profile_kernels.py --lib build/src/libmegafold_ops.so [--n 768 1024]
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

H, D, REPS = 4, 32, 10
TENSOR_PEAK, EXP_PEAK = 989e12, 132 * 16 * 1.98e9
# Matched by substring in this order (the sm_90a forward first: its name contains the other's).
PRODUCTS = {"tma_wgmma_forward_kernel": 2, "forward_kernel": 2, "dq_kernel": 3, "dkv_kernel": 4, "dbias_kernel": 2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[768, 1024])
    args = ap.parse_args()
    torch.ops.load_library(args.lib)
    for n in args.n:
        q, k, v = (torch.randn(1, n, n, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        bias = torch.randn(1, H, n, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn(1, n, n, H, D, device="cuda", dtype=torch.bfloat16)

        def step():
            torch.ops.megafold.triangle_attention(q, k, v, bias, None, None).backward(grad)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPS):
                step()
            torch.cuda.synchronize()
        times = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                times[e.name].append(e.device_time_total / 1e3)
        print(f"N={n}: per fwd+bwd, median ms")
        total = 0.0
        for name, ts in sorted(times.items(), key=lambda kv: -sum(kv[1])):
            ts.sort()
            ms = ts[len(ts) // 2]
            total += ms * (len(ts) // REPS)
            short = next((k for k in PRODUCTS if k in name), None)
            ceil = ""
            if short:
                flops, exps = PRODUCTS[short] * 2 * D * H * n**3, H * n**3
                ceil = (f"{flops / ms / 1e9:6.1f} TFLOP/s = {100 * flops / ms / 1e-3 / TENSOR_PEAK:4.1f}% tensor, "
                        f"{100 * exps / ms / 1e-3 / EXP_PEAK:4.1f}% exp")
            print(f"  {ms:8.3f}  x{len(ts) // REPS}  {(short or name)[:60]:60s} {ceil}")
        print(f"  {total:8.3f}  total")


if __name__ == "__main__":
    main()
