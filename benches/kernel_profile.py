#!/usr/bin/env python3
"""cubecl's per-kernel profile (`CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG=FILE`) summed by
kernel (its name's parts joined by ` · `): each timed launch is a line `| 546.982µs | FullKernel_83bd64d9` (the kernel's name, its
specialisation hash after the last `_`). Prints the top kernels as JSON: name, calls and ms per
step over `--steps` steps (the whole run's launches, the first step's and any evaluation's
included), largest time first.

    python3 benches/kernel_profile.py FILE --steps 20 [--top 10]
"""

import argparse
import json
import re
from collections import defaultdict

LINE = re.compile(r"^\|\s*([0-9.]+)\s*(ns|µs|us|ms|s)\s*\|\s*(.+?)\s*$")
SCALE = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def short(parts):
    """A kernel's name as the table shows it: up to three parts, or a long generic name's first
    part and its algorithm family (`MatmulEntry | SimpleMatmulFamily`)."""
    parts = list(parts)
    if len(parts) <= 3:
        return " · ".join(parts)
    family = [p for p in parts if p.endswith("Family")]
    return " · ".join([parts[0]] + (family or parts[1:2]))


def kernels(path):
    calls, ms = defaultdict(int), defaultdict(float)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            value, unit, name = m.groups()
            name = short(re.sub(r"_[0-9a-f]{8}$", "", p.strip()) for p in name.split("|"))
            calls[name] += 1
            ms[name] += float(value) * SCALE[unit]
    return calls, ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    calls, ms = kernels(a.log)
    top = sorted(ms, key=lambda k: -ms[k])[:a.top]
    print(json.dumps({
        "steps": a.steps,
        "launches_timed": sum(calls.values()),
        "ms_per_step_timed": sum(ms.values()) / a.steps,
        "top": [{"name": k, "calls_per_step": calls[k] / a.steps, "ms_per_step": ms[k] / a.steps}
                for k in top],
    }))


if __name__ == "__main__":
    main()
