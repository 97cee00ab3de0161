#!/usr/bin/python3
"""Renders driver_bench's scale CSV (<csv>.scale.csv) into a PNG: publish and
unpublish latency (p50, p99) at c=1 against the driver's volumes already
mounted, the driver beside floor-api (its own syscalls, no gRPC).

    bench/plot_scale.py bench.csv.scale.csv docs/performance-scale.png
"""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"driver": ("tab:blue", "-"), "floor-api": ("tab:green", "-.")}


def quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))]


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    data = defaultdict(list)  # (impl, op, held) -> latencies (us)
    with open(argv[1], newline="") as f:
        for row in csv.DictReader(f):
            data[(row["impl"], row["op"], int(row["held"]))].append(
                float(row["latency_us"]))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, op in zip(axes, ("publish", "unpublish")):
        for impl, (colour, style) in STYLE.items():
            held = sorted(h for i, o, h in data if i == impl and o == op)
            if not held:
                continue
            p50 = [statistics.median(data[(impl, op, h)]) for h in held]
            p99 = [quantile(data[(impl, op, h)], 0.99) for h in held]
            ax.plot(held, p50, style, color=colour, marker="o",
                    label=f"{impl} p50")
            ax.plot(held, p99, style, color=colour, alpha=0.4, marker=".",
                    label=f"{impl} p99")
        ax.set_title(op)
        ax.set_xlabel("the driver's volumes already mounted")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("latency at c=1 (µs, log)")
    axes[0].legend(loc="upper left", fontsize=7)
    fig.suptitle("flux-curve-csi latency against volumes on the node "
                 "(driver_bench scale run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=90)


if __name__ == "__main__":
    main(sys.argv)
