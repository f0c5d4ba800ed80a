"""Timing of ndir.data: building the embedded set, then scanning and checking it.

Usage: python benchmarks/bench_data.py [n_groups] [n_jobs]

Prints the build time (target: 200 groups in under 20 s on 2 cores), the
group-size distribution, and the decoding rate of validate_images with 1 and
``n_jobs`` threads.
"""

import sys
import tempfile
import time
from pathlib import Path

from ndir.data import build_embedded_dataset, scan_dataset, validate_images


def main(n_groups=200, n_jobs=2):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "embedded"
        start = time.perf_counter()
        table = build_embedded_dataset(folder, n_groups=n_groups, seed=0)
        built = time.perf_counter() - start
        sizes = table.groupby("group").size()
        print(
            f"build_embedded_dataset: {n_groups} groups, {len(table)} images in {built:.2f} s "
            f"({len(table) / built:.0f} images/s)"
        )
        print("group sizes:", sizes.value_counts().sort_index().to_dict(), f"mean {sizes.mean():.2f}")

        images, _ = scan_dataset("embedded", folder)
        timings = {}
        for jobs in sorted({1, n_jobs}):
            start = time.perf_counter()
            validate_images(images, min_size=40, n_jobs=jobs)
            timings[jobs] = time.perf_counter() - start
            print(f"validate_images, {jobs} thread(s): {len(images) / timings[jobs]:.0f} images/s")
        if n_jobs != 1:
            print(f"speed-up with {n_jobs} threads: {timings[1] / timings[n_jobs]:.2f}x")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:]))
