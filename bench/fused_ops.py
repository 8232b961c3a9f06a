#!/usr/bin/env python3
"""Fused Pairformer operators side by side (issue 4), B=1, bf16, fwd and fwd+bwd medians on
the pair representation x [1, N, N, 128]: PyTorch eager, torch.compile of the same eager
code, and megafold's op (its CUDA kernels in a CUDA build of the library).

  layernorm_linear   LayerNorm(128) + Linear(128 -> 640), no bias: TriMul's a, b, gates and
                     output gate in one projection (the issue's benchmark shape)

Traffic counted per call (bf16 = 2 B): forward reads x and writes y; backward reads dy twice
(dx and weight-gradient kernels), x twice, and writes dx. GB/s below is that count over the
measured time, so it is comparable across implementations, not what each one really moves.

usage: python3 bench/fused_ops.py --lib build/src/libmegafold_ops.so --out bench/results/fused_ops.json
           [--n 384 768 1024] [--impl megafold eager compile] [--profile]
--profile also prints megafold's per-kernel GPU time (torch profiler, 10 fwd+bwd) with the
bytes each kernel must move and the bandwidth that implies.
"""
import argparse
import datetime
import json
import pathlib

import torch
import torch.nn.functional as F

from train_step import commit, device_name
from triangle_attention import bench

C_IN, C_OUT = 128, 640


def layernorm_linear_eager(x, g, b, w):
    return F.linear(F.layer_norm(x, (C_IN,), g, b, 1e-5), w)


def layernorm_linear_megafold(x, g, b, w):
    return torch.ops.megafold.layernorm_linear(x, g, b, w, None)


def layernorm_linear_case(n, impl):
    gen = torch.Generator(device="cuda").manual_seed(n)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, n, n, C_IN, generator=gen, **opts) * 2 + 0.5
    g = 1 + 0.1 * torch.randn(C_IN, generator=gen, **opts)
    b = 0.1 * torch.randn(C_IN, generator=gen, **opts)
    w = torch.randn(C_OUT, C_IN, generator=gen, **opts) / C_IN ** 0.5
    args = [t.requires_grad_() for t in (x, g, b, w)]
    grads = torch.randn(1, n, n, C_OUT, generator=gen, **opts)
    fn = {"eager": layernorm_linear_eager, "compile": torch.compile(layernorm_linear_eager, dynamic=False),
          "megafold": layernorm_linear_megafold}[impl]
    rows = n * n
    flops_fwd = 2 * rows * C_IN * C_OUT
    bytes_fwd = 2 * rows * (C_IN + C_OUT)
    bytes_bwd = 2 * rows * (2 * C_OUT + 3 * C_IN)
    return fn, args, grads, {"c_in": C_IN, "c_out": C_OUT}, flops_fwd, bytes_fwd, bytes_bwd


def profile_kernels(n):
    """Per-kernel time of megafold's layernorm_linear fwd+bwd at n, and GB/s of each kernel's
    compulsory traffic (forward: x, y; dx: dy, x, dx; g: dy, x)."""
    from torch.profiler import ProfilerActivity, profile

    fn, inputs, grads, _, _, _, _ = layernorm_linear_case(n, "megafold")
    rows, reps = n * n, 10
    traffic = {"forward_kernel": 2 * rows * (C_IN + C_OUT), "dx_kernel": 2 * rows * (C_OUT + 2 * C_IN),
               "g_kernel": 2 * rows * (C_OUT + C_IN)}
    for _ in range(3):
        fn(*inputs).backward(grads)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(*inputs).backward(grads)
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name] = times.get(e.name, 0.0) + e.device_time_total / 1e3 / reps
    print(f"N={n}: per fwd+bwd, ms")
    for name, ms in sorted(times.items(), key=lambda kv: -kv[1]):
        short = next((k for k in traffic if k in name), None)
        rate = f"  {traffic[short] / ms / 1e6:6.0f} GB/s of compulsory traffic" if short else ""
        print(f"  {ms:8.4f}  {name[:70]}{rate}")
    print(f"  {sum(times.values()):8.4f}  total")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[384, 768, 1024])
    ap.add_argument("--impl", nargs="+", default=["megafold", "eager", "compile"])
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.ops.load_library(args.lib)
    if args.profile:
        for n in args.n:
            profile_kernels(n)
    result = {"gpu": device_name(), "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "rows": []}
    for n in args.n:
        for impl in args.impl:
            fn, inputs, grads, shape, flops, bytes_fwd, bytes_bwd = layernorm_linear_case(n, impl)
            fwd_ms, fwdbwd_ms, peak_gb = bench(fn, inputs, grads)
            row = {"op": "layernorm_linear", "impl": impl, "n": n, **shape, "dtype": "bf16",
                   "fwd_ms": round(fwd_ms, 4), "fwdbwd_ms": round(fwdbwd_ms, 4), "peak_gb": round(peak_gb, 3),
                   "fwd_tflops": round(flops / fwd_ms / 1e9, 1), "fwdbwd_tflops": round(3 * flops / fwdbwd_ms / 1e9, 1),
                   "fwd_gbs": round(bytes_fwd / fwd_ms / 1e6), "fwdbwd_gbs": round((bytes_fwd + bytes_bwd) / fwdbwd_ms / 1e6)}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
            del fn, inputs, grads
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
