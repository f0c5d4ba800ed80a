"""Time PCAProjection.fit (Gram matrix) against scikit-learn's PCA solvers.

The shape is the paper's largest case: the 745 Holidays training images (250 groups)
with FV-512 signatures (2 x 512 x 80 = 81,920 dimensions), reduced to R = 256.

    python benchmarks/bench_pca.py [--images 745] [--dim 81920] [--components 256]
"""

import argparse

import numpy as np
from sklearn.decomposition import PCA
from timing import best_time

from ndir.projection import PCAProjection


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=745)
    parser.add_argument("--dim", type=int, default=81920)
    parser.add_argument("--components", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    X = np.random.default_rng(0).random((args.images, args.dim), dtype=np.float32)
    R = args.components
    fits = {
        "PCAProjection (Gram)": lambda: PCAProjection(R).fit(X),
        "sklearn PCA full": lambda: PCA(R, svd_solver="full").fit(X),
        "sklearn PCA randomized": lambda: PCA(R, svd_solver="randomized", random_state=0).fit(X),
    }
    print(f"fit on {args.images} x {args.dim} float32, R = {R}, best of {args.repeats}")
    seconds = {name: best_time(fit, args.repeats, warmup=False) for name, fit in fits.items()}
    reference = seconds["PCAProjection (Gram)"]
    for name, value in seconds.items():
        print(f"{name:24s} {value:8.2f} s   x{value / reference:6.1f}")


if __name__ == "__main__":
    main()
