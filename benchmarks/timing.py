"""Shared helpers of the benchmark scripts (run them as ``python benchmarks/<x>.py``): the
timing, and the peers that several scripts time ndir against."""

import time
import warnings

from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture


def best_time(function, repeats=3, warmup=True):
    """Smallest wall time in seconds of ``repeats`` calls of ``function()``.

    One untimed call first when ``warmup``, so that caches and lazy imports settle.
    """
    if warmup:
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def fit_sklearn_gmm(X, weights, means, variances, max_iter):
    """scikit-learn's diagonal GaussianMixture from the given start, ``max_iter`` EM
    iterations with no early stop: the peer of ``ndir.codebooks.gmm_em``."""
    mixture = GaussianMixture(
        len(weights),
        covariance_type="diag",
        max_iter=max_iter,
        tol=0.0,
        init_params="random",
        weights_init=weights,
        means_init=means,
        precisions_init=1 / variances,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mixture.fit(X)
