#!/usr/bin/env python3
"""The results tables of the README and docs/performance.md, rendered from bench/results/*.json.

Each table sits between `<!-- report:NAME -->` and `<!-- /report:NAME -->`; this script writes
what the JSON says there (--write) or checks that it is there (--check, run by the test suite,
so a table cannot drift from its results file).

usage: python3 bench/report.py --write | --check [--readme README.md] [--performance docs/performance.md]
"""
import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def load(name):
    return json.loads((RESULTS / f"{name}.json").read_text())


def bold_min(cells, values):
    """Bold the cell with the smallest value (None: not measured)."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return cells
    best = min(present)
    return [f"**{c}**" if v == best else c for c, v in zip(cells, values)]


def memory_table():
    d = load("frontier")
    modes = ["fast", "balanced", "frontier"]
    groups = {}
    for r in d["rows"]:
        # A row run with config overrides (frontier.py --set) is its own workload.
        model = r["model"] + "".join(f" ({a})" for a in r.get("set", ()))
        groups.setdefault((model, r["n"]), {})[r["memory_mode"]] = r
    lines = [f"`bench/results/frontier.json`, {d['gpu']}: step time (median after the first step) / peak GPU "
             "memory; + host: pinned host memory where it exceeds the GPU peak.", "",
             "| workload | N | " + " | ".join(modes) + " |", "|---|---|" + "---|" * len(modes)]
    order = {"trunk48": 0, "af3-full": 1}
    last = None
    for (model, n), by_mode in sorted(groups.items(),
                                      key=lambda kv: (order.get(kv[0][0].split(" ")[0], 9), kv[0][0], kv[0][1])):
        measured = [r for r in by_mode.values() if "error" not in r]
        # Bold the lowest peak: the memory mode that saves the most at this size.
        lowest = min(r["peak_gb"] for r in measured) if len(measured) > 1 else None
        cells = []
        for m in modes:
            r = by_mode.get(m)
            if r is None or "error" in r:
                cells.append("" if r is None else r["error"])
                continue
            peak = f"{r['peak_gb']:.1f} GB"
            cell = f"{r['step_s']:.3g} s / {'**' + peak + '**' if r['peak_gb'] == lowest else peak}"
            if r.get("host_gb") and r["host_gb"] > r["peak_gb"]:
                cell += f" + {r['host_gb']:.1f} GB host"
            cells.append(cell + (" (one step)" if r.get("steps") == 1 else ""))
        lines.append(f"| {model if model != last else ''} | {n} | " + " | ".join(cells) + " |")
        last = model
    return "\n".join(lines)


BLOCK_IMPLS = [
    ("megafold-kernel", "megafold C++ (CUDA kernels)"),
    ("compile-cueq", "torch.compile, cuEquivariance triangle attention + multiplication"),
    ("compile-flex", "torch.compile, FlexAttention + cuEquivariance multiplication"),
    ("compile", "torch.compile"),
    ("eager", "PyTorch eager"),
]


def block_table(name="pairformer_block"):
    """One row per implementation and commit: the baselines and ours of one run side by side,
    and ours again at any other commit (labelled with it; the first row of each in the file)."""
    d = load(name)
    ns = sorted({r["n"] for r in d["rows"]})
    by = {}
    for r in d["rows"]:
        by.setdefault((r["impl"], r.get("commit", d["commit"])), {}).setdefault(r["n"], r)
    lines = [f"`bench/results/{name}.json`, {d['gpu']}, fwd+bwd median / peak; the commit of each "
             "run in brackets:", "",
             "| block | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    # The run with the most implementations (the side-by-side one) first, later runs of ours after.
    runs = [c for _, c in by]
    # Ties go to the file's own (latest) run, not to a set's iteration order.
    main_run = max(sorted(set(runs)), key=lambda c: (runs.count(c), c == d["commit"]))
    rows = [(f"{label} [{commit}]", [cells.get(n) for n in ns])
            for impl, label in BLOCK_IMPLS
            for (i, commit), cells in sorted(by.items(), key=lambda kv: kv[0][1] != main_run) if i == impl]
    for col, n in enumerate(ns):  # bold the fastest per size
        times = [r[col]["fwdbwd_ms"] if r[col] and "fwdbwd_ms" in r[col] else None for _, r in rows]
        best = min(t for t in times if t is not None)
        for (_, rs), t in zip(rows, times):
            if t == best:
                rs[col] = dict(rs[col], best=True)
    for label, rs in rows:
        cells = []
        for r in rs:
            if r is None:
                cells.append("")
            elif "error" in r:
                cells.append("out of memory" if "out of memory" in r["error"] else "does not compile"
                             if "Lowering" in r["error"] or "compile" in r["error"].lower() else "error")
            else:
                t = f"{r['fwdbwd_ms']:.1f} ms"
                cells.append(f"{'**' + t + '**' if r.get('best') else t} / {r['peak_gb']:.1f} GB")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


ATTENTION_IMPLS = [("megafold", "megafold kernels"), ("flex", "FlexAttention (torch.compile)"),
                   ("cueq", "cuEquivariance"), ("compile", "torch.compile"), ("eager", "PyTorch eager")]
PERF_ATTENTION_IMPLS = [("megafold", "**megafold kernels** (TMA + wgmma forward, dQ, dK/dV, bias gradient)"),
                        ("flex", "FlexAttention (compiled), bias score_mod"),
                        ("cueq", "cuEquivariance 0.13 `triangle_attention`"), ("sdpa", "SDPA, bias as attn_mask"),
                        ("compile", "torch.compile (eager code)"), ("eager", "PyTorch eager")]


def attention_rows(implementations, with_memory):
    """Rows of fwd+bwd time per implementation and N (fastest bold), with peak memory when asked."""
    d = load("triangle_attention")
    ns = sorted({r["n"] for r in d["rows"]})
    by = {(r["impl"], r["n"]): r for r in d["rows"]}
    impls = [(i, label) for i, label in implementations if any((i, n) in by for n in ns)]
    best = {n: min(by[(i, n)]["fwdbwd_ms"] for i, _ in impls if "fwdbwd_ms" in by.get((i, n), {})) for n in ns}
    lines = ["| impl | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for impl, label in impls:
        cells = []
        for n in ns:
            r = by.get((impl, n), {})
            if "fwdbwd_ms" not in r:
                cells.append(r.get("error", "") if with_memory else "")
                continue
            t = f"{r['fwdbwd_ms']:.2f} ms"
            t = f"**{t}**" if r["fwdbwd_ms"] == best[n] else t
            cells.append(f"{t} / {r['peak_gb']:.2f} GB" if with_memory else t)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return d, lines


def attention_table():
    d, rows = attention_rows(ATTENTION_IMPLS, with_memory=False)
    return "\n".join([f"`bench/results/triangle_attention.json`, {d['gpu']}, one run at {d['commit']}: fwd+bwd median, "
                      "B=1, H=4, d=32, bf16.", ""] + rows)


def attention_memory_table():
    """docs/performance.md: fwd+bwd time / peak extra memory of every implementation."""
    d, rows = attention_rows(PERF_ATTENTION_IMPLS, with_memory=True)
    return "\n".join([f"{d['gpu']}, one run at {d['commit']} ({d['date'][:10]}); fwd+bwd median / peak extra memory.",
                      ""] + rows)


TABLES = {"memory": memory_table, "block": block_table, "block-h100": lambda: block_table("pairformer_block_h100"),
          "attention": attention_table}
DOC_TABLES = {"attention-memory": attention_memory_table}


def render(text, tables):
    for name, make in tables.items():
        pattern = re.compile(rf"(<!-- report:{name} -->\n)(?:.*?\n)?(<!-- /report:{name} -->)", re.S)
        if not pattern.search(text):
            sys.exit(f"no <!-- report:{name} --> ... <!-- /report:{name} --> block")
        text = pattern.sub(lambda m: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--performance", default=str(ROOT / "docs" / "performance.md"))
    args = ap.parse_args()
    stale = []
    for path, tables in ((pathlib.Path(args.readme), TABLES), (pathlib.Path(args.performance), DOC_TABLES)):
        text = path.read_text()
        new = render(text, tables)
        if args.write:
            path.write_text(new)
        elif new != text:
            stale.append(str(path))
    if stale:
        sys.exit(f"{', '.join(stale)}: results tables differ from bench/results/*.json; run python3 bench/report.py --write")


if __name__ == "__main__":
    main()
