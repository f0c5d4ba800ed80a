"""Timings of Joint Codebook Factorization (ndir.jcf) against the Fisher Vector.

Prints:

- encoding one image of n = 400 local features (d = 80) at K = 64: the GMM posteriors
  (shared by both), the Fisher Vector (``ndir.encoding.fisher_vector``, posteriors
  included), the JCF-64 pooling (R = 64, 2 R d K = 655,360 parameters; with every
  posterior, and with those under 1e-6 dropped, the workflow's setting), the shared
  JCF-64-8 and the factorised form without codebook (K = 1); and the ratios to the
  FV, with the GEMM flops of each;
- one training epoch of JCF-64 (K = 64, R = 64) on a synthetic set of 300 images of
  400 features (100 groups of 3; the 20 % hold-out evaluation included), full batch
  and in mini-batches of 8 groups (the default), the latter also with the posteriors
  below 1e-6 dropped (the workflow's setting), and of JCF-64-8.

Encoding times are the best of a few repeats (the machine may be shared); an epoch's
time is the faster of two.

On a machine shared with other jobs, small GEMMs on 2 BLAS threads can wait
milliseconds for a busy core: compare thread counts with ``--threads 1 2``.

    python benchmarks/bench_jcf.py [--threads 1 2] [--quick]
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402
from timing import best_time  # noqa: E402

from ndir.encoding import fisher_vector, gmm_posteriors  # noqa: E402
from ndir.jcf import JCF  # noqa: E402

N, D, K, R, K_SHARED = 400, 80, 64, 64, 8


def synthetic_codebook(rng):
    weights = np.full(K, 1.0 / K)
    means = rng.normal(size=(K, D)).astype(np.float32)
    variances = rng.uniform(0.5, 1.5, size=(K, D)).astype(np.float32)
    return weights, means, variances


def synthetic_images(rng, n_images, codebook):
    """Features drawn around the codebook's means; posteriors from the codebook."""
    weights, means, variances = codebook
    features, posteriors = [], []
    for _ in range(n_images):
        X = (means[rng.integers(K, size=N)] + rng.normal(size=(N, D)) * np.sqrt(variances[0])).astype(np.float32)
        features.append(X)
        posteriors.append(gmm_posteriors(X, weights, means, variances))
    return features, posteriors


def bench_encoding(rng, codebook, repeats):
    weights, means, variances = codebook
    (X,), (H,) = synthetic_images(rng, 1, codebook)
    groups = np.array([0, 0, 1, 1])
    exact = dict(n_epochs=0, posterior_threshold=0.0, random_state=0)
    models = {
        f"JCF-{R} (K={K})": (JCF(n_components=R, **exact), H, 2 * N * D * K * 2 * R),
        f"JCF-{R}, h < 1e-6 dropped": (
            JCF(n_components=R, n_epochs=0, posterior_threshold=1e-6, random_state=0),
            H,
            2 * int(np.count_nonzero(H >= 1e-6)) * D * 2 * R,
        ),
        f"JCF-{R}-{K_SHARED} (K={K})": (
            JCF(n_components=R, n_shared=K_SHARED, **exact),
            H,
            2 * N * D * K_SHARED * 2 * R + 2 * N * K * K_SHARED * 2,
        ),
        f"factorised, no codebook (R={R})": (JCF(n_components=R, **exact), None, 2 * N * D * 2 * R),
    }
    posteriors_s = best_time(lambda: gmm_posteriors(X, weights, means, variances), repeats)
    fv_s = best_time(lambda: fisher_vector(X, weights, means, variances), repeats)
    print(f"encoding one image, n = {N} features, d = {D}, K = {K} (best of {repeats}):")
    print(f"  {'GMM posteriors':30s} {1e3 * posteriors_s:8.2f} ms")
    print(f"  {f'Fisher Vector ({2 * K * D} dims)':30s} {1e3 * fv_s:8.2f} ms, posteriors included")
    for name, (model, posteriors, flops) in models.items():
        per_image = None if posteriors is None else [posteriors]
        model.fit([X] * 4, None if posteriors is None else per_image * 4, groups)
        pool_s = best_time(lambda: model.transform([X], per_image), repeats)
        total_s = pool_s + (0.0 if posteriors is None else posteriors_s)
        print(
            f"  {name:30s} {1e3 * pool_s:8.2f} ms pooling ({flops / 1e6:.0f} Mflop, "
            f"{flops / pool_s / 1e9:.1f} GFLOP/s), {1e3 * total_s:.2f} ms in all: x{total_s / fv_s:.1f} the FV"
        )


def bench_epoch(rng, codebook, n_images):
    """Times read from ``history_[i]["seconds"]`` of one fit of two epochs."""
    features, posteriors = synthetic_images(rng, n_images, codebook)
    groups = np.repeat(np.arange(n_images // 3), 3)
    share = np.mean([np.mean(H >= 1e-6) for H in posteriors])
    print(
        f"training on {n_images} images x {N} features (20 % of the groups held out; {share:.0%} of h >= 1e-6 "
        "here, 20 % on the default run's images):"
    )
    for name, settings in [
        (f"JCF-{R}, full batch", dict(n_components=R, batch_groups=None, posterior_threshold=0.0)),
        (f"JCF-{R}, 8 groups per step", dict(n_components=R, batch_groups=8, posterior_threshold=0.0)),
        (f"JCF-{R}, 8 groups, h < 1e-6 dropped", dict(n_components=R, batch_groups=8, posterior_threshold=1e-6)),
        (
            f"JCF-{R}-{K_SHARED}, 8 groups per step",
            dict(n_components=R, n_shared=K_SHARED, batch_groups=8, posterior_threshold=0.0),
        ),
    ]:
        model = JCF(**settings, n_epochs=2, random_state=0).fit(features, posteriors, groups)
        seconds = [h["seconds"] for h in model.history_]
        epoch_s = min(np.diff(seconds))
        print(
            f"  {name:32s} {epoch_s:7.2f} s per epoch, hold-out evaluation included "
            f"(set-up: initialisation, first loss and evaluation {seconds[0]:.2f} s)"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and 60 training images")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    codebook = synthetic_codebook(rng)
    for threads in args.threads:
        with threadpool_limits(threads):
            print(f"BLAS threads: {threads}")
            bench_encoding(rng, codebook, repeats=3 if args.quick else 10)
            bench_epoch(rng, codebook, 60 if args.quick else 300)


if __name__ == "__main__":
    main()
