#!/usr/bin/python3
"""Renders lifecycle_bench's CSV into a PNG: seconds from create to the Flux
instance wired up, and to every pod Ready, by MiniCluster size, against the
floor (an Indexed Job plus headless Service whose pods only resolve their
peers) measured in the same run; one dot per round, the bar its median.

    bench/plot_lifecycle.py lifecycle.csv lifecycle.png
"""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

SERIES = (("floor", "floor: peers' names resolve", "tab:gray"),
          ("wired", "MiniCluster: rank 0 in state run", "tab:blue"),
          ("ready", "MiniCluster: every pod Ready", "tab:cyan"),
          ("wired_view", "no Flux in the image, the driver's view: rank 0 in run", "tab:orange"))


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    data = defaultdict(list)  # (what, size) -> seconds
    with open(argv[1], newline="") as f:
        for row in csv.DictReader(f):
            for what, _, _ in SERIES:
                data[(what, int(row["size"]))].append(float(row[what]))
    sizes = sorted({size for _, size in data})
    width = 0.8 / len(SERIES)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for k, (what, label, colour) in enumerate(SERIES):
        for i, size in enumerate(sizes):
            values = data[(what, size)]
            x = i + (k - (len(SERIES) - 1) / 2) * width
            ax.bar(x, statistics.median(values), width, color=colour,
                   label=label if i == 0 else None)
            ax.plot([x] * len(values), values, "k.", markersize=4)
    ax.set_xticks(range(len(sizes)), [f"size {s}" for s in sizes])
    ax.set_ylabel("seconds from create")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("MiniCluster time-to-ready on the real node against the floor "
                 "(lifecycle_bench)", fontsize=10)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=90)


if __name__ == "__main__":
    main(sys.argv)
