import faiss
import numpy as np
import pandas as pd
import pytest
from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection

from ndir import comparison, report
from ndir.baselines import (
    Baseline,
    ProductQuantizer,
    _reduce,
    baseline_grid,
    baseline_record,
    evaluate_baselines,
    mean_over_seeds,
    pq_settings,
)
from ndir.encoding import l2_normalise_rows
from ndir.projection import PCAProjection, SparseRankProjector, fit_pca

QUALITY = {"test_map": 0.5, "recall_at_1": 1.0, "recall_at_2": 1.0, "recall_at_4": 1.0, "recall_at_8": 1.0}


def _groups(rng, n_groups, per_group, n_features, noise=0.5):
    """Signatures of ``n_groups`` near-duplicate groups, the first of each a query."""
    centres = rng.normal(size=(n_groups, n_features))
    X = np.repeat(centres, per_group, axis=0) + noise * rng.normal(size=(n_groups * per_group, n_features))
    groups = np.repeat(np.arange(n_groups), per_group)
    is_query = np.zeros(len(groups), dtype=bool)
    is_query[::per_group] = True
    return l2_normalise_rows(X.astype(np.float32)), groups, is_query


@pytest.fixture(scope="module")
def splits():
    rng = np.random.default_rng(3)
    return {"train": _groups(rng, 100, 3, 400), "test": _groups(rng, 30, 3, 400)}


def test_random_sparse_density_and_cost_are_counted_from_its_matrix():
    D, R, tau, n_database = 4000, 32, 0.9, 123
    X = np.random.default_rng(0).normal(size=(5, D)).astype(np.float32)
    model = SparseRandomProjection(R, density=1 - tau, dense_output=True, random_state=0).fit(X)
    dense = model.components_.toarray()  # (R, D)
    nnz = int(np.count_nonzero(dense))
    # Li et al.'s density: about (1 - tau) D R non-zeros (binomial, s.d. 0.6 % here).
    assert nnz / (D * R) == pytest.approx(1 - tau, rel=0.03)
    baseline = Baseline(f"random sparse R={R} τ=0.9", "random sparse τ=0.9", R, tau, 0)
    record = baseline_record(baseline, model, "fv-x", D, n_database, QUALITY, 0.0)
    # CSC storage: a float32 value and an int32 row index per non-zero, R + 1 column pointers.
    assert record["model_bytes"] == 8 * nnz + 4 * (R + 1)
    assert record["madds_per_query"] == nnz + R * n_database
    assert record["db_bytes_per_image"] == 4 * R and record["query_dims"] == R
    assert (record["tau"], record["seed"], record["family"]) == (tau, 0, "random sparse τ=0.9")


def test_dense_baselines_count_their_matrix_and_only_pca_a_mean(splits):
    grid = [b for b in baseline_grid([8], [0.9], [0], [], 8, 2, 100) if b.family in ("whitened PCA", "Gaussian RP")]
    records = evaluate_baselines(splits, "fv-x", grid).set_index("family")
    D, n_test = 400, 90
    assert records.at["whitened PCA", "model_bytes"] == 4 * D * 8 + 4 * D
    assert records.at["Gaussian RP", "model_bytes"] == 4 * D * 8
    assert (records["madds_per_query"] == D * 8 + 8 * n_test).all()


@pytest.mark.parametrize("n_bytes, nbits, n_components", [(8, 8, 16), (16, 8, 16), (4, 4, 16), (3, 8, 12)])
def test_pq_code_takes_the_stated_bytes(splits, n_bytes, nbits, n_components):
    X_train, X_test = splits["train"][0], splits["test"][0]
    pq = ProductQuantizer(n_components, n_bytes, nbits=nbits).fit(X_train)
    codes = pq.transform(X_test)
    assert codes.dtype == np.uint8 and codes.shape == (len(X_test), n_bytes)
    assert pq.code_size_ == n_bytes and pq.n_subquantizers_ == 8 * n_bytes // nbits
    baseline = Baseline(f"PQ {n_bytes} B (PCA-{n_components})", "PQ", n_components, seed=0, code_bytes=n_bytes)
    record = baseline_record(baseline, pq, "fv-x", 400, len(X_test), QUALITY, 0.0)
    assert record["db_bytes_per_image"] == n_bytes
    # The model: PCA (axes and mean) and every centroid coordinate, float32.
    centroids = faiss.vector_to_array(pq.index_.pq.centroids)
    assert centroids.size == n_components * 2**nbits
    assert record["model_bytes"] == 4 * (pq.pca_.components_.size + pq.pca_.mean_.size + centroids.size)
    M = pq.n_subquantizers_
    assert record["madds_per_query"] == 400 * n_components + n_components * 2**nbits + M * len(X_test)


def test_pq_scores_are_asymmetric_distances(splits):
    """ADC: the query's PCA reduction, unquantised, against each image's decoded code."""
    X_train, X_test = splits["train"][0], splits["test"][0]
    pq = ProductQuantizer(16, 8).fit(X_train)
    decoded = pq.index_.sa_decode(pq.transform(X_test))
    Q = PCAProjection(16).fit(X_train).transform(X_test[:7])
    expected = Q.astype(np.float64) @ decoded.T.astype(np.float64)
    np.testing.assert_allclose(pq.score_pairs(X_test[:7], X_test), expected, atol=1e-5)
    # Not the symmetric distance: the decoded query differs from the query.
    assert not np.allclose(pq.index_.sa_decode(pq.transform(X_test[:7])), Q, atol=1e-3)


def test_pq_refuses_codes_that_do_not_split_the_reduction(splits):
    with pytest.raises(ValueError, match="must divide"):
        ProductQuantizer(10, 8).fit(splits["train"][0])
    # 3 bytes of 5-bit indices are 4.8 sub-quantisers: refused, though 4 divide 8 dimensions.
    with pytest.raises(ValueError, match="3 bytes of 5-bit indices on 8 dimensions: .* must divide"):
        ProductQuantizer(8, 3, nbits=5).fit(splits["train"][0])
    with pytest.raises(ValueError, match="must divide"):
        ProductQuantizer(8.0, 8).fit(splits["train"][0])
    with pytest.raises(ValueError, match="lower nbits"):
        ProductQuantizer(16, 8, nbits=8).fit(splits["train"][0][:100])


def test_pq_refuses_a_pca_it_cannot_quantise(splits):
    X_train = splits["train"][0]
    fitted = fit_pca(X_train, [8, 16])
    with pytest.raises(ValueError, match="pca is a PCA-8 .* expected PCA-16"):
        ProductQuantizer(16, 8).fit(X_train, pca=fitted[8])
    with pytest.raises(ValueError, match="whiten=True"):
        ProductQuantizer(16, 8).fit(X_train, pca=PCAProjection(16, whiten=True).fit(X_train))
    with pytest.raises(ValueError, match="of 400 features; expected .* of the 300 of X"):
        ProductQuantizer(16, 8).fit(X_train[:, :300], pca=fitted[16])


def _fitted_alone(baseline, X, groups, nbits):
    """``baseline`` fitted as if alone in its grid: its own PCA (what
    :func:`evaluate_baselines` computes once for the grid), and thresholded PCA as the
    start of a SparseRankProjector fitted with max_iter=0, the path ThresholdedPCA
    replaces (without the ranking problem that fit sets up)."""
    R = baseline.R
    if baseline.family == "whitened PCA":
        return PCAProjection(R, whiten=True).fit(X)
    if baseline.family.startswith("thresholded PCA"):
        start = PCAProjection(R).fit(X).components_
        return SparseRankProjector(R, sparsity=baseline.tau, max_iter=0, init=start).fit(X, groups)
    if baseline.family == "Gaussian RP":
        return GaussianRandomProjection(R, random_state=int(baseline.seed)).fit(X)
    if baseline.family.startswith("random sparse"):
        return SparseRandomProjection(
            R, density=1 - baseline.tau, dense_output=True, random_state=int(baseline.seed)
        ).fit(X)
    return ProductQuantizer(R, int(baseline.code_bytes), nbits=nbits, random_state=int(baseline.seed)).fit(X)


def test_shared_fits_give_the_records_of_models_fitted_alone(splits):
    """evaluate_baselines shares one PCA of several R between whitened PCA, thresholded
    PCA and PQ, and the random projections' test X^T, and thresholds PCA without a
    ranking problem (ThresholdedPCA): every record (but its time) the same, bit for
    bit, as each model fitted and applied alone, scikit-learn's transform and
    SparseRankProjector(max_iter=0) included."""
    grid = baseline_grid([8, 16], [0.9, 0.0], [0, 1], [4], 4, 2, 100)
    assert len({b.R for b in grid if b.family == "PQ"}) == 2
    shared = evaluate_baselines(splits, "fv-x", grid, nbits=4).drop(columns="train_s")
    (X_train, groups_train, _), (X_test, groups, is_query) = splits["train"], splits["test"]
    alone = []
    for baseline in grid:
        model = _fitted_alone(baseline, X_train, groups_train, 4)
        if isinstance(model, ProductQuantizer):
            quality = comparison.record_quality(model.score_pairs(X_test, X_test), groups, is_query, "precomputed")
        else:
            Y = l2_normalise_rows(np.asarray(model.transform(X_test), dtype=np.float32))
            quality = comparison.record_quality(Y, groups, is_query)
        alone.append(baseline_record(baseline, model, "fv-x", X_test.shape[1], len(X_test), quality, 0.0))
    pd.testing.assert_frame_equal(shared, pd.DataFrame(alone).drop(columns="train_s"), check_exact=True)


@pytest.mark.parametrize("tau", [0.9, 0.0])
def test_reductions_through_the_shared_transpose_are_scikit_learns(splits, tau):
    """_reduce: a sparse random projection's (C X^T)^T from the shared X^T is its
    transform, bit for bit; at tau = 0 (density 1, C dense) the transform itself."""
    X_train, X_test = splits["train"][0], splits["test"][0]
    XT = np.ascontiguousarray(X_test.T)
    for model in (
        SparseRandomProjection(16, density=1 - tau, dense_output=True, random_state=0).fit(X_train),
        GaussianRandomProjection(16, random_state=0).fit(X_train),
    ):
        Y = _reduce(model, X_test, XT)
        assert Y.dtype == np.float32
        np.testing.assert_array_equal(Y, model.transform(X_test))


def test_pq_settings_fit_the_pca_the_training_split_allows():
    # 324 training dimensions: 8 B -> M = 8 on PCA-16; 256 B -> M = 256, one dimension
    # each; 512 B -> 512 sub-quantisers for at most 324 dimensions: left out.
    assert pq_settings([16, 8, 256, 512, 128], 8, 2, 324) == [
        (8, 16, 8),
        (16, 32, 16),
        (128, 256, 128),
        (256, 256, 256),
    ]
    assert pq_settings([4, 3], 4, 2, 100) == [(3, 12, 6), (4, 16, 8)]
    assert pq_settings([3], 16, 2, 100) == []  # 24 bits: no whole 16-bit index


def test_baseline_grid_adds_the_bytes_of_r_floats():
    grid = baseline_grid([8, 16], [0.9, 0.99], [0, 1, 2], [2], 8, 2, 40)
    methods = [b.method for b in grid]
    assert methods.count("random sparse R=8 τ=0.99") == 3 and methods.count("Gaussian RP R=16") == 3
    assert "thresholded PCA R=16 τ=0.9" in methods and "whitened PCA R=8" in methods
    # 2 B, and 4 x 8 = 32 B; 64 B would need 64 sub-quantisers on at most 40 dimensions.
    assert [m for m in methods if m.startswith("PQ")] == ["PQ 2 B (PCA-4)", "PQ 32 B (PCA-32)"]


def test_every_baseline_learns_on_separable_groups(splits):
    grid = baseline_grid([16], [0.9], [0, 1], [4], 4, 2, 100)
    records = evaluate_baselines(splits, "fv-x", grid, nbits=4)
    assert set(records["family"]) == {
        "whitened PCA",
        "thresholded PCA τ=0.9",
        "Gaussian RP",
        "random sparse τ=0.9",
        "PQ",
    }
    # Groups far apart: every reduction finds most near duplicates; a constant score would give ~ 2 / 89.
    assert (records["test_map"] > 0.6).all() and (records["recall_at_1"] > 0.6).all()
    for record in records.to_dict("records"):
        comparison.check_record(record)
    # The random sparse matrices have density 1 - tau: (1 - 0.9) x 400 x 16 = 640
    # non-zeros, each a multiply-add of the query's projection (s.d. 24).
    random = records[records["family"] == "random sparse τ=0.9"]
    nnz = random["madds_per_query"] - 16 * 90
    assert (nnz / (400 * 16)).to_numpy() == pytest.approx([0.1, 0.1], rel=0.15)


def test_mean_over_seeds_averages_the_random_projections_only():
    records = pd.DataFrame(
        {
            "signature": ["fv-8"] * 4,
            "method": ["random sparse R=8 τ=0.9"] * 3 + ["whitened PCA R=8"],
            "family": ["random sparse τ=0.9"] * 3 + ["whitened PCA"],
            "seed": [0, 1, 2, np.nan],
            "test_map": [0.5, 0.6, 0.8, 0.7],
            "model_bytes": [100, 110, 120, 4000],
        }
    )
    out = mean_over_seeds(records).set_index("method")
    random = out.loc["random sparse R=8 τ=0.9"]
    assert random["test_map"] == pytest.approx(np.mean([0.5, 0.6, 0.8]))
    assert random["test_map_std"] == pytest.approx(np.std([0.5, 0.6, 0.8], ddof=1))
    assert random["model_bytes"] == 110 and random["n_seeds"] == 3
    assert out.loc["whitened PCA R=8", "test_map_std"] == 0 and "seed" not in out


def test_pareto_front_of_a_hand_checked_list():
    # (cost, mAP): A (1, .5) front; H (1, .3) beaten by A (same cost, lower mAP); B (2, .4)
    # beaten by A; C (2, .7) front; D (3, .7) beaten by C (same mAP, dearer); E (4, .9)
    # front; F (4, .9) its twin, front too (neither beats the other); G (5, .85) beaten by E.
    costs = [1, 1, 2, 2, 3, 4, 4, 5]
    maps = [0.5, 0.3, 0.4, 0.7, 0.7, 0.9, 0.9, 0.85]
    assert comparison.pareto_front(costs, maps).tolist() == [True, False, False, True, False, True, True, False]


def test_frontier_summary_names_the_methods_along_the_front():
    records = pd.DataFrame(
        {
            "method": [
                "PQ 8 B (PCA-16)",
                "PQ 16 B (PCA-32)",
                "sparse rank R=32 τ=0.99",
                "thresholded PCA R=32 τ=0.99",
                "PCA R=32",
                "tf-idf",
            ],
            "signature": ["fv-64", "fv-64", "fv-64", "fv-64", "fv-64", "tfidf"],
            "cost": [10.0, 20.0, 300.0, 300.0, 5000.0, 1e6],
            "test_map": [0.5, 0.6, 0.8, 0.8, 0.7, 0.9],
        }
    )
    records["front"] = comparison.pareto_front(records["cost"], records["test_map"])
    assert records["front"].tolist() == [True, True, True, True, False, True]
    assert report.frontier_summary(records, "cost", "madds") == (
        "PQ (FV-64) from 10 to 20 madds (mAP 50.0 to 60.0 %); then sparse rank τ=0.99 (FV-64) = thresholded PCA "
        "τ=0.99 (FV-64) at 300 madds (mAP 80.0 %); then tf-idf (tf-idf) at 1e+06 madds (mAP 90.0 %)"
    )


def test_method_family_of_the_baselines():
    assert report.method_family("random sparse R=64 τ=0.99") == "random sparse τ=0.99"
    assert report.method_family("thresholded PCA R=64 τ=0.9") == "thresholded PCA τ=0.9"
    assert report.method_family("whitened PCA R=64") == "whitened PCA"
    assert report.method_family("Gaussian RP R=64") == "Gaussian RP"
    assert report.method_family("PQ 16 B (PCA-32)") == "PQ"
    assert report.method_family("factorised R=64 (K=1)") == "factorised (K=1)"


def test_ablation_puts_random_sparse_beside_the_learned_projector():
    run = {"signature": "fv-8", "encoding": "fv", "K": 8, "R": 16, "tau": 0.99, "initial": 0.5, "final": 0.8}
    maps = pd.DataFrame([run])
    baselines = pd.DataFrame(
        {
            "signature": ["fv-8"] * 4 + ["vlad-8"],
            "family": ["random sparse τ=0.99", "random sparse τ=0.9", "whitened PCA", "Gaussian RP", "whitened PCA"],
            "R": [16, 16, 16, 16, 16],
            "test_map": [0.6, 0.65, 0.75, 0.7, 0.1],
            "test_map_std": [0.02, 0.01, 0.0, 0.03, 0.0],
        }
    )
    row = report.table2_ablation(maps, maps, maps, baselines=baselines).iloc[0]
    assert row["Random sparse"] == 60.0 and row["Random sparse s.d."] == 2.0
    assert row["Learned − random sparse"] == 20.0
    assert row["Whitened PCA"] == 75.0 and row["Gaussian RP"] == 70.0
    assert row["Thresholded PCA"] == 50.0 and row["Learned"] == 80.0
