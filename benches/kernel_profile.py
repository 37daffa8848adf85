#!/usr/bin/env python3
"""cubecl's per-kernel profile (`CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG=FILE`) summed by
kernel (its name's parts joined by ` · `): each timed launch is a line `| 546.982µs | FullKernel_83bd64d9` (the kernel's name, its
specialisation hash after the last `_`). Prints the top kernels as JSON: name, calls and ms per
step over `--steps` steps (the whole run's launches, the first step's and any evaluation's
included), largest time first. With `--steady D` (the run's dispatches per step after the
first, `device_profile.dispatches_per_step`), only the last `D · (steps − 1)` launches count:
the steps after the first, without the first step's compilation and autotune races (which
time many candidates of each product), and ms per step is over those steps.

    python3 benches/kernel_profile.py FILE --steps 20 [--top 10] [--steady 149]
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


def kernels(path, last=None):
    """Calls and milliseconds by kernel, over every timed launch or the `last` ones."""
    launches = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                launches.append(m.groups())
    if last is not None:
        launches = launches[-last:] if last > 0 else []
    calls, ms = defaultdict(int), defaultdict(float)
    for value, unit, name in launches:
        name = short(re.sub(r"_[0-9a-f]{8}$", "", p.strip()) for p in name.split("|"))
        calls[name] += 1
        ms[name] += float(value) * SCALE[unit]
    return calls, ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--steady", type=float, default=None)
    a = ap.parse_args()
    steps = a.steps
    last = None
    if a.steady:
        steps = max(a.steps - 1, 1)
        last = round(a.steady * steps)
    calls, ms = kernels(a.log, last)
    top = sorted(ms, key=lambda k: -ms[k])[:a.top]
    print(json.dumps({
        "steps": steps,
        "steady": bool(a.steady),
        "launches_timed": sum(calls.values()),
        "ms_per_step_timed": sum(ms.values()) / steps,
        "top": [{"name": k, "calls_per_step": calls[k] / steps, "ms_per_step": ms[k] / steps}
                for k in top],
    }))


if __name__ == "__main__":
    main()
