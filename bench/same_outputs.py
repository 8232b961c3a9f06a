#!/usr/bin/env python3
"""Whether two builds of the op library give the same triangle attention, bit for bit: output
and the gradients of q, k, v and the bias, for awkward shapes (N not a multiple of the 64-row
tiles, a masked key tail, a fully masked row, fp16 and bf16). A kernel change that only moves
data (registers instead of shared memory, another pipeline depth) must keep every bit; one
that changes arithmetic is reported with its largest difference, relative to the output's scale.
The two libraries register the same op names, so each runs in a process of its own and writes
its tensors to a file; the parent compares them.

usage: python3 bench/same_outputs.py --lib NEW.so --against BASE.so [--n 129 576 1000]
A line per tensor, then a summary line; exit status 0 when every tensor matches bitwise, 1 otherwise.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

H, D = 4, 32


def cases(ns):
    """(name, N, dtype, bias?, mask kind); the shapes, not the values (those are seeded)."""
    for n in ns:
        yield f"bf16 bias N={n}", n, torch.bfloat16, True, None
        yield f"bf16 bias tail-mask N={n}", n, torch.bfloat16, True, "tail"
    yield "fp16 no-bias masked-row N=193", 193, torch.float16, False, "row"


def dump(lib, ns, path):
    torch.ops.load_library(lib)
    results = {}
    for name, n, dtype, with_bias, mask_kind in cases(ns):
        g = torch.Generator(device="cuda").manual_seed(n * 7 + (3 if with_bias else 0))
        q, k, v = (torch.randn(1, n, n, H, D, device="cuda", dtype=dtype, generator=g).requires_grad_()
                   for _ in range(3))
        # A climbing bias makes later keys dominate, as a softmax's running maximum must follow.
        bias = None
        if with_bias:
            ramp = torch.linspace(0, 12, n, device="cuda")
            bias = (torch.randn(1, H, n, n, device="cuda", generator=g) * 2 + ramp).to(dtype).requires_grad_()
        mask = None
        if mask_kind == "tail":
            mask = torch.ones(1, n, n, device="cuda")
            mask[..., n - n // 8:] = 0
        elif mask_kind == "row":
            mask = (torch.rand(1, n, n, device="cuda", generator=g) > 0.3).float()
            mask[:, 5] = 0  # every key of one row's attention masked
        out = torch.ops.megafold.triangle_attention(q, k, v, bias, mask, None)
        out.backward(torch.randn(out.shape, device="cuda", dtype=dtype, generator=g))
        leaves = {"q": q, "k": k, "v": v} | ({"bias": bias} if bias is not None else {})
        results[name] = {"out": out.detach().cpu()} | {f"d{key}": t.grad.cpu() for key, t in leaves.items()}
    torch.save(results, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--against", help="the base library (required)")
    ap.add_argument("--n", type=int, nargs="+", default=[129, 576, 1000])
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        dump(args.lib, args.n, args.dump)
        return 0
    if not args.against:
        ap.error("--against BASE.so is required")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for side, lib in (("new", args.lib), ("base", args.against)):
            paths[side] = os.path.join(tmp, f"{side}.pt")
            subprocess.run([sys.executable, __file__, "--lib", lib, "--dump", paths[side], "--n", *map(str, args.n)],
                           check=True)
        new, base = (torch.load(paths[s]) for s in ("new", "base"))
    return 0 if compare(new, base) else 1


def compare(new, base):
    """Prints a line per tensor of the two dumps and a summary line; whether all are bitwise equal."""
    equal, relative = 0, []  # relative: each differing tensor's largest difference / its max |base|
    for name, tensors in base.items():
        for key, b in tensors.items():
            a = new[name][key]
            if torch.equal(a, b):
                print(f"{name:32s} {key:6s} bitwise equal")
                equal += 1
                continue
            diff = (a.float() - b.float()).abs()
            worst = diff.max().item()
            relative.append(worst / max(b.float().abs().max().item(), 1e-30))
            print(f"{name:32s} {key:6s} DIFFERS: max |diff| {worst:.3e} "
                  f"({relative[-1]:.2e} of max |base|), "
                  f"{(diff > 0).float().mean().item() * 100:.3f}% of elements, nan new/base "
                  f"{a.isnan().sum().item()}/{b.isnan().sum().item()}")
    largest = f" (the largest by {max(relative):.2e} of the base's largest value)" if relative else ""
    print(f"{equal} tensors bitwise equal, {len(relative)} differ{largest}")
    return not relative


if __name__ == "__main__":
    sys.exit(main())
