"""Time one training step of SparseRankProjector, and the cost of projecting with it.

At the paper's largest size (FV-512: D = 81,920; Holidays train half: N = 745; R = 256;
P = 20 queries per step) on random unit-norm signatures with group structure, prints
for tau in {0, 0.9, 0.99} the time of one step and how it splits between the gradient
(losses, their derivatives and the low-rank factors of G), the line search, the in-place
update U - mu G, the l0 projection and the recomputation of X U, for both line searches
(``projected``: its setup forms G^T, the entering candidates and X[:, S] g_S once per
step, each trial of the search costs the moved entries), from random U and, for the
projected search, from the PCA axes a training starts from (on these synthetic
signatures PCA leaves most constraints violated too, unlike real ones); then
ndir.projection.cost's storage counts and single/batch projection latencies.

With --convergence, instead trains on small structured synthetic data (D = 2000,
300 training and 300 test images in groups of 3, signatures = group centre in a
64-dimensional signal subspace + stronger nuisance in a 16-dimensional subspace shared
by all images + isotropic noise, so that PCA spends axes on the nuisance) and prints the
objective, train and test mAP scored both ways (raw y_q.y_j, the loss's similarity, and
cosine of L2-normalised projections) and the mean column norm of U against iterations,
for tau in {0, 0.9, 0.99}, with and without column renormalisation.

Run: python benchmarks/bench_sparse_rank.py [--steps 5] [--features 81920] [--sparsity 0 0.9 0.99]
     python benchmarks/bench_sparse_rank.py --convergence [--iterations 500]
Target: at most 0.5 s per tau = 0.99 step with the projected search on 2 cores at the
default size.
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits
from timing import best_time, machine_reference

from ndir.evaluation import holidays_map
from ndir.projection import PCAProjection, SparseRankProjector, _descent, _line_search, _ranking, cost
from ndir.projection import sparse_rank as sr


def grouped_signatures(n_images, n_features, group_size, seed):
    """(n_images, D) float32 unit rows in groups of ``group_size`` near duplicates
    (a few one larger), and their (n_images,) group labels."""
    rng = np.random.default_rng(seed)
    groups = np.sort(np.arange(n_images) % (n_images // group_size))
    centres = rng.standard_normal((groups[-1] + 1, n_features), dtype=np.float32)
    X = centres[groups] + rng.standard_normal((n_images, n_features), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, groups


class PhaseTimer:
    """Wraps functions of the sparse rank projector's modules to accumulate their time."""

    def __init__(self):
        self.totals = {}
        self.originals = []

    def wrap(self, owner, name, phase):
        original = getattr(owner, name)
        self.originals.append((owner, name, original))

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.totals[phase] = self.totals.get(phase, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)

    def restore(self):
        for owner, name, original in reversed(self.originals):
            setattr(owner, name, original)


def time_steps(X, groups, sparsity, n_components, n_queries, n_steps, seed, line_search, start):
    """Mean seconds per step of Algorithm 1, its split by phase, and the projectors.

    start : "random" (Gaussian U) or "pca" (the PCA axes that trainings start from,
    ``init="pca"``)."""
    rng = np.random.default_rng(seed)
    n_features = X.shape[1]
    problem = _ranking.RankingProblem(X, groups, _ranking.check_queries(groups, None), 1e-2)
    if start == "pca":
        U = PCAProjection(n_components).fit(X).components_
    else:
        U = rng.standard_normal((n_features, n_components)).astype(np.float32)
    n_keep = max(1, round((1 - sparsity) * n_features))
    timer = PhaseTimer()
    with ThreadPoolExecutor(2) as pool:
        descent = _descent.Descent(X, problem.gram, U, n_keep, True, line_search, pool, 2)
        # Phases that run from the calling thread (their blocks run on the pool).
        timer.wrap(_descent, "golden_section_search", "line search")
        if descent.projected:
            timer.wrap(_line_search.ProjectedLine, "__init__", "search setup")
            timer.wrap(_line_search.ProjectedLine, "proposal", "update + X U")
            timer.wrap(descent, "_commit", "update + X U")
        else:
            timer.wrap(descent, "_update", "update")
            timer.wrap(descent, "_move_in_span", "update")
            timer.wrap(descent, "product", "X U")
            timer.wrap(descent, "_dense_product", "X U")
            # Includes X U, subtracted below.
            timer.wrap(descent, "_project", "l0 projection")
        total = 0.0
        for _ in range(n_steps):
            selected = _ranking.select_queries(problem.losses(descent.Y), n_queries, rng)
            start = time.perf_counter()
            mu, _ = descent.step(problem, selected)
            total += time.perf_counter() - start
            assert mu > 0.0, "the benchmark step must move U"
    timer.restore()
    phases = {phase: seconds / n_steps for phase, seconds in timer.totals.items()}
    if "l0 projection" in phases:
        phases["l0 projection"] -= phases.get("X U", 0.0)
    phases["gradient"] = total / n_steps - sum(phases.values())
    return total / n_steps, phases, descent.components()


def dense_product_seconds(X, n_components):
    """Seconds of one dense float32 ``X U`` (N, D) x (D, R) on 2 BLAS threads: the unit
    a training step is compared with."""
    U = np.random.default_rng(0).standard_normal((X.shape[1], n_components), dtype=np.float32)
    with threadpool_limits(2, user_api="blas"):
        return best_time(lambda: X @ U, 3)


def nuisance_signatures(n_groups, n_features, seed, bases):
    """Unit rows: group centre in the signal subspace + shared nuisance + noise.

    bases : (signal (D, 64), nuisance (D, 16)) orthonormal columns, shared by the train
    and test sets. Returns X (3 n_groups, D) float32, groups, is_query.
    """
    rng = np.random.default_rng(seed)
    signal, nuisance = bases
    groups = np.repeat(np.arange(n_groups), 3)
    centres = rng.standard_normal((n_groups, signal.shape[1])) @ signal.T
    X = (
        centres[groups]
        + 1.5 * rng.standard_normal((groups.size, nuisance.shape[1])) @ nuisance.T
        + 0.1 * rng.standard_normal((groups.size, n_features))
    )
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), groups, np.arange(groups.size) % 3 == 0


def convergence(n_iterations, seed):
    n_features, n_components = 2000, 32
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((n_features, 80)))[0]
    bases = basis[:, :64], basis[:, 64:]
    train = nuisance_signatures(100, n_features, seed + 1, bases)
    test = nuisance_signatures(100, n_features, seed + 2, bases)
    checkpoints = {0, 10, 50, 100, 200, 500, 1000, 2000, n_iterations}

    def scores(projector, X, groups, is_query):
        Y = projector.transform(X)
        unit = Y / np.maximum(np.linalg.norm(Y, axis=1, keepdims=True), 1e-30)
        return holidays_map(Y, groups, is_query), holidays_map(unit, groups, is_query)

    print(
        f"D = {n_features}, R = {n_components}, 300 train / 300 test images; "
        "mAP in %: raw = y_q.y_j (the loss's similarity), cos = L2-normalised"
    )
    print(
        f"{'tau':>5} {'renorm':>6} {'iter':>5} {'objective':>10} {'train raw':>9} "
        f"{'train cos':>9} {'test raw':>8} {'test cos':>8} {'|u| mean':>8} "
        f"{'|u| min':>7}"
    )
    for sparsity in (0.0, 0.9, 0.99):
        for renormalize in (True, False):

            def record(iteration, projector):
                if iteration in checkpoints:
                    report(iteration, projector)

            def report(iteration, projector):
                norms = np.sqrt(projector.components_.multiply(projector.components_).sum(axis=0))
                train_raw, train_cos = scores(projector, *train)
                test_raw, test_cos = scores(projector, *test)
                print(
                    f"{sparsity:5.2f} {str(renormalize):>6} {iteration:5d} "
                    f"{projector.objective_[-1]:10.3e} {100 * train_raw:9.2f} "
                    f"{100 * train_cos:9.2f} {100 * test_raw:8.2f} "
                    f"{100 * test_cos:8.2f} {norms.mean():8.3f} {norms.min():7.3f}"
                )

            start = time.perf_counter()
            projector = SparseRankProjector(
                n_components,
                sparsity=sparsity,
                max_iter=n_iterations,
                renormalize=renormalize,
                callback=record,
                random_state=seed,
            ).fit(train[0], train[1])
            seconds = time.perf_counter() - start
            if projector.n_iter_ not in checkpoints:
                report(projector.n_iter_, projector)
            print(f"      {projector.n_iter_} steps in {seconds:.1f} s\n")
    print(f"PCA baseline (centred, L2-normalised): test mAP {100 * pca_map(train, test, n_components):.2f} %")


def pca_map(train, test, n_components):
    """Test mAP of the PCA baseline (centred, L2-normalised projections)."""
    pca = PCAProjection(n_components).fit(train[0])
    return holidays_map(pca.transform(test[0]), test[1], test[2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convergence", action="store_true")
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--features", type=int, default=81920)
    parser.add_argument("--images", type=int, default=745)
    parser.add_argument("--components", type=int, default=256)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sparsity", type=float, nargs="+", default=[0.0, 0.9, 0.99], help="the taus to time")
    args = parser.parse_args()
    if args.convergence:
        convergence(args.iterations, args.seed)
        return

    X, groups = grouped_signatures(args.images, args.features, 3, args.seed)
    test, _ = grouped_signatures(1491 - args.images, args.features, 3, args.seed + 1)
    print(machine_reference())
    dense_product = dense_product_seconds(X, args.components)
    print(
        f"D = {args.features}, N = {args.images}, R = {args.components}, "
        f"P = {args.queries}; mean of {args.steps} steps (seconds); one dense X U of this "
        f"shape (float32, 2 threads): {dense_product:.3f} s, 'x XU' = step / that"
    )
    projectors = {}
    # Both line searches from random U (where the targets are set), and the default one
    # from the PCA start of a training.
    for line_search, start in [(name, "random") for name in sr.LINE_SEARCHES] + [("projected", "pca")]:
        phases_of = {}
        for sparsity in args.sparsity:
            step, phases, components = time_steps(
                X,
                groups,
                sparsity,
                args.components,
                args.queries,
                args.steps,
                args.seed,
                line_search,
                start,
            )
            if start == "random":
                projectors[sparsity] = components
            phases_of[sparsity] = (step, phases)
        order = sorted({p for _, phases in phases_of.values() for p in phases})
        print(f"\nline_search = {line_search!r}, from {start} U")
        print(f"{'tau':>5} {'step':>7} {'x XU':>5} " + " ".join(f"{p:>14}" for p in order))
        for sparsity, (step, phases) in phases_of.items():
            print(
                f"{sparsity:5.2f} {step:7.3f} {step / dense_product:5.1f} "
                + " ".join(f"{phases.get(p, 0.0):14.3f}" for p in order)
            )
        print("(at tau = 0 the l0 projection is the identity: both use the dense search)")

    print(f"\nProjection cost (test batch of {test.shape[0]} signatures)")
    print(
        f"{'tau':>5} {'nnz':>9} {'MB dense':>9} {'MB CSC':>8} {'ratio':>6} "
        f"{'full eq.':>8} {'1 dense ms':>10} {'1 sparse ms':>11} {'ratio':>6} "
        f"{'batch dense s':>13} {'batch sparse s':>14} {'ratio':>6} "
        f"{'sparse kernel s':>15}"
    )
    for sparsity, components in projectors.items():
        c = cost.projection_cost(components)
        t = cost.projection_latency(components, test)
        print(
            f"{sparsity:5.2f} {c['nnz']:9d} {c['bytes_dense'] / 1e6:9.1f} "
            f"{c['bytes_sparse'] / 1e6:8.1f} {c['storage_ratio']:6.1f} "
            f"{c['equivalent_full_projectors']:8.2f} "
            f"{t['single_dense_s'] * 1e3:10.2f} {t['single_sparse_s'] * 1e3:11.2f} "
            f"{t['single_speedup']:6.1f} {t['batch_dense_s']:13.3f} "
            f"{t['batch_sparse_s']:14.3f} {t['batch_speedup']:6.2f} "
            f"{t['batch_sparse_kernel_s']:15.3f}"
        )
    print("(batch sparse includes transposing X to one signature per column; 'sparse kernel' is the product alone)")


if __name__ == "__main__":
    main()
