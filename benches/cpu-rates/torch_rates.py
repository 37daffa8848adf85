"""PyTorch's (MKL's) rate on the output layer's three products at Gowalla's shapes, the
counterpart of `cargo run --release` here: python torch_rates.py [threads batch hidden classes]."""
import sys
import time

import torch


def best(f, reps=5):
    f()
    out = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t)
    return out


def main():
    args = [int(a) for a in sys.argv[1:]] or [2, 500, 600, 40981]
    threads, b, h, c = args
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    hv = torch.randn(b, h, generator=g)
    w = torch.randn(c, h, generator=g) * 0.01
    z = torch.randn(b, c, generator=g)
    flop = 2 * b * h * c
    print(f"torch {torch.__version__}, {threads} threads, [{b}, {h}] x [{h}, {c}] "
          f"({flop / 1e9:.1f} GFLOP each):")
    total = 0.0
    for name, f in [("z = h Wt", lambda: hv @ w.t()), ("dh = g W", lambda: z @ w),
                    ("dW = gt h", lambda: z.t() @ hv)]:
        s = best(f)
        total += s
        print(f"  {name:<10} {s * 1e3:7.1f} ms  {flop / s / 1e9:6.1f} GFLOP/s")
    print(f"  the three: {total * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
