#!/usr/bin/env python3
"""Fused Pairformer operators side by side, B=1, bf16, fwd and fwd+bwd medians on
the pair representation x [1, N, N, 128]: PyTorch eager, torch.compile of the same eager
code, and megafold's op (its CUDA kernels in a CUDA build of the library).

  layernorm_linear   LayerNorm(128) + Linear(128 -> 640), no bias: TriMul's a, b, gates and
                     output gate in one projection (the issue's benchmark shape)
  trimul_out,        triangle multiplicative update, outgoing / incoming (AF3 Alg. 12 / 13,
  trimul_in          hidden 128), a pair mask with 5% of tokens padded; eager and compile run
                     the PyTorch module of bench/pairformer_block.py
  pair_transition    SwiGLU transition, n = 4 (Alg. 11), that file's module too
  residual_dropout   the pair stack's residual step after TriMul: z + dropout(gate * y), z fp32
                     (the residual stream under autocast), y and gate bf16, a row-shared keep
                     mask; eager and compile run that expression, megafold its residual_update

Traffic counted per call (bf16 = 2 B). layernorm_linear: forward reads x and writes y; backward
reads dy twice (dx and weight-gradient kernels), x twice, and writes dx. The other ops count
what any implementation must move: forward reads x and writes y; backward reads dy and x and
writes dx, plus, for TriMul, a and b written once and read by the contraction in each pass
(the N^3 contraction cannot run from registers). GB/s is that count over the measured time,
comparable across implementations, not what each one really moves.

usage: python3 bench/fused_ops.py --lib build/src/libmegafold_ops.so --out bench/results/fused_ops.json
           [--n 384 768 1024] [--op ...] [--impl megafold eager compile] [--profile]
--profile also prints megafold's per-kernel GPU time for each op (torch profiler, 10 fwd+bwd),
for layernorm_linear with the bytes each kernel must move and the bandwidth that implies.
"""
import argparse
import datetime
import itertools
import json
import pathlib

import torch
import torch.nn.functional as F

from pairformer_block import C_TRI, C_Z, N_TR, Transition, TriMul
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


def trimul_case(n, impl, outgoing):
    torch.manual_seed(n)
    module = TriMul(outgoing).cuda().to(torch.bfloat16)
    with torch.no_grad():  # LayerNorm parameters off their defaults, so their gradients are exercised
        for ln in (module.ln_in, module.ln_out):
            ln.weight.add_(0.1 * torch.randn_like(ln.weight))
            ln.bias.add_(0.1 * torch.randn_like(ln.bias))
    opts = dict(device="cuda", dtype=torch.bfloat16)
    z = torch.randn(1, n, n, C_Z, **opts).requires_grad_()
    tokens = torch.rand(n, device="cuda") > 0.05
    mask = (tokens[:, None] & tokens[None, :]).to(torch.bfloat16)[None]
    grads = torch.randn(1, n, n, C_Z, **opts)
    if impl == "megafold":
        m = module

        def fn(z):
            return torch.ops.megafold.triangle_multiplication(
                z, mask, m.ln_in.weight, m.ln_in.bias, m.w_ab.weight, m.w_g.weight, m.ln_out.weight,
                m.ln_out.bias, m.w_o.weight, outgoing)
    else:
        eager = lambda z: module(z, mask)
        fn = torch.compile(eager, dynamic=False) if impl == "compile" else eager
    rows = n * n
    flops_fwd = 2 * rows * C_Z * (4 * C_TRI + C_Z) + 2 * n * rows * C_TRI + 2 * rows * C_TRI * C_Z
    bytes_fwd = 2 * rows * (2 * C_Z + 4 * C_TRI)
    bytes_bwd = 2 * rows * (3 * C_Z + 8 * C_TRI)
    return fn, [z], grads, {"c_z": C_Z, "c_hidden": C_TRI}, flops_fwd, bytes_fwd, bytes_bwd


def pair_transition_case(n, impl):
    torch.manual_seed(n)
    module = Transition(C_Z).cuda().to(torch.bfloat16)
    x = torch.randn(1, n, n, C_Z, device="cuda", dtype=torch.bfloat16).requires_grad_()
    grads = torch.randn_like(x)
    if impl == "megafold":
        m = module

        def fn(x):
            return torch.ops.megafold.swiglu_transition(x, m.ln.weight, m.ln.bias, m.w_in.weight, m.w_out.weight)
    else:
        fn = torch.compile(module, dynamic=False) if impl == "compile" else module
    rows = n * n
    flops_fwd = 2 * rows * C_Z * 2 * N_TR * C_Z + 2 * rows * N_TR * C_Z * C_Z
    bytes_fwd = 2 * rows * 2 * C_Z
    bytes_bwd = 2 * rows * 3 * C_Z
    return fn, [x], grads, {"c": C_Z, "factor": N_TR}, flops_fwd, bytes_fwd, bytes_bwd


def residual_dropout_eager(z, y, gate, scale):
    return z + (gate * y) * scale.to(y.dtype)


def residual_dropout_case(n, impl):
    gen = torch.Generator(device="cuda").manual_seed(n)
    z = torch.randn(1, n, n, C_Z, generator=gen, device="cuda")
    y, gate = (torch.randn(1, n, n, C_Z, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    scale = torch.bernoulli(torch.full((1, 1, n, C_Z), 0.75, device="cuda"), generator=gen) / 0.75
    grads = torch.randn(1, n, n, C_Z, generator=gen, device="cuda")
    eager = lambda z, y, gate: residual_dropout_eager(z, y, gate, scale)
    fn = {"eager": eager, "compile": torch.compile(eager, dynamic=False),
          "megafold": lambda z, y, gate: torch.ops.megafold.residual_update(z, y, gate, scale)}[impl]
    rows = n * n
    # Forward reads z (fp32), y and gate and writes the fp32 sum; backward reads the fp32
    # gradient, y and gate and writes dy and d gate (dz is the incoming gradient itself).
    bytes_fwd = rows * C_Z * (4 + 2 + 2 + 4)
    bytes_bwd = rows * C_Z * (4 + 2 + 2 + 2 + 2)
    return fn, [t.requires_grad_() for t in (z, y, gate)], grads, {"c": C_Z}, 0, bytes_fwd, bytes_bwd


CASES = {
    "layernorm_linear": layernorm_linear_case,
    "trimul_out": lambda n, impl: trimul_case(n, impl, True),
    "trimul_in": lambda n, impl: trimul_case(n, impl, False),
    "pair_transition": pair_transition_case,
    "residual_dropout": residual_dropout_case,
}


def header_line(op, n):
    """The first line of an op's profile (bench/ab_fused.py reads these lines back)."""
    return f"{op} N={n}: per fwd+bwd, ms"


def kernel_line(ms, name, rate=""):
    """One kernel's time per fwd+bwd (or the total), its name cut at 70 characters."""
    return f"  {ms:8.4f}  {name[:70]}{rate}"


def profile_kernels(op, n):
    """Per-kernel time of megafold's op fwd+bwd at n; for layernorm_linear also the GB/s of each
    kernel's compulsory traffic (forward: x, y; dx: dy, x, dx; g: dy, x)."""
    from torch.profiler import ProfilerActivity, profile

    fn, inputs, grads, _, _, _, _ = CASES[op](n, "megafold")
    rows, reps = n * n, 10
    traffic = {"forward_kernel": 2 * rows * (C_IN + C_OUT), "dx_kernel": 2 * rows * (C_OUT + 2 * C_IN),
               "g_kernel": 2 * rows * (C_OUT + C_IN)} if op == "layernorm_linear" else {}
    def fwdbwd():
        for a in inputs:  # as the timed fwd+bwd: no accumulation into existing gradients
            a.grad = None
        fn(*inputs).backward(grads)

    for _ in range(3):
        fwdbwd()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fwdbwd()
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name] = times.get(e.name, 0.0) + e.device_time_total / 1e3 / reps
    print(header_line(op, n))
    for name, ms in sorted(times.items(), key=lambda kv: -kv[1]):
        short = next((k for k in traffic if k in name), None)
        rate = f"  {traffic[short] / ms / 1e6:6.0f} GB/s of compulsory traffic" if short else ""
        print(kernel_line(ms, name, rate))
    print(kernel_line(sum(times.values()), "total"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[384, 768, 1024])
    ap.add_argument("--op", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--impl", nargs="+", default=["megafold", "eager", "compile"])
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.ops.load_library(args.lib)
    if args.profile:
        for op in args.op:
            for n in args.n:
                profile_kernels(op, n)
    result = {"gpu": device_name(), "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "rows": []}
    for op, n, impl in itertools.product(args.op, args.n, args.impl):
        if impl == "compile":  # a fresh compile per case, not a recompile of the previous one
            torch._dynamo.reset()
        fn, inputs, grads, shape, flops, bytes_fwd, bytes_bwd = CASES[op](n, impl)
        fwd_ms, fwdbwd_ms, peak_gb = bench(fn, inputs, grads)
        row = {"op": op, "impl": impl, "n": n, **shape, "dtype": "bf16",
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
