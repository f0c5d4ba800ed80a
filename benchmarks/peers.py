"""ndir against the tools a user would pick instead, in one run, as ratios.

At the sizes of the paper's Holidays grid (issue 5), each row times ndir's stage and
its peer on the same input and prints ``speed-up = peer time / ndir time`` (above 1:
ndir is faster) with the target it is held to:

1. dense descriptors of one 512x384 photo (4 scales, 3-px grid): ndir's ``dense_hog``
   vs VLFeat's ``dsift`` (``fast=True``, through cyvlfeat, one call per bin size on the
   same grid) and vs OpenCV SIFT ``compute`` on the same keypoints;
2. k-means, K = 512 on 500k x 80 points, 20 iterations: ndir (faiss, every point) vs
   faiss' default (256 points per centroid) and scikit-learn's Lloyd ``KMeans``;
3. one EM iteration of a diagonal GMM, K = 512 on 500k x 80: ndir vs scikit-learn's
   ``GaussianMixture``;
4. the Fisher Vector of 20k descriptors (80-d) at K = 512 vs its GEMM bound 6 N K D at
   this machine's measured float32 GEMM rate;
5. PCA of 745 x 81,920 to R = 256: ndir's Gram-matrix PCA vs scikit-learn's PCA;
6. projecting by a D = 81,920, R = 256 projector at tau = 0.99 and 0.9: sparse (CSR,
   ndir) vs dense BLAS, for one signature and for batches of 745 and 1,491 (the
   Holidays train half and all its images);
7. assigning 30k descriptors to 20,000 visual words: ndir's faiss inverted file
   (nprobe 8) vs exact search, and the share of descriptors given their exact word.

    python benchmarks/peers.py [--threads 2] [--quick] [--out peers.md]

``--quick`` shrinks every size (a smoke test, not a measurement). VLFeat needs
``apt-get install libvlfeat-dev`` then ``pip install --no-build-isolation cyvlfeat``
(with numpy, cython and wheel installed); without it that row says so.
"""

import os

# faiss (OpenMP) and OpenBLAS threads spin-wait against each other otherwise.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import cv2  # noqa: E402
import faiss  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from bench_descriptors import CELL_SIZES, STEP, dense_keypoints, photos_512x384  # noqa: E402
from bench_encoding import descriptor_like  # noqa: E402
from sklearn.cluster import KMeans  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402
from timing import best_time, fit_sklearn_gmm  # noqa: E402

from ndir.bovw import VisualVocabulary  # noqa: E402
from ndir.codebooks import gmm_em, kmeans  # noqa: E402
from ndir.descriptors import dense_hog  # noqa: E402
from ndir.encoding import fisher_vector  # noqa: E402
from ndir.projection import PCAProjection, projection_latency  # noqa: E402

ROWS = []


def row(what, ours_s, peer, peer_s, target, met, note=""):
    """Record and print one comparison (times in seconds)."""
    speedup = peer_s / ours_s if not math.isnan(peer_s) else float("nan")
    ROWS.append(
        {
            "what": what,
            "ndir s": ours_s,
            "peer": peer,
            "peer s": peer_s,
            "speed-up (peer / ndir)": speedup,
            "target": target,
            "met": "yes" if met else "no",
            "note": note,
        }
    )
    print(
        f"{what}: ndir {ours_s:.4g} s | {peer} {peer_s:.4g} s | x{speedup:.2f} | "
        f"target {target}: {ROWS[-1]['met']} {note}"
    )


def once(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def bench_descriptors(quick):
    name, image = photos_512x384(1)[0]
    if quick:
        image = image[:128, :160]
    ours = best_time(lambda: dense_hog(image, STEP, CELL_SIZES), repeats=3)
    n = len(dense_hog(image, STEP, CELL_SIZES))
    try:
        from cyvlfeat.sift import dsift

        pixels = image.astype(np.float32)
        vlfeat = best_time(lambda: [dsift(pixels, step=STEP, size=c, fast=True) for c in CELL_SIZES], repeats=3)
        n_vl = sum(len(dsift(pixels, step=STEP, size=c, fast=True)[0]) for c in CELL_SIZES)
        row(
            "dense descriptors",
            ours,
            "VLFeat dsift fast",
            vlfeat,
            "x >= 1.5",
            vlfeat / ours >= 1.5,
            f"{n} vs {n_vl} descriptors, {name}",
        )
    except ImportError:
        row("dense descriptors", ours, "VLFeat dsift fast", float("nan"), "x >= 1.5", False, "cyvlfeat not installed")
    keypoints = dense_keypoints(*image.shape)
    sift = once(lambda: cv2.SIFT_create().compute(image, keypoints))
    row("dense descriptors", ours, "OpenCV SIFT compute", sift, "(reference)", True, f"{len(keypoints)} keypoints")


def bench_kmeans(rng, n, K, n_iter, threads):
    X = descriptor_like(rng, n, dim=80)
    ours = once(lambda: kmeans(X, K, 0, n_iter, threads))

    def faiss_default():
        faiss.Kmeans(X.shape[1], K, niter=n_iter, seed=0).train(X)

    lloyd = KMeans(K, init="random", n_init=1, max_iter=n_iter, tol=0.0, algorithm="lloyd", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sklearn_s = once(lambda: lloyd.fit(X))
    row(f"k-means {n}x80 K={K}, {n_iter} it.", ours, "scikit-learn KMeans", sklearn_s, "x >= 1", sklearn_s >= ours)
    subsampled = once(faiss_default)
    row(
        f"k-means {n}x80 K={K}, {n_iter} it.", ours, "faiss, 256 pts/centroid", subsampled, "(cost of all points)", True
    )
    return X


def bench_em(rng, X, K):
    weights = np.full(K, 1 / K)
    means = X[rng.choice(len(X), K, replace=False)].astype(np.float64)
    variances = np.tile(X.var(axis=0, dtype=np.float64), (K, 1))
    ours = best_time(lambda: gmm_em(X, weights, means, variances, 1, 1e-4 * variances[0]), repeats=1)

    def sklearn_fit(max_iter):
        fit_sklearn_gmm(X, weights, means, variances, max_iter)

    # Per iteration: (3 iterations - 1 iteration) / 2, both with sklearn's set-up.
    sklearn_s = (once(lambda: sklearn_fit(3)) - once(lambda: sklearn_fit(1))) / 2
    row(
        f"GMM EM iteration {len(X)}x80 K={K}",
        ours,
        "scikit-learn GaussianMixture",
        sklearn_s,
        "ndir <= 3 s",
        ours <= 3.0,
    )


def bench_fisher(rng, n, K):
    X = rng.normal(size=(n, 80)).astype(np.float32)
    weights = np.full(K, 1 / K, dtype=np.float32)
    means = rng.normal(size=(K, 80)).astype(np.float32)
    variances = rng.uniform(0.5, 2.0, (K, 80)).astype(np.float32)
    product = best_time(lambda: X @ means.T, repeats=5)
    ours = best_time(lambda: fisher_vector(X, weights, means, variances), repeats=5)
    gflops = 2 * n * K * 80 / product / 1e9
    row(
        f"Fisher Vector {n}x80 K={K}",
        ours,
        "6NKD GEMM bound",
        3 * product,
        "ndir <= 2x bound",
        ours <= 2 * 3 * product,
        f"ndir / bound = {ours / (3 * product):.2f}; float32 GEMM {gflops:.0f} GFLOP/s",
    )


def bench_pca(rng, n, D, R):
    X = rng.random((n, D), dtype=np.float32)
    ours = best_time(lambda: PCAProjection(R).fit(X), repeats=2)
    randomized = once(lambda: PCA(R, svd_solver="randomized", random_state=0).fit(X))
    row(f"PCA {n}x{D} R={R}", ours, "scikit-learn PCA randomized", randomized, "ndir < 1 s", ours < 1.0)
    full = once(lambda: PCA(R, svd_solver="full").fit(X))
    row(f"PCA {n}x{D} R={R}", ours, "scikit-learn PCA full", full, "ndir < 1 s", ours < 1.0)


def bench_projection(rng, batch_sizes, D, R):
    """One signature, then each batch size (ascending), through U sparse and dense."""
    X = rng.random((batch_sizes[0], D), dtype=np.float32)
    # The further rows come from their own generator: the later rows of the table then
    # draw the same data from ``rng`` as with one batch size.
    X = np.vstack([X, np.random.default_rng(1).random((batch_sizes[-1] - len(X), D), dtype=np.float32)])
    for tau in (0.99, 0.9):
        U = sp.random(D, R, density=1 - tau, random_state=0, format="csc", dtype=np.float32)
        for n in batch_sizes:
            latency = projection_latency(U, X[:n])
            if n == batch_sizes[0]:
                row(
                    f"project 1 signature, D={D} R={R} tau={tau}",
                    latency["single_sparse_s"],
                    "dense GEMV",
                    latency["single_dense_s"],
                    "sparse faster",
                    latency["single_speedup"] > 1,
                )
            if tau == 0.99:
                target, met = "x >= 3", latency["batch_speedup"] >= 3
            else:  # SparseRankProjector.transform takes dense BLAS for such batches
                target, met = "(batches use dense)", True
            row(
                f"project {n} signatures, D={D} R={R} tau={tau}",
                latency["batch_sparse_s"],
                "dense GEMM",
                latency["batch_dense_s"],
                target,
                met,
                f"sparse kernel alone {latency['batch_sparse_kernel_s']:.3g} s",
            )


def bench_assignment(rng, n, n_words):
    words = descriptor_like(rng, n_words)
    vocabulary = VisualVocabulary(words, seed=0, n_iter=0, nprobe=8)
    X = descriptor_like(rng, n)
    exact_index = faiss.IndexFlatL2(words.shape[1])
    exact_index.add(words)
    ours = best_time(lambda: vocabulary.assign(X), repeats=2)
    exact = best_time(lambda: exact_index.search(X, 1), repeats=1)
    agreement = (vocabulary.assign(X) == exact_index.search(X, 1)[1][:, 0]).mean()
    row(
        f"assign {n} descriptors to {n_words} words",
        ours,
        "exact faiss search",
        exact,
        "faster than exact",
        exact > ours,
        f"{100 * agreement:.1f} % get their exact word",
    )


def machine():
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    return f"{model}, {os.cpu_count()} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check that it runs")
    parser.add_argument("--out", help="also write the table as Markdown to this file")
    args = parser.parse_args()
    scale = 0.02 if args.quick else 1.0
    rng = np.random.default_rng(0)
    faiss.omp_set_num_threads(args.threads)
    print(f"machine: {machine()}; {args.threads} threads for BLAS and faiss")
    with threadpool_limits(limits=args.threads):
        bench_descriptors(args.quick)
        X = bench_kmeans(rng, int(500_000 * scale), 512, 20, args.threads)
        bench_em(rng, X, 512)
        bench_fisher(rng, 20_000, 512)
        bench_pca(rng, 745, int(81_920 * scale), 256 if not args.quick else 64)
        bench_projection(rng, (745, 1491), int(81_920 * scale), 256)
        bench_assignment(rng, int(30_000 * scale), int(20_000 * scale))
    table = pd.DataFrame(ROWS).to_markdown(index=False, floatfmt=".4g")
    print(table)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(f"machine: {machine()}; {args.threads} threads\n\n{table}\n")


if __name__ == "__main__":
    main()
