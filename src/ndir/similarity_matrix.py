"""Sparse similarity-matrix learning over visual words (Yan & Yu, IJCNN 2013).

Images are L1-normalised term-frequency vectors ``I`` over a visual vocabulary. tf-idf
retrieval ranks by the normalised similarity of Eq. 3,

    S_ij = I_i^T M I_j,        Ŝ_ij = S_ij^2 / (S_ii S_jj),

with ``M = diag(idf^2)``. The seed generalises ``M`` to a sparse symmetric non-negative
matrix ``M^s`` whose non-zeros are restricted to the mask ``B^s``: the diagonal plus
each word's k nearest words, symmetrised (§III-B, :func:`word_neighbour_mask`), and
learns it from triplets ``(i, j, l)`` (``j`` a near duplicate of ``i``, ``l`` not) by
minimising Eq. 4,

    sum_t w_t [Ŝ_il - Ŝ_ij + gamma]_+,   M^s >= 0 on B^s, 0 elsewhere (Eq. 5),

from the tf-idf initialisation. Triplets (§IV-B): *hard* ones where tf-idf fails (for
each training query, every other-group image ranked above a near duplicate), plus
random ones; each weighted by ``max_t N(t) / N(i)``, ``N(i)`` the queries issued for
``i``'s group. Optimisation: projected gradient descent with an Armijo backtracking
step on the parameters ``theta`` (the upper triangle of ``M^s`` on the mask), each
iteration evaluating only the *active* triplets (positive hinge) and every
``full_eval_every`` iterations all of them (§IV-C); the matrix with the best mAP on
held-out training groups is kept (§IV-D; given the images' source photographs, no
held-out group shares one with a training group).

Cost: the similarities of the images the evaluated triplets use (all training
images at a full evaluation, often few in the line search's active subset) come from
one GEMM ``X (M X^T)`` (N^2 m flops, cheaper here than per-pair sparse products), X
kept transposed (m x N, C-contiguous) so that nothing is copied per product; the
gradient of the active triplets is ``X^T C X`` restricted to the mask, ``C`` the sparse
N x N matrix of the loss's derivatives with respect to ``S``: ``Z^T = X^T (C + C^T)^T``
(one GEMM) then one sum over images per mask entry. Nothing of size m x m is formed
densely.
"""

from numbers import Integral, Real

import faiss
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.preprocessing import normalize
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted, column_or_1d

from ndir.bovw import inverse_document_frequency
from ndir.data import holdout_mask
from ndir.evaluation import map_from_scores
from ndir.triplets import draw_negatives, positive_pairs

EPS = 1e-12
"""Floor of self-similarities S_ii (an image without words has S_ii = 0)."""

ARMIJO = 1e-4
"""Sufficient-decrease constant of the backtracking line search."""

MASK_CHUNK = 8192
"""Mask entries per block when summing the gradient over images."""


def word_neighbour_mask(vocabulary, n_neighbours):
    """The symmetric mask B^s: diagonal plus each word's ``n_neighbours`` nearest words.

    Parameters
    ----------
    vocabulary : (n_words, d) float array, the words (k-means centroids).
    n_neighbours : int >= 0, k of the k-NN (the seed uses 2).

    Returns
    -------
    (n_words, n_words) bool CSR, symmetric, with a true diagonal.
    """
    vocabulary = np.ascontiguousarray(vocabulary, dtype=np.float32)
    n = len(vocabulary)
    rows, cols = [np.arange(n)], [np.arange(n)]
    k = min(n_neighbours, n - 1)
    if k > 0:
        index = faiss.IndexFlatL2(vocabulary.shape[1])
        index.add(vocabulary)
        _, nearest = index.search(vocabulary, k + 1)
        # Drop each word itself (not always first when words coincide), else the (k+1)-th.
        keep = nearest != np.arange(n)[:, None]
        keep[keep.all(axis=1), k] = False
        rows.append(np.repeat(np.arange(n), k))
        cols.append(nearest[keep])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    mask = sp.csr_matrix((np.ones(rows.size, dtype=bool), (rows, cols)), shape=(n, n))
    return (mask + mask.T).astype(bool).tocsr()


def term_frequencies(counts):
    """L1-normalised word counts, float64 (CSR stays CSR)."""
    return normalize(check_array(counts, accept_sparse="csr", dtype=np.float64), norm="l1")


def hard_triplets(scores, groups, max_per_query):
    """Triplets where a ranking fails (§IV-B): ``(i, j, l)``, ``l`` of another group ranked above ``j``.

    Parameters
    ----------
    scores : (n, n) similarities of every training image to every other.
    groups : (n,) group labels.
    max_per_query : int, at most this many triplets per query (the first found,
        walking the ranked list from the top).

    Returns
    -------
    (n_triplets, 3) int64 array.
    """
    found = []
    for i in range(len(groups)):
        order = np.argsort(-scores[i], kind="stable")
        order = order[order != i]
        positive = groups[order] == groups[i]
        kept = 0
        for position in np.flatnonzero(~positive):
            below = order[position + 1 :][positive[position + 1 :]]
            take = below[: max_per_query - kept]
            found.extend((i, j, order[position]) for j in take)
            kept += take.size
            if kept >= max_per_query or not positive[position + 1 :].any():
                break
    return np.asarray(found, dtype=np.int64).reshape(-1, 3)


def triplet_weights(triplets, groups):
    """Weights ``max_t N(t) / N(i)`` of §IV-B, ``N(i)`` the queries issued for ``i``'s group.

    Every image of a group is issued as a query, so ``N(i)`` is the size of its group.
    """
    labels, sizes = np.unique(groups, return_counts=True)
    size = dict(zip(labels, sizes))
    issued = np.array([size[g] for g in groups[triplets[:, 0]]], dtype=np.float64)
    return sizes.max() / issued if len(triplets) else issued


class SparseSimilarityMatrix(BaseEstimator):
    """Learned sparse similarity matrix M^s over visual words (Yan & Yu 2013).

    Parameters
    ----------
    n_neighbours : int, words k-NN activated off the diagonal (seed: 2).
    margin : float, gamma of Eq. 4, on the normalised similarities (0 to 1 for a
        positive semi-definite M; M^s is only kept non-negative, so they can exceed 1).
    max_iter : int, projected-gradient iterations.
    max_hard_per_query : int, hard triplets kept per training query.
    n_random_triplets : int, random triplets added against overfitting.
    holdout_fraction : float in [0, 1), share of training groups held out to select
        the iteration (§IV-D); 0 (or fewer than two groups held out or left) keeps
        the last iterate.
    full_eval_every : int, iterations between two evaluations of every triplet (§IV-C).
    random_state : int, RandomState or None (hold-out groups, random triplets).

    Attributes
    ----------
    metric_ : (n_words, n_words) float32 CSR, M^s (symmetric, >= 0, zero off the mask).
    mask_ : (n_words, n_words) bool CSR, B^s.
    idf_ : (n_words,) float64, the idf of the training counts (M's initial diagonal is idf^2).
    n_hard_triplets_, n_random_triplets_ : triplets used.
    history_ : list of dict (iteration, objective, n_active, holdout_map).
    best_iteration_, holdout_map_ : the iteration kept and its hold-out mAP (NaN without hold-out).
    holdout_groups_ : (n_held_groups,) the labels of the held-out groups, sorted.
    """

    _parameter_constraints = {
        "n_neighbours": [Interval(Integral, 0, None, closed="left")],
        "margin": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "max_hard_per_query": [Interval(Integral, 0, None, closed="left")],
        "n_random_triplets": [Interval(Integral, 0, None, closed="left")],
        "holdout_fraction": [Interval(Real, 0, 1, closed="left")],
        "full_eval_every": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_neighbours=2,
        margin=0.1,
        max_iter=100,
        max_hard_per_query=200,
        n_random_triplets=2000,
        holdout_fraction=0.2,
        full_eval_every=10,
        random_state=None,
    ):
        self.n_neighbours = n_neighbours
        self.margin = margin
        self.max_iter = max_iter
        self.max_hard_per_query = max_hard_per_query
        self.n_random_triplets = n_random_triplets
        self.holdout_fraction = holdout_fraction
        self.full_eval_every = full_eval_every
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters

    def _set_structure(self, mask):
        """Parameters theta = upper triangle of the mask; a CSR M filled from theta."""
        upper = sp.triu(mask, format="coo")
        rows, cols = upper.row.astype(np.int64), upper.col.astype(np.int64)
        off = rows != cols
        full_rows = np.concatenate([rows, cols[off]])
        full_cols = np.concatenate([cols, rows[off]])
        parameter = np.concatenate([np.arange(rows.size), np.flatnonzero(off)])
        template = sp.csr_matrix((np.arange(full_rows.size) + 1.0, (full_rows, full_cols)), shape=mask.shape)
        self._rows, self._cols, self._diagonal = rows, cols, ~off
        self._template = template
        self._slot_parameter = parameter[template.data.astype(np.int64) - 1]

    def _matrix(self, theta, dtype=np.float64):
        M = self._template.copy()
        M.data = theta[self._slot_parameter].astype(dtype, copy=False)
        return M

    # ------------------------------------------------------------------ objective

    @staticmethod
    def _similarities(theta_matrix, XT):
        """S = X M X^T for every pair of images, in XT's precision.

        ``XT`` is the (m, n) transpose of the dense rows X, C-contiguous: the sparse
        product ``M XT`` then reads it in place (``M @ X.T`` copied X.T first) and
        the GEMM takes its transpose as a flag.
        """
        return XT.T @ (theta_matrix.astype(XT.dtype, copy=False) @ XT)

    def _prepare(self, XT, triplets, weights, XT64=None):
        """The triplets' evaluation, fixed across the calls that change only theta.

        Only the images the triplets use enter S (the line search's active subset
        often uses few), their columns of ``XT`` gathered once per subset; ``XT64``,
        the float64 copy of ``XT`` for the gradient, is used when they are all images
        (None: converted here).
        """
        images, local = np.unique(np.asarray(triplets, dtype=np.int64), return_inverse=True)
        local = local.reshape(-1, 3)
        if images.size == XT.shape[1]:
            XT_used = XT
            XT64_used = XT.astype(np.float64) if XT64 is None else XT64
        else:
            # take: C-contiguous (XT[:, images] is not) and faster; float64 from the
            # gathered float32 columns (the same values as XT64's).
            XT_used = np.take(XT, images, axis=1)
            XT64_used = XT_used.astype(np.float64)
        return _Evaluation(self, XT_used, XT64_used, local, np.asarray(weights, dtype=np.float64))

    def _objective(self, theta, X, triplets, weights, gradient=True):
        """Eq. 4 over ``triplets`` and, optionally, its gradient with respect to theta.

        X : (n, m) dense rows (the fit evaluates through :meth:`_prepare` instead,
        once per triplet subset).
        """
        X = np.asarray(X)
        return self._prepare(np.ascontiguousarray(X.T), triplets, weights).objective(theta, gradient)

    # ------------------------------------------------------------------ fitting

    def _random_triplets(self, groups, rng):
        pairs = positive_pairs(groups)
        if self.n_random_triplets == 0 or len(pairs) == 0:
            return np.empty((0, 3), dtype=np.int64)
        chosen = pairs[rng.randint(len(pairs), size=self.n_random_triplets)]
        return np.column_stack([chosen, draw_negatives(groups, chosen[:, 0], rng)])

    def _holdout_map(self, theta, XT, groups):
        """mAP of the held-out images (``XT`` their (m, n) transposed rows)."""
        if XT.shape[1] == 0:
            return float("nan")
        S = self._similarities(self._matrix(theta, XT.dtype), XT)
        norms = np.sqrt(np.maximum(np.diag(S), EPS))
        return map_from_scores(S / np.outer(norms, norms), np.arange(XT.shape[1]), groups)

    def fit(self, X, groups, vocabulary, together=None):
        """Learn M^s from the word counts of training images.

        Parameters
        ----------
        X : (n_images, n_words) word counts, scipy.sparse or array, non-negative.
        groups : (n_images,) labels; images of one group are near duplicates.
        vocabulary : (n_words, d) the visual words, for the k-NN mask.
        together : (n_images,) labels or None, e.g. each image's source photograph:
            groups sharing a label are held out or trained on together
            (:func:`ndir.data.holdout_mask`), so the hold-out that picks the
            iteration shares no photograph with the training triplets; None: each
            group alone.

        Measured in the default workflow (2 cores): 20,000 words, 322 training images
        with ~4,600 words each, ~10,000 triplets, max_iter = 100: 10 s of CPU, each
        evaluation restricted to its triplets' images, X kept transposed.

        Returns
        -------
        self
        """
        self._validate_params()
        counts = check_array(X, accept_sparse="csr", dtype=np.float64)
        groups = column_or_1d(groups)
        check_consistent_length(counts, groups)
        vocabulary = check_array(vocabulary, dtype=np.float32)
        if vocabulary.shape[0] != counts.shape[1]:
            raise ValueError(f"vocabulary has {vocabulary.shape[0]} words but X has {counts.shape[1]} columns")
        if (counts.data if sp.issparse(counts) else counts).min(initial=0.0) < 0:
            raise ValueError("X must hold word counts (non-negative)")
        rng = check_random_state(self.random_state)

        self.idf_ = inverse_document_frequency(counts)
        self.mask_ = word_neighbour_mask(vocabulary, self.n_neighbours)
        self._set_structure(self.mask_)
        theta = np.where(self._diagonal, self.idf_[self._rows] ** 2, 0.0)

        # float32: the N^2 m products of every evaluation run twice as fast as float64.
        tf = term_frequencies(counts).astype(np.float32)
        tf = tf.toarray() if sp.issparse(tf) else tf
        held = holdout_mask(groups, self.holdout_fraction, rng, together)
        # Transposed (words x images), C-contiguous, once: what every product reads.
        XT_train, g_train = np.ascontiguousarray(tf[~held].T), groups[~held]
        XT_held, g_held = np.ascontiguousarray(tf[held].T), groups[held]
        XT64_train = XT_train.astype(np.float64)
        self.holdout_groups_ = np.unique(g_held)

        S = self._similarities(self._matrix(theta, np.float32), XT_train)
        hard = hard_triplets(S / np.sqrt(np.outer(np.diag(S), np.diag(S)) + EPS), g_train, self.max_hard_per_query)
        random_ = self._random_triplets(g_train, rng)
        triplets = np.concatenate([hard, random_])
        weights = triplet_weights(triplets, g_train)
        self.n_hard_triplets_, self.n_random_triplets_ = len(hard), len(random_)

        best = (self._holdout_map(theta, XT_held, g_held), theta, 0)
        every = self._prepare(XT_train, triplets, weights, XT64_train)
        value, active = every.objective(theta, gradient=False)
        self.history_ = [{"iteration": 0, "objective": value, "n_active": int(active.sum()), "holdout_map": best[0]}]
        step = None
        for iteration in range(1, self.max_iter + 1):
            # (At iteration 1, theta is still the one just evaluated.)
            if iteration > 1 and (iteration - 1) % self.full_eval_every == 0:
                _, active = every.objective(theta, gradient=False)
            if not active.any():
                break
            subset, subset_weights = triplets[active], weights[active]
            evaluation = self._prepare(XT_train, subset, subset_weights, XT64_train)
            value, _, grad = evaluation.objective(theta)
            step = 0.1 * np.linalg.norm(theta) / max(np.linalg.norm(grad), EPS) if step is None else 2 * step
            while True:
                candidate = np.maximum(theta - step * grad, 0.0)
                new_value, _ = evaluation.objective(candidate, gradient=False)
                if new_value <= value - ARMIJO * grad @ (theta - candidate) or step < 1e-12:
                    break
                step /= 2
            theta = candidate
            holdout = self._holdout_map(theta, XT_held, g_held)
            self.history_.append(
                {"iteration": iteration, "objective": new_value, "n_active": int(active.sum()), "holdout_map": holdout}
            )
            if not np.isnan(holdout) and holdout > best[0]:
                best = (holdout, theta, iteration)
        if np.isnan(best[0]):
            best = (best[0], theta, len(self.history_) - 1)
        self.holdout_map_, theta, self.best_iteration_ = best
        self.metric_ = self._matrix(theta).astype(np.float32)
        self.metric_.eliminate_zeros()
        return self

    # ------------------------------------------------------------------ scoring

    @property
    def model_bytes_(self):
        """Bytes of the upper triangle of M^s as CSR: 8 per non-zero + 4 per row pointer."""
        check_is_fitted(self)
        return 8 * sp.triu(self.metric_).nnz + 4 * (self.metric_.shape[0] + 1)

    def score_pairs(self, Q, X):
        """Normalised similarities ``S_qx / sqrt(S_qq S_xx)`` (same ranking as Ŝ of Eq. 3).

        Parameters
        ----------
        Q : (n_q, n_words) word counts; X : (n_x, n_words) word counts.

        Returns
        -------
        (n_q, n_x) float64 array >= 0 (0 for an image without words, 1 for an image
        against itself); above 1 is possible, since the learned M is non-negative but
        not positive semi-definite (scores reached 1.37 on the tests' problem).
        """
        check_is_fitted(self)
        M = self.metric_.astype(np.float64)
        Q, X = term_frequencies(Q), term_frequencies(X)
        QM, XM = sp.csr_matrix(Q @ M), sp.csr_matrix(X @ M)
        S = QM @ sp.csr_matrix(X).T
        S = S.toarray() if sp.issparse(S) else np.asarray(S)
        q_norm = np.sqrt(np.asarray(QM.multiply(sp.csr_matrix(Q)).sum(axis=1)).ravel())
        x_norm = np.sqrt(np.asarray(XM.multiply(sp.csr_matrix(X)).sum(axis=1)).ravel())
        denominator = np.outer(q_norm, x_norm)
        return np.divide(S, denominator, out=np.zeros_like(S), where=denominator > 0)


class _Evaluation:
    """Eq. 4 and its gradient over fixed triplets, for any theta (see :meth:`SparseSimilarityMatrix._prepare`).

    ``XT`` (m, r) and ``XT64`` (its float64 copy) hold the r images the triplets
    use, C-contiguous; ``triplets`` index them (0 to r - 1).
    """

    def __init__(self, model, XT, XT64, triplets, weights):
        self.model, self.XT, self.XT64 = model, XT, XT64
        self.triplets, self.weights = triplets, weights

    def objective(self, theta, gradient=True):
        """``(value, active)``, and with ``gradient`` ``(value, active, gradient)``."""
        model, XT = self.model, self.XT
        S = model._similarities(model._matrix(theta, XT.dtype), XT)
        diagonal = np.maximum(np.diag(S), EPS)
        i, j, l = self.triplets.T
        # Eq. 3 at the triplets' pairs only; elementwise as the full matrix S^2 / (d d^T).
        hinge = S[i, l] ** 2 / (diagonal[i] * diagonal[l]) - S[i, j] ** 2 / (diagonal[i] * diagonal[j]) + model.margin
        active = hinge > 0
        weights = self.weights
        value = float(weights[active] @ hinge[active])
        if not gradient:
            return value, active
        # dL/dŜ for the pairs (i, l) (+w) and (i, j) (-w) of the active triplets.
        a = np.concatenate([i[active], i[active]])
        b = np.concatenate([l[active], j[active]])
        coefficient = np.concatenate([weights[active], -weights[active]])
        s_ab, s_aa, s_bb = S[a, b], diagonal[a], diagonal[b]
        d_ab = coefficient * 2 * s_ab / (s_aa * s_bb)
        d_aa = -coefficient * s_ab**2 / (s_aa**2 * s_bb)
        d_bb = -coefficient * s_ab**2 / (s_aa * s_bb**2)
        # dL/dM_uv + dL/dM_vu = x_u^T C x_v + x_v^T C x_u = x_u^T (C + C^T) x_v, x_u the
        # images' weights of word u and C the (r, r) derivatives with respect to S:
        # one sum over images per mask entry, against Z^T = X^T (C + C^T)^T (one GEMM,
        # already in the (m, r) layout whose rows the sum reads).
        r = XT.shape[1]
        symmetric = np.bincount(
            np.concatenate([a * r + b, b * r + a, a * r + a, b * r + b]),
            np.concatenate([d_ab, d_ab, 2 * d_aa, 2 * d_bb]),
            minlength=r * r,
        ).reshape(r, r)
        ZT = self.XT64 @ symmetric.T
        full = np.empty(model._rows.size)
        # The diagonal entries read the rows in place; x_u^T (C + C^T) x_u counts
        # theta_uu's one place twice.
        full[model._diagonal] = (np.einsum("ij,ij->i", self.XT64, ZT) / 2.0)[model._rows[model._diagonal]]
        off = np.flatnonzero(~model._diagonal)
        rows, cols = model._rows[off], model._cols[off]
        for start in range(0, off.size, MASK_CHUNK):
            u, v = rows[start : start + MASK_CHUNK], cols[start : start + MASK_CHUNK]
            full[off[start : start + u.size]] = np.einsum("ij,ij->i", self.XT64[u], ZT[v])
        return value, active, full
