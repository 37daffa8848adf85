#!/usr/bin/env python3
"""The scaling analysis on paper (docs/scaling.md): memory per rank, bytes each rank sends per
step by collective, and the step time the interconnect and the arithmetic bound, for widebag's
multi-process step (row-sharded tables, data-parallel dense layers, class-split output), for
the seed model and a table 100x as wide, on 8, 64 and 512 GPUs.

    python3 docs/scaling.py > docs/scaling.md.tables

Every figure is computed from the formulas below; the per-collective byte formulas are the ones
the trainer counts (`sent_bytes_per_step`) and were checked against `benches/ranks.sh`'s
measured counts at N = 2 and 4 on the seed model (see check_against_measured).
"""

F32 = 4

# Assumed hardware (stated, not measured here: this project has no GPU machine):
NODE_GPUS = 8
NVLINK_BPS = 450e9  # per GPU, one direction, within a node (H100 SXM NVLink 4: 900 GB/s both)
IB_BPS = 50e9  # per GPU across nodes (one 400 Gb/s NDR link per GPU)
GPU_FLOPS = 400e12  # sustained TF32 tensor-core matmul on an H100, about 40 % of its peak


def model(width, classes, dim=1024, last=512, batch=128, unique_per_row=11):
    return dict(W=width, C=classes, d=dim, L=last, b=batch, u=unique_per_row)


def per_rank(m, n):
    """Bytes one of n ranks holds, and sends per step, with local batch b (weak scaling)."""
    W, C, d, L, b, u = m["W"], m["C"], m["d"], m["L"], m["b"], m["u"]
    B = n * b  # the global batch
    rows, cls = -(-W // n), -(-C // n)
    U = u * b  # unique ids in a rank's rows (the synthetic seed data: ~11 per row at b = 128)
    trunk = d * L + L + d  # the replicated dense parameters (bag bias, hidden layer)
    mem = {
        "table block + lazy Adam moments": 3 * rows * d * F32,
        "output block: weight, gradient, Adam moments": 4 * (L + 1) * cls * F32,
        "replicated trunk: weight, gradient, Adam moments": 4 * trunk * F32,
        "all-gathered h and dL/dh [B, L]": 2 * B * L * F32,
        "logits and their gradient, one class chunk [B, min(C/N, 4096)]": 2 * B * min(cls, 4096)
        * F32,
        "fetched rows and their gradients [U, d], both ways": 4 * U * d * F32,
    }
    # Bytes this rank sends per step; the ring-based reductions MPI uses (2 (n-1)/n of the
    # buffer) — widebag's own rank-order reduction sends the buffer to each other rank instead.
    away = (n - 1) / n  # the share of a rank's ids owned elsewhere (uniform owners)
    ring = 2 * (n - 1) / n
    sent = {
        "ids (all-to-all)": U * away * F32,
        "rows back (all-to-all)": U * away * d * F32,
        "row gradients (all-to-all)": U * away * d * F32,
        "hidden states (all-gather)": b * L * F32 * (n - 1),
        "log-sum-exp max and sum (all-reduce)": ring * 2 * B * F32,
        "dL/dh (all-reduce)": ring * B * L * F32,
        "dense gradients (fused all-reduce)": ring * trunk * F32,
    }
    # Arithmetic per rank: the trunk on b rows, the output block on all B rows (forward, and
    # both backward products), the bag's gathers ignored.
    flops = 6 * b * d * L + 6 * B * L * cls
    return mem, sent, flops


def bandwidth(n):
    return NVLINK_BPS if n <= NODE_GPUS else IB_BPS


def gib(x):
    if x >= 2**30:
        return f"{x / 2**30:,.2f} GiB"
    return f"{x / 2**20:,.1f} MiB" if x >= 2**20 else f"{x / 2**10:,.1f} KiB"


def table(name, m, ranks=(1, 8, 64, 512)):
    print(f"### {name}\n")
    cols = " | ".join(f"N = {n}" for n in ranks)
    print(f"| per rank | {cols} |")
    print("|---|" + "---|" * len(ranks))
    rows = {}
    for n in ranks:
        mem, sent, flops = per_rank(m, n)
        t_comm = sum(sent.values()) / bandwidth(n)
        t_math = flops / GPU_FLOPS
        entry = dict(mem)
        entry["**memory, total**"] = sum(mem.values())
        for k, v in sent.items():
            entry["sends: " + k] = v
        entry["**sends, total per step**"] = sum(sent.values())
        entry["step bound by the interconnect"] = t_comm
        entry["step bound by the arithmetic"] = t_math
        entry["global examples/s (the slower bound)"] = n * m["b"] / max(t_comm, t_math)
        rows[n] = entry
    for k in rows[ranks[0]]:
        cells = []
        for n in ranks:
            v = rows[n][k]
            if k.startswith("step"):
                cells.append(f"{v * 1e3:,.2f} ms")
            elif k.startswith("global"):
                cells.append(f"{v:,.0f}")
            else:
                cells.append(gib(v) if v else "0")
        print(f"| {k} | " + " | ".join(cells) + " |")
    print()


def check_against_measured():
    """The formulas' exact terms against benches/ranks.sh (seed model, b = 64 and 32 per rank
    at N = 2 and 4: the global batch 128 split)."""
    L, d = 512, 1024
    trunk = d * L + L + d
    for n, measured_dh, measured_dense in ((2, 256.0, 2.01), (4, 384.0, 3.01)):
        B = 128
        # widebag's reduce-scatter then all-gather: 2 (N - 1) / N of the buffer.
        dh = B * L * F32 * 2 * (n - 1) / n / 2**10
        dense = trunk * F32 * 2 * (n - 1) / n / 2**20
        assert abs(dh - measured_dh) < 0.5, (n, dh)
        assert abs(dense - measured_dense) < 0.01, (n, dense)


if __name__ == "__main__":
    check_against_measured()
    table("The seed model: 240,000 → 1024 → 512 → 240,000, 128 rows per rank",
          model(240_000, 240_000))
    table("100× as wide: 24,000,000 → 1024 → 512 → 24,000,000, 128 rows per rank",
          model(24_000_000, 24_000_000))
