#!/usr/bin/env python3
"""Where a step's GPU waits: reads a Chrome trace of one step (`megafold dev block --trace FILE`,
PyTorch's Kineto format) and reports the device's busy time (the union of kernels, copies and
fills) against the span from its first to its last activity, and the idle gaps between them.
A gap is charged to the host operator that launched the activity after it (the innermost
operator around the launch call): those are the operators whose issue time the GPU waited
out. Prints one JSON line of totals, then the operators by idle time charged, then the largest
gaps.

usage: python3 bench/trace_gaps.py TRACE.json [--top 15] [--min-gap-us 2]
"""
import argparse
import bisect
import collections
import json

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def innermost_ops(ops):
    """Per host thread: operators sorted by start, with their start times apart for bisection."""
    by_tid = collections.defaultdict(list)
    for e in ops:
        by_tid[e["tid"]].append(e)
    return {tid: (sorted(v, key=lambda e: e["ts"]), sorted(e["ts"] for e in v)) for tid, v in by_tid.items()}


def enclosing(by_tid, tid, ts):
    """The latest-starting operator on thread tid that contains ts (the innermost: operators of
    one thread nest)."""
    ops, starts = by_tid.get(tid, ([], []))
    i = bisect.bisect_right(starts, ts)
    for e in reversed(ops[:i]):
        if e["ts"] <= ts <= e["ts"] + e["dur"]:
            return e["name"]
    return "(no operator)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--min-gap-us", type=float, default=2.0)
    args = ap.parse_args()

    events = load(args.trace)
    device = sorted((e for e in events if e.get("cat") in DEVICE_CATS), key=lambda e: e["ts"])
    if not device:
        raise SystemExit(f"{args.trace}: no kernels, copies or fills in the trace (a CPU run?)")
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    # Launches through the runtime (cudaLaunchKernel) and the driver (cuLaunchKernelEx, as cuBLAS
    # issues its GEMMs).
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    by_tid = innermost_ops(ops)

    busy, gaps, end = 0.0, [], device[0]["ts"]
    seg_start = device[0]["ts"]
    for e in device:
        if e["ts"] > end:
            busy += end - seg_start
            gap = e["ts"] - end
            if gap >= args.min_gap_us:
                launch = launches.get(e.get("args", {}).get("correlation"))
                op = enclosing(by_tid, launch["tid"], launch["ts"]) if launch else "(unknown launch)"
                gaps.append((gap, op, e["name"]))
            seg_start = e["ts"]
        end = max(end, e["ts"] + e["dur"])
    busy += end - seg_start
    span = end - device[0]["ts"]
    host_span = (max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)) if ops else 0.0
    print(json.dumps({"trace": args.trace, "device_span_ms": round(span / 1e3, 3),
                      "device_busy_ms": round(busy / 1e3, 3), "idle_ms": round((span - busy) / 1e3, 3),
                      "gaps": len(gaps), "activities": len(device), "host_ops": len(ops),
                      "host_span_ms": round(host_span / 1e3, 3)}))
    charged = collections.defaultdict(lambda: [0.0, 0])
    for gap, op, _ in gaps:
        charged[op][0] += gap
        charged[op][1] += 1
    print(f"\nidle time by the operator that launched the next activity (top {args.top}):")
    for op, (t, k) in sorted(charged.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {t / 1e3:8.3f} ms  {k:4d} gaps  {op[:100]}")
    print(f"\nlargest gaps (top {args.top}):")
    for gap, op, kernel in sorted(gaps, reverse=True)[:args.top]:
        print(f"  {gap:8.1f} us  before {kernel[:70]}  (launched in {op[:60]})")


if __name__ == "__main__":
    main()
