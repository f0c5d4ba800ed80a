"""Reductions a user would pick instead of a learned sparse projector, at the same cost.

Table II asks whether learning a sparse projector pays. The answers a practitioner
would reach for instead, each fitted on the training split only and scored like
Table I (reductions L2-normalised, compared by dot product):

* a *random* sparse projector of the same sparsity: scikit-learn's
  ``SparseRandomProjection`` at ``density = 1 - tau`` (Li, Hastie & Church's very
  sparse random projections), the same number of multiply-adds as the learned one;
* a dense ``GaussianRandomProjection``;
* whitened PCA (Jégou & Chum, ECCV 2012), :class:`ndir.projection.PCAProjection`;
* PCA hard-thresholded to tau, the learned projector's start (:class:`ThresholdedPCA`:
  the projectors of :class:`ndir.projection.SparseRankProjector` with ``max_iter=0``);
* a product-quantised code of a PCA reduction (:class:`ProductQuantizer`, faiss's
  ``IndexPQ``; Jégou et al., TPAMI 2011) at a stated number of bytes per image,
  scored by asymmetric distances (ADC).

:func:`baseline_grid` lists them for a signature, :func:`evaluate_baselines` scores
them into records of :mod:`ndir.comparison` (model size, bytes per database image,
multiply-adds per query), one per random seed for the random projections
(:func:`mean_over_seeds` averages them).
"""

import copy
import logging
import time
from dataclasses import dataclass
from numbers import Integral

import faiss
import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection
from sklearn.utils.validation import check_is_fitted

from ndir import comparison
from ndir.encoding import l2_normalise_rows
from ndir.projection import PCAProjection, SparseRankProjector, fit_pca, projection_cost
from ndir.projection.sparse_rank import project_components, thresholded_components

logger = logging.getLogger(__name__)

#: Columns a baseline record carries beside :data:`ndir.comparison.RECORD_KEYS`.
GRID_KEYS = ("family", "R", "tau", "seed", "code_bytes")


class ThresholdedPCA(TransformerMixin, BaseEstimator):
    """Projectors with the M = round((1 - tau) D) largest magnitudes of each column of
    ``components`` (e.g. PCA-R's axes) kept, then unit columns: what Algorithm 1 starts
    from, the "thresholded PCA, no learning" baseline.

    Its ``components_`` are those of ``SparseRankProjector(R, sparsity,
    max_iter=0, init=components)`` fitted (:func:`~ndir.projection.sparse_rank.thresholded_components`),
    and it projects as that model does, without the N x N ranking problem such a fit
    sets up and never uses (about 0.3 s a model at N = 389, D = 40,960).

    Parameters
    ----------
    components : (D, R) array, the axes to threshold.
    sparsity : float in [0, 1), tau.

    Attributes
    ----------
    components_ : (D, R) float32 CSC, M stored entries per column.
    """

    def __init__(self, components, sparsity):
        self.components = components
        self.sparsity = sparsity

    def fit(self, X=None, y=None):
        """Threshold ``components``; X and y are not read (scikit-learn's signature)."""
        self.components_ = thresholded_components(self.components, self.sparsity, renormalize=True)
        return self

    def transform(self, X):
        """``X U`` (n, R) float32 of signatures X (n, D) float32."""
        check_is_fitted(self)
        return project_components(self.components_, np.asarray(X, dtype=np.float32))


class ProductQuantizer(BaseEstimator):
    """PCA to ``n_components`` dimensions, L2-normalised, then a product quantiser.

    Parameters
    ----------
    n_components : int
        Dimensions of the PCA reduction the code quantises (at most the training
        split's rank); a multiple of the number of sub-quantisers.
    n_bytes : int
        Bytes of one database image's code: ``8 n_bytes / nbits`` sub-quantisers of
        ``nbits`` bits each (faiss packs them).
    nbits : int, default 8
        Bits per sub-quantiser index: ``2 ** nbits`` centroids each, so at least as
        many training images.
    random_state : int, default 0
        Seed of faiss's k-means.

    Attributes
    ----------
    pca_ : PCAProjection
    index_ : faiss.IndexPQ
        Trained, empty; inner-product metric on the unit-norm reductions.
    n_subquantizers_ : int
        M.
    code_size_ : int
        Bytes per code, ``ceil(M nbits / 8)`` (faiss's ``pq.code_size``).
    """

    def __init__(self, n_components, n_bytes, nbits=8, random_state=0):
        self.n_components = n_components
        self.n_bytes = n_bytes
        self.nbits = nbits
        self.random_state = random_state

    def fit(self, X, y=None, pca=None):
        """Fit the PCA and the sub-quantisers' k-means on ``X`` (n, D) float32.

        ``pca``: None, or the PCA to quantise, a :class:`~ndir.projection.PCAProjection`
        of ``n_components`` axes, not whitened, already fitted on ``X`` (one of
        :func:`~ndir.projection.fit_pca`'s, which several models share: the same axes as
        a fit of its own).
        """
        n_subquantizers, remainder = divmod(8 * self.n_bytes, self.nbits)
        if remainder or not isinstance(self.n_components, Integral) or self.n_components % n_subquantizers:
            raise ValueError(
                f"{self.n_bytes} bytes of {self.nbits}-bit indices on {self.n_components} dimensions: "
                "8 n_bytes / nbits sub-quantisers must divide n_components"
            )
        if len(X) < 2**self.nbits:
            raise ValueError(f"{len(X)} training images for 2^{self.nbits} centroids per sub-quantiser; lower nbits")
        if pca is None:
            pca = PCAProjection(self.n_components).fit(X)
        elif (pca.n_components, pca.whiten, pca.n_features_in_) != (self.n_components, False, X.shape[1]):
            raise ValueError(
                f"pca is a PCA-{pca.n_components} (whiten={pca.whiten}) of {pca.n_features_in_} features; "
                f"expected PCA-{self.n_components}, not whitened, of the {X.shape[1]} of X"
            )
        self.pca_ = pca
        index = faiss.IndexPQ(self.n_components, n_subquantizers, self.nbits, faiss.METRIC_INNER_PRODUCT)
        index.pq.cp.seed = int(self.random_state)
        # A few hundred training images for 256 centroids is the point of the baseline
        # (PQ trained on the training split only): no faiss warning per sub-quantiser.
        index.pq.cp.min_points_per_centroid = 1
        index.train(np.ascontiguousarray(self.pca_.transform(X)))
        self.index_ = index
        self.n_subquantizers_ = n_subquantizers
        self.code_size_ = int(index.pq.code_size)
        return self

    def transform(self, X):
        """The codes of ``X`` (n, D): (n, code_size_) uint8."""
        check_is_fitted(self)
        return self.index_.sa_encode(np.ascontiguousarray(self.pca_.transform(X)))

    def score_pairs(self, Q, X):
        """ADC scores (n_q, n) float32: each query's PCA reduction (not quantised)
        against every database image's code, ``q . x_hat`` summed over sub-quantisers
        from per-query tables (faiss ``IndexPQ.search``, every image returned)."""
        check_is_fitted(self)
        index = faiss.clone_index(self.index_)
        index.add(np.ascontiguousarray(self.pca_.transform(X)))
        scores, labels = index.search(np.ascontiguousarray(self.pca_.transform(Q)), len(X))
        out = np.empty_like(scores)
        np.put_along_axis(out, labels, scores, axis=1)
        return out


@dataclass(frozen=True)
class Baseline:
    """One reduction of :func:`baseline_grid`: its name, family and settings
    (``tau``, ``seed`` and ``code_bytes`` NaN where they do not apply)."""

    method: str
    family: str
    R: int
    tau: float = float("nan")
    seed: float = float("nan")
    code_bytes: float = float("nan")


def pq_settings(code_bytes, nbits, subvector_dims, max_components):
    """``(n_bytes, n_components, n_subquantizers)`` of the PQ code of each size.

    A code of ``b`` bytes has ``M = 8 b / nbits`` sub-quantisers; it quantises PCA to
    ``M d`` dimensions, ``d`` the largest of ``subvector_dims, ..., 1`` that keeps
    ``M d <= max_components`` (the training split's rank). Sizes with no such ``d``
    (more sub-quantisers than the PCA has dimensions) or ``8 b`` not a multiple of
    ``nbits`` are left out.
    """
    settings = []
    for n_bytes in sorted(set(code_bytes)):
        n_subquantizers, remainder = divmod(8 * n_bytes, nbits)
        fits = [d for d in range(subvector_dims, 0, -1) if n_subquantizers * d <= max_components]
        if remainder or not fits:
            logger.info("PQ of %d bytes left out: %d sub-quantisers for a PCA of at most %d dimensions",
                        n_bytes, n_subquantizers, max_components)  # fmt: skip
            continue
        settings.append((n_bytes, n_subquantizers * fits[0], n_subquantizers))
    return settings


def baseline_grid(dims, sparsities, seeds, pq_bytes, nbits, subvector_dims, max_components, pq_seed=0):
    """The reductions scored beside the learned projectors of Table II.

    Parameters
    ----------
    dims, sparsities : sequences
        Table II's R and tau (``sparse.dims``, ``sparse.sparsity``).
    seeds : sequence of int
        Seeds of the random projections (one record each).
    pq_bytes : sequence of int, or None
        Code sizes of the PQ baselines; ``4 R`` (the bytes of a projector's R float32)
        is added for each R, where :func:`pq_settings` finds a PCA for it. None: no PQ.
    nbits, subvector_dims, max_components
        As for :func:`pq_settings`.
    pq_seed : int
        Seed of the PQ codebooks' k-means.

    Returns
    -------
    list of Baseline
    """
    grid = []
    for R in dims:
        grid.append(Baseline(f"whitened PCA R={R}", "whitened PCA", R))
        for tau in sparsities:
            grid.append(Baseline(f"thresholded PCA R={R} τ={tau:g}", f"thresholded PCA τ={tau:g}", R, tau))
        for seed in seeds:
            grid.append(Baseline(f"Gaussian RP R={R}", "Gaussian RP", R, seed=seed))
            for tau in sparsities:
                grid.append(Baseline(f"random sparse R={R} τ={tau:g}", f"random sparse τ={tau:g}", R, tau, seed))
    if pq_bytes is None:
        return grid
    for n_bytes, n_components, _ in pq_settings(
        [*pq_bytes, *(4 * R for R in dims)], nbits, subvector_dims, max_components
    ):
        grid.append(
            Baseline(f"PQ {n_bytes} B (PCA-{n_components})", "PQ", n_components, seed=pq_seed, code_bytes=n_bytes)
        )
    return grid


def _uses_pca(baseline):
    """Whether ``baseline`` is built on PCA-R: whitened PCA, thresholded PCA (its start), PQ (its reduction)."""
    return baseline.family in ("whitened PCA", "PQ") or baseline.family.startswith("thresholded PCA")


def _fit(baseline, X, nbits, pca):
    """``baseline`` fitted on the training signatures ``X`` (n, D) float32.

    What several models of a grid need comes computed once: ``pca``, PCA-R fitted on X
    by R (:func:`~ndir.projection.fit_pca`: one eigendecomposition for every R).
    """
    R = baseline.R
    if baseline.family == "whitened PCA":
        # PCAProjection.fit does not read whiten, only transform does: whitened PCA-R is
        # PCA-R's fitted axes and variances, whitened at transform.
        return copy.copy(pca[R]).set_params(whiten=True)
    if baseline.family.startswith("thresholded PCA"):
        return ThresholdedPCA(pca[R].components_, baseline.tau).fit()
    if baseline.family == "Gaussian RP":
        return GaussianRandomProjection(R, random_state=int(baseline.seed)).fit(X)
    if baseline.family.startswith("random sparse"):
        model = SparseRandomProjection(
            R, density=1.0 - baseline.tau, dense_output=True, random_state=int(baseline.seed)
        )
        return model.fit(X)
    model = ProductQuantizer(R, int(baseline.code_bytes), nbits=nbits, random_state=int(baseline.seed))
    return model.fit(X, pca=pca[R])


def _reduce(model, X, XT):
    """``model.transform(X)`` (n, R) as float32, for X (n, D) float32 whose transpose
    (D, n) C-contiguous is ``XT``. A sparse random projection's C (R, D) gives
    ``(C XT)^T``: the product scikit-learn's transform computes, by the same scipy
    kernel on the same values (the same bits), after copying X^T for each of the grid's
    random projections."""
    if isinstance(model, SparseRandomProjection) and sp.issparse(model.components_):
        return np.asarray((model.components_ @ XT).T, dtype=np.float32)
    return np.asarray(model.transform(X), dtype=np.float32)


def baseline_record(baseline, model, signature, n_features, n_database, quality, train_s):
    """The :mod:`ndir.comparison` record of a fitted baseline, its costs counted from
    the fitted model: the random sparse matrix's and thresholded PCA's non-zeros as
    stored CSC (:func:`ndir.projection.projection_cost`), dense D x R matrices (with
    PCA's mean; random projections have none), PQ's PCA, codebooks and codes;
    ``quality`` its :func:`ndir.comparison.record_quality`."""
    common = {
        "method": baseline.method,
        "signature": signature,
        "quality": quality,
        "train_s": train_s,
    }
    if isinstance(model, ProductQuantizer):
        record = comparison.product_quantizer_record(
            n_features=n_features,
            n_components=baseline.R,
            n_subquantizers=model.n_subquantizers_,
            nbits=model.nbits,
            n_database=n_database,
            **common,
        )
    elif isinstance(model, SparseRandomProjection):
        cost = projection_cost(model.components_.T)
        record = comparison.sparse_projection_record(cost=cost, n_database=n_database, **common)
    elif isinstance(model, (ThresholdedPCA, SparseRankProjector)):
        cost = projection_cost(model.components_)
        record = comparison.sparse_projection_record(cost=cost, n_database=n_database, **common)
    else:
        record = comparison.dense_projection_record(
            n_features=n_features,
            n_components=baseline.R,
            n_database=n_database,
            centred=isinstance(model, PCAProjection),
            **common,
        )
    return {**record, **{key: getattr(baseline, key) for key in GRID_KEYS}}


def evaluate_baselines(splits, signature, grid, nbits=8, ns_score=False):
    """Fit every baseline of ``grid`` on the training split, score it on the test split.

    Parameters
    ----------
    splits : dict
        ``{"train": (X, groups, is_query), "test": (X, groups, is_query)}`` as
        :func:`ndir.stages.common.split_signatures` gives ((n, D) float32 signatures).
    signature : str
        The signatures' name, e.g. ``"fv-64"``.
    grid : list of Baseline
        :func:`baseline_grid`.
    nbits : int
        Bits per PQ sub-quantiser index.
    ns_score : bool
        Also score UKBench's N-S (``test_ns``, out of 4), as on UKBench.

    Returns
    -------
    pandas.DataFrame
        One :mod:`ndir.comparison` record per baseline (and seed), with the columns of
        :data:`GRID_KEYS`; the test mAP of the L2-normalised reductions (PQ: of the
        ADC scores of the L2-normalised PCA reduction) and Recall@k, every test image
        a query (:func:`ndir.comparison.record_quality`). ``train_s`` is the fit's wall
        time, that of the PCA shared by the models built on it (:func:`_fit`) counted
        in each of them.
    """
    X_train = splits["train"][0]
    X_test, groups, is_query = splits["test"]
    start = time.perf_counter()
    pca = fit_pca(X_train, {b.R for b in grid if _uses_pca(b)})
    pca_s = time.perf_counter() - start
    XT_test = np.ascontiguousarray(X_test.T)
    rows = []
    for baseline in grid:
        start = time.perf_counter()
        model = _fit(baseline, X_train, nbits, pca)
        train_s = time.perf_counter() - start + (pca_s if _uses_pca(baseline) else 0.0)
        if isinstance(model, ProductQuantizer):
            quality = comparison.record_quality(
                model.score_pairs(X_test, X_test), groups, is_query, "precomputed", ns_score
            )
        else:
            Y = l2_normalise_rows(_reduce(model, X_test, XT_test))
            quality = comparison.record_quality(Y, groups, is_query, ns=ns_score)
        rows.append(baseline_record(baseline, model, signature, X_test.shape[1], len(X_test), quality, train_s))
        logger.info("%s on %s: test mAP %.4f (%.2f s)", baseline.method, signature, quality["test_map"], train_s)
    return pd.DataFrame(rows)


def mean_over_seeds(records):
    """One row per (signature, method): the numeric columns averaged over the random
    projections' seeds, with ``test_map_std`` (sample s.d., 0 for a single record)
    and ``n_seeds``; other baselines pass through with ``test_map_std`` 0."""
    keys = ["signature", "method", "family"]
    numeric = [c for c in records.columns if c not in (*keys, "seed") and pd.api.types.is_numeric_dtype(records[c])]
    grouped = records.groupby(keys, sort=False, dropna=False)
    out = grouped[numeric].mean()
    out["test_map_std"] = grouped["test_map"].std(ddof=1).fillna(0.0)
    out["n_seeds"] = grouped["test_map"].size()
    return out.reset_index()
