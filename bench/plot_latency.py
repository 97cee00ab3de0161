#!/usr/bin/python3
"""Renders driver_bench's CSV into a PNG: latency distribution (CDF) by
concurrency, the driver against the syscall floor and a no-op gRPC call.

    bench/plot_latency.py bench.csv docs/performance-latency.png
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

# (impl, op) -> (label, colour, line style)
SERIES = {
    ("driver", "publish"): ("driver publish", "tab:blue", "-"),
    ("driver", "unpublish"): ("driver unpublish", "tab:orange", "-"),
    ("floor", "publish"): ("floor publish (syscalls only)", "tab:blue", ":"),
    ("floor", "unpublish"): ("floor unpublish", "tab:orange", ":"),
    ("floor-api", "publish"): ("floor-api publish (the driver's syscalls)",
                               "tab:green", "-."),
    ("grpc", "noop"): ("no-op RPC (gRPC round trip)", "tab:gray", "--"),
    ("driver-pc", "publish"): ("driver publish, a connection per call",
                               "tab:purple", "-"),
    ("grpc-pc", "noop"): ("no-op RPC, a connection per call", "tab:purple",
                          "--"),
}


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    data = defaultdict(list)  # (concurrency, impl, op) -> latencies (us)
    with open(argv[1], newline="") as f:
        for row in csv.DictReader(f):
            key = (int(row["concurrency"]), row["impl"], row["op"])
            data[key].append(float(row["latency_us"]))
    levels = sorted({c for c, _, _ in data})
    fig, axes = plt.subplots(1, len(levels), figsize=(4.2 * len(levels), 3.6),
                             sharey=True, squeeze=False)
    for ax, c in zip(axes[0], levels):
        for (impl, op), (label, colour, style) in SERIES.items():
            values = sorted(data.get((c, impl, op), []))
            if not values:
                continue
            n = len(values)
            ax.plot(values, [(i + 1) / n for i in range(n)], style,
                    color=colour, label=label, linewidth=1.4)
        ax.set_xscale("log")
        ax.set_title(f"concurrency {c}")
        ax.set_xlabel("latency (µs, log)")
        ax.axhline(0.99, color="black", linewidth=0.5, alpha=0.4)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("fraction of calls ≤ latency")
    axes[0][0].legend(loc="lower right", fontsize=7)
    fig.suptitle("flux-curve-csi publish/unpublish latency vs the syscall "
                 "floor (driver_bench)", fontsize=10)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=90)


if __name__ == "__main__":
    main(sys.argv)
