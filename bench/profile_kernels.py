#!/usr/bin/env python3
"""Per-kernel GPU time of one megafold triangle_attention fwd+bwd (B=1, H=4, d=32, bf16, the
shapes of bench/triangle_attention.py), from the torch profiler, with each attention kernel's
distance from its two ceilings: tensor-core FLOP/s (989 TFLOP/s dense bf16 on H100/H200) and
the exponential unit (16 ex2 per clock per SM: 132 SMs x 1.98 GHz = 4.18e12/s).
Per (row, query, key) each kernel does one exponential and 2*d FLOPs per product:
forward 2 products (QK^T, PV), dq 3 (QK^T, dO V^T, dS K), dkv 4 (+ P^T dO, dS^T Q), dbias 2.
The sm_90a kernels (tma_wgmma_*) and the mma.sync ones are named apart.

--no-bias runs the plain op without a pair bias (what the bias's loads cost the kernels).
--mask ones|tail adds a key mask (all attended, or the last eighth of the keys masked, as a padded
crop has); --projected calls triangle_attention_projected on a [1, N, N, W] projection (q, k, v,
gate and bias as its strided views), the form the Pairformer block uses; W = --width, by default
the model's (4Hd + H rounded up to a multiple of 32: 64-byte rows).

usage: python3 bench/profile_kernels.py --lib build/src/libmegafold_ops.so [--n 768 1024]
           [--mask ones|tail] [--projected | --no-bias]
"""
import argparse
import collections
import re

import torch
from torch.profiler import ProfilerActivity, profile

H, D, REPS = 4, 32, 10
TENSOR_PEAK, EXP_PEAK = 989e12, 132 * 16 * 1.98e9
# (pattern, label, products), matched in this order. The sm_90a forward and dQ are one
# template whose fifth argument (kGrad) says which.
PRODUCTS = [
    (r"tma_wgmma_key_loop_kernel<[^,]*, 32, \w+, \w+, false", "sm_90a forward", 2),
    (r"tma_wgmma_key_loop_kernel<[^,]*, 32, \w+, \w+, true", "sm_90a dQ", 3),
    (r"tma_wgmma_dkv_kernel", "sm_90a dK/dV", 4),
    (r"tma_wgmma_dbias_kernel", "sm_90a bias gradient", 2),
    (r"forward_kernel", "forward", 2),
    (r"dq_kernel", "dQ", 3),
    (r"dkv_kernel", "dK/dV", 4),
    (r"dbias_kernel", "bias gradient", 2),
]

TOTAL_LABEL, WALL_LABEL = "total of the kernels", "per step between events"


def kernel_line(ms, per_step, label, ceil=""):
    """One kernel's line of the report: median ms, launches per step, name, ceilings
    (bench/ab_table.py reads these lines back)."""
    return f"  {ms:8.3f}  x{per_step}  {label[:100]:100s}  {ceil}".rstrip()


def sum_line(ms, label, note=""):
    """A step's total line (label TOTAL_LABEL or WALL_LABEL), as bench/ab_table.py reads it."""
    return f"  {ms:8.3f}  {label}{note}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[768, 1024])
    ap.add_argument("--trace", help="also write a Chrome trace of the last size's steps here")
    ap.add_argument("--mask", choices=["ones", "tail"], help="a key mask: every key attended, or the last eighth masked")
    ap.add_argument("--no-bias", action="store_true", help="the plain op without a pair bias")
    ap.add_argument("--projected", action="store_true", help="the projected op on strided views, as the model calls it")
    ap.add_argument("--width", type=int, default=(4 * H * D + H + 31) // 32 * 32,
                    help="the projection's row width (--projected)")
    args = ap.parse_args()
    torch.ops.load_library(args.lib)
    for n in args.n:
        mask = None
        if args.mask:
            mask = torch.ones(1, n, n, device="cuda")
            if args.mask == "tail":
                mask[..., n - n // 8:] = 0
        grad = torch.randn(1, n, n, H, D, device="cuda", dtype=torch.bfloat16)
        if args.projected:
            proj = torch.randn(1, n, n, args.width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            leaves = (proj,)

            def run():
                return torch.ops.megafold.triangle_attention_projected(proj, None, mask, H, D, False)
        else:
            q, k, v = (torch.randn(1, n, n, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            bias = None if args.no_bias else torch.randn(1, H, n, n, device="cuda", dtype=torch.bfloat16,
                                                         requires_grad=True)
            leaves = (q, k, v) + (() if bias is None else (bias,))

            def run():
                return torch.ops.megafold.triangle_attention(q, k, v, bias, mask, None)

        def step():  # as bench/triangle_attention.py times it: fresh gradients, not accumulated ones
            for t in leaves:
                t.grad = None
            run().backward(grad)

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        # Each step alone between two events, as do_bench times it: kernels plus any gaps between them.
        walls = []
        for _ in range(REPS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            walls.append(start.elapsed_time(end))
        activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.trace else [])
        with profile(activities=activities) as prof:
            for _ in range(REPS):
                step()
            torch.cuda.synchronize()
        if args.trace:
            prof.export_chrome_trace(args.trace)
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
            match = next(((label, k) for pattern, label, k in PRODUCTS if re.search(pattern, name)), None)
            short, ceil = (match[0] if match else None), ""
            if match:
                flops, exps = match[1] * 2 * D * H * n**3, H * n**3
                ceil = (f"{flops / ms / 1e9:6.1f} TFLOP/s = {100 * flops / ms / 1e-3 / TENSOR_PEAK:4.1f}% tensor, "
                        f"{100 * exps / ms / 1e-3 / EXP_PEAK:4.1f}% exp")
            print(kernel_line(ms, len(ts) // REPS, short or name, ceil))
        print(sum_line(total, TOTAL_LABEL))
        print(sum_line(sorted(walls)[len(walls) // 2], WALL_LABEL, " (kernels and the gaps between them)"))


if __name__ == "__main__":
    main()
