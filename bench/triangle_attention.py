#!/usr/bin/env python3
"""Triangle attention (starting node) side by side, B=1, H=4, d=32, bf16, fwd and fwd+bwd:
PyTorch eager, torch.compile of eager, SDPA with the bias as attn_mask, FlexAttention with the
bias as a score_mod (torch.compile), NVIDIA cuEquivariance's triangle_attention
(cuequivariance-ops-torch, when importable) and megafold's triangle_attention op (its CUDA
kernels in a CUDA build of the library).

FLOPs: 4*H*d*N^3 forward, 14*H*d*N^3 forward+backward (DESIGN.md). Each implementation gets
inputs in its preferred layout outside the timed region; all share the same values.

usage: python3 bench/triangle_attention.py --lib build/src/libmegafold_ops.so \
           --out bench/results/triangle_attention.json [--n 256 384 512 768 1024]
Rows are written after every measurement, so a run cut short keeps what it measured; a
Markdown table of the same rows goes next to the JSON (same name, .md).
"""
import argparse
import datetime
import json
import math
import pathlib

import torch
import torch.nn.functional as F

from train_step import commit  # MEGAFOLD_COMMIT or the checkout's HEAD

H, D = 4, 32


def eager(q, k, v, bias):  # q, k, v: [R, H, N, d]; bias [1, H, N, N]
    s = torch.einsum("rhid,rhjd->rhij", q, k) / math.sqrt(q.shape[-1]) + bias
    return torch.einsum("rhij,rhjd->rhid", torch.softmax(s.float(), -1).to(q.dtype), v)


def sdpa(q, k, v, bias):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def make_flex(bias):
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[0, h, q_idx, kv_idx]

    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v, _bias: compiled(q, k, v, score_mod=score_mod)


def cueq(q, k, v, bias):  # q, k, v: [1, R, H, N, d]; bias [1, 1, H, N, N] (its API's layout)
    from cuequivariance_ops_torch import triangle_attention
    return triangle_attention(q, k, v, bias)


def megafold_op(q5, k5, v5, bias):
    return torch.ops.megafold.triangle_attention(q5, k5, v5, bias, None, None)


def bench(fn, args, grads):
    from triton.testing import do_bench

    def fwd():
        with torch.no_grad():
            fn(*args)

    def fwdbwd():
        out = fn(*args)
        out.backward(grads)

    for a in args:
        a.grad = None
    torch.cuda.synchronize()
    fwd_ms = do_bench(fwd, warmup=50, rep=300, return_mode="median")
    fwdbwd_ms = do_bench(fwdbwd, warmup=50, rep=300, return_mode="median", grad_to_none=args)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fwdbwd()
    torch.cuda.synchronize()
    peak_gb = (torch.cuda.max_memory_allocated() - base) / 1e9
    return fwd_ms, fwdbwd_ms, peak_gb


def markdown(result):
    """One line per (n, impl): the table the README shows."""
    lines = [f"Triangle attention, {result['gpu']}, commit {result['commit']}, {result['date']}, "
             f"torch {result['torch']}; B=1, H={H}, d={D}, bf16, medians.", "",
             "| N | impl | fwd ms | fwd+bwd ms | peak GB | fwd TFLOP/s | fwd+bwd TFLOP/s |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in sorted(result["rows"], key=lambda r: r["n"]):
        if "error" in r:
            lines.append(f"| {r['n']} | {r['impl']} | {r['error']} | | | | |")
        else:
            lines.append(f"| {r['n']} | {r['impl']} | {r['fwd_ms']:.3f} | {r['fwdbwd_ms']:.3f} | "
                         f"{r['peak_gb']:.3f} | {r['fwd_tflops']} | {r['fwdbwd_tflops']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[256, 384, 512, 768, 1024])
    ap.add_argument("--impl", nargs="+", default=["eager", "compile", "sdpa", "flex", "cueq", "megafold"])
    args = ap.parse_args()
    torch.ops.load_library(args.lib)
    result = {"gpu": torch.cuda.get_device_name(), "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "rows": []}
    out = pathlib.Path(args.out)
    # One compiled graph per size and grad mode: keep dynamo from falling back to eager.
    torch._dynamo.config.recompile_limit = 64
    for n in args.n:
        torch._dynamo.reset()
        g = torch.Generator(device="cuda").manual_seed(n)
        # The pair projections as the model makes them: [B, i, j, H, d], rows i.
        q5, k5, v5 = (torch.randn(1, n, n, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
                      for _ in range(3))
        bias = torch.randn(1, H, n, n, device="cuda", dtype=torch.bfloat16, generator=g)
        grad5 = torch.randn(1, n, n, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
        to4 = lambda t: t[0].permute(0, 2, 1, 3).contiguous()  # [R, H, N, d]
        flops_fwd, flops_all = 4 * H * D * n**3, 14 * H * D * n**3
        for impl in args.impl:
            leaf = lambda t: t.detach().clone().requires_grad_(True)
            if impl == "megafold":
                fn, inputs, grads = megafold_op, [leaf(q5), leaf(k5), leaf(v5), leaf(bias)], grad5
            elif impl == "cueq":
                fn = cueq
                inputs = [leaf(to4(q5)[None]), leaf(to4(k5)[None]), leaf(to4(v5)[None]), leaf(bias[:, None])]
                grads = to4(grad5)[None]
            else:
                fn = {"eager": eager, "sdpa": sdpa}.get(impl)
                if impl == "compile":
                    fn = torch.compile(eager, dynamic=False)
                if impl == "flex":
                    bias_leaf = leaf(bias)
                    fn = make_flex(bias_leaf)
                inputs = [leaf(to4(q5)), leaf(to4(k5)), leaf(to4(v5))]
                inputs.append(bias_leaf if impl == "flex" else leaf(bias))
                grads = to4(grad5)
            try:
                fwd_ms, fwdbwd_ms, peak_gb = bench(fn, inputs, grads)
                row = {"op": "triangle_attention", "impl": impl, "n": n, "b": 1, "h": H, "d": D,
                       "dtype": "bf16", "fwd_ms": round(fwd_ms, 3), "fwdbwd_ms": round(fwdbwd_ms, 3),
                       "peak_gb": round(peak_gb, 3),
                       "fwd_tflops": round(flops_fwd / fwd_ms / 1e9, 1),
                       "fwdbwd_tflops": round(flops_all / fwdbwd_ms / 1e9, 1)}
            except torch.OutOfMemoryError:
                row = {"op": "triangle_attention", "impl": impl, "n": n, "error": "out of memory"}
            except ImportError as e:
                row = {"op": "triangle_attention", "impl": impl, "n": n, "error": f"not installed ({e.name})"}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            out.write_text(json.dumps(result, indent=2) + "\n")
            out.with_suffix(".md").write_text(markdown(result))
            del inputs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
