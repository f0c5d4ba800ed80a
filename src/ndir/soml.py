"""Sparse online metric learning (Gao, Hoi, Zhang, Wan & Li, "SOML", AAAI 2014).

A diagonal bilinear similarity ``S_w(x, y) = x^T diag(w) y`` is learned online from
triplets ``(x, x+, x-)`` (a query, one of its near duplicates, another image) with the
hinge loss of Eq. 7,

    L_t(w) = max(0, 1 - S_w(x, x+) + S_w(x, x-)) = max(0, 1 - w . g_t),
    g_t = x ⊙ (x+ - x-),

and an l1 penalty that makes ``w`` sparse. Where the hinge is active its sub-gradient
is ``-g_t``; the printed Eq. 12 and Eq. 15 use ``+g_t``, which would *ascend* the
loss, so the updates below carry the derived sign:

- **SOML-TG** (Algorithm 1, truncated gradient): on an active triplet,
  ``w <- T_1(w + eta g_t, eta lambda)`` with the soft threshold ``T_1`` of Eq. 11
  (:func:`truncate`); nothing happens on an inactive one.
- **SOML-DA** (Algorithm 2, regularised dual averaging, Eq. 13-16): the running mean
  ``gbar_t`` of the sub-gradients gives ``w_{t+1}`` in closed form (Eq. 16,
  :func:`dual_averaging_weights`) with ``lambda_t = lambda + gamma rho / sqrt(t)``.
  The text and the printed algorithm differ, so both are offered
  (``SOMLDualAveraging(update=...)``):

  - ``"every_step"`` (default, Eq. 13 as written): ``gbar_t`` averages sub-gradients of
    L, ``-g_t`` on active triplets and 0 on inactive ones, and ``w`` is the minimiser of
    Eq. 13 after every triplet, so it also moves (shrinks, as t grows) on inactive ones.
  - ``"algorithm2"`` (Algorithm 2 as printed, sign fixed): line 7 adds ``-g_t`` to the
    average on every triplet, active or not, and lines 9-17 recompute ``w`` only when
    the loss is positive; otherwise ``w_{t+1} = w_t``.

Cost per triplet is proportional to the non-zeros of ``x`` for sparse input: TG's
truncation of untouched coordinates is applied lazily (successive shrinkages towards 0
compose, so a coordinate owes ``alpha`` times the active steps since it was last
touched), and DA's weights are evaluated only where needed from the gradient sums.
Dense input touches every coordinate at every triplet, so it skips that bookkeeping
and works in place in buffers allocated once per fit. Everything accumulates in
float64 (the weights, the gradient sums, and ``g`` from ``X``'s values widened exactly
to float64); the weights equal those of the direct formulas bit for bit, except that
every zero weight is +0.0 (:func:`truncate`, :func:`dual_averaging_weights`).
"""

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted, column_or_1d

from ndir.triplets import sample_triplets

DA_UPDATES = ("every_step", "algorithm2")
"""Readings of SOML-DA's update (:class:`SOMLDualAveraging`)."""

ZERO_WEIGHT = 1e-10
"""A weight of at most this magnitude counts as zero (the seed's threshold, Tables 4-6)."""

DENSE_ROWS_BYTES = 512 * 2**20
"""Sparse ``X`` up to this size as a dense array (float32 where that holds its values
exactly, else float64) is copied dense for the fits' reads (the default run's
389 x 20,000 tf-idf training split: 31 MB); above it, rows are read through a scratch
row, about 2.5x slower per triplet."""


def truncate(v, alpha, out=None, scratch=None):
    """Soft threshold T_1(v, alpha) of Eq. 11, elementwise: shrink towards 0 by alpha.

    Computed as ``v - clip(v, -alpha, alpha)``, two passes instead of the five of
    ``sign(v) * max(|v| - alpha, 0)``, which it equals bit for bit except that its
    zeros are all +0.0 (that form gives -0.0 for a negative ``v`` within ``alpha``):
    ``v - alpha`` and ``v + alpha`` are the same roundings as ``|v| - alpha`` with the
    sign put back. ``alpha`` (>= 0) is a scalar or an array like ``v``; ``out`` may be
    ``v`` (in place) and ``scratch``, an array like ``v``, receives the clipped values.
    """
    if np.ndim(alpha) == 0:
        clipped = np.clip(v, -alpha, alpha, out=scratch)
    else:  # np.clip is twice as slow with array bounds
        clipped = np.maximum(np.minimum(v, alpha, out=scratch), -alpha, out=scratch)
    return np.subtract(v, clipped, out=out)


def dual_averaging_weights(gradient_sum, t, gamma, rho, l1, out=None, scratch=None):
    """Closed form of Eq. 16: the minimiser of Eq. 13 after ``t`` steps.

    ``-(sqrt(t) / gamma) * (mean - lambda_t sign(mean))`` where ``|mean| > lambda_t``,
    else 0, with ``mean = gradient_sum / t``; computed as ``(sqrt(t) / gamma) *
    (clip(mean, -lambda_t, lambda_t) - mean)`` in four passes, which equals the direct
    formula bit for bit except that its zeros are all +0.0.

    Parameters
    ----------
    gradient_sum : array, sum of the ``t`` sub-gradients (``t * gbar_t``).
    t : int >= 1.
    gamma, rho, l1 : the parameters of Eq. 13 (``lambda_t = l1 + gamma rho / sqrt(t)``).
    out, scratch : optional arrays like ``gradient_sum`` (not it) for the result and
        the clipped means.
    """
    mean = np.divide(gradient_sum, t, out=out)
    threshold = l1 + gamma * rho / np.sqrt(t)
    shrunk = np.subtract(np.clip(mean, -threshold, threshold, out=scratch), mean, out=mean)
    return np.multiply(shrunk, np.sqrt(t) / gamma, out=shrunk)


class _SparseOnlineMetric(BaseEstimator):
    """The online loop shared by SOML-TG and SOML-DA; subclasses define the update."""

    _parameter_constraints = {
        "negatives_per_pair": [Interval(Integral, 1, None, closed="left")],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def fit(self, X, groups):
        """Learn ``w`` from triplets of the images ``X`` grouped by ``groups``.

        Parameters
        ----------
        X : (n_images, m) scipy.sparse matrix (e.g. L2-normalised tf-idf) or array
            (e.g. Fisher vectors).
        groups : (n_images,) labels; images of one group are near duplicates.

        Each epoch streams a fresh sample of :func:`ndir.triplets.sample_triplets`.
        Measured on the default run's training split (one thread, 2 shared cores under
        load): 50,300 triplets of 20,000-word tf-idf vectors with ~5,200 non-zeros each
        in 3.5-9 s, of 40,960-d Fisher vectors in 6-15 s (reading the triplets' rows
        and a few passes over w per triplet dominate).

        Returns
        -------
        self
        """
        self._validate_params()
        X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32])
        groups = column_or_1d(groups)
        check_consistent_length(X, groups)
        rng = check_random_state(self.random_state)
        rows = _RowReader(X)
        self._dense = not rows.sparse
        self._start(X.shape[1])
        self.mean_loss_ = []
        self.n_active_ = 0
        self.n_triplets_ = 0
        for _ in range(self.n_epochs):
            triplets = sample_triplets(groups, self.negatives_per_pair, rng)
            losses = np.empty(len(triplets))
            # Python ints index faster than NumPy's; each _weights is followed by the
            # _step of the same triplet (the estimators cache what they read).
            for k, (i, j, l) in enumerate(triplets.tolist()):
                where, g = rows.difference_product(i, j, l)
                loss = max(0.0, 1.0 - float(self._weights(where) @ g))
                losses[k] = loss
                self._step(where, g, active=loss > 0.0)
                self.n_active_ += loss > 0.0
            self.mean_loss_.append(float(losses.mean()))
            self.n_triplets_ += len(triplets)
        self.coef_ = self._final_weights()
        return self

    @property
    def n_nonzero_(self):
        """Number of weights of magnitude above :data:`ZERO_WEIGHT`."""
        check_is_fitted(self)
        return int(np.count_nonzero(np.abs(self.coef_) > ZERO_WEIGHT))

    @property
    def sparsity_(self):
        """Share of zero weights (|w| <= 1e-10), as in the seed's Tables 4-6."""
        return 1.0 - self.n_nonzero_ / self.coef_.size

    @property
    def model_bytes_(self):
        """Bytes to store the non-zero weights: an int32 index and a float32 value each."""
        return 8 * self.n_nonzero_

    def transform(self, X):
        """``X ⊙ w`` row by row (sparse stays sparse), so ``transform(Q) @ X.T`` scores Q."""
        check_is_fitted(self)
        if sp.issparse(X):
            weighted = sp.csr_matrix(X).multiply(self.coef_[None, :]).tocsr()
            weighted.eliminate_zeros()
            return weighted
        return np.asarray(X) * self.coef_

    def score_pairs(self, X, Y):
        """Similarities ``S_w(x_a, y_b)``: a dense (n_x, n_y) float64 array."""
        scores = self.transform(X) @ Y.T
        return scores.toarray() if sp.issparse(scores) else np.asarray(scores, dtype=np.float64)


class _RowReader:
    """``g = x_i ⊙ (x_j - x_l)`` on the support of ``x_i``, for CSR or dense ``X``.

    For dense ``X``, ``where`` is ``slice(None)`` and ``g`` is a buffer of the reader,
    overwritten by the next read (the caller may scribble on it meanwhile).
    """

    def __init__(self, X):
        self.sparse = sp.issparse(X)
        if self.sparse:
            X = sp.csr_matrix(X, dtype=np.float64, copy=True)
            X.sum_duplicates()  # also sorts the column indices of every row
            self.indptr, self.indices, self.data = X.indptr, X.indices, X.data
            # float32 when that holds the values exactly (tf-idf of float32 counts):
            # half the memory traffic of the random rows' reads.
            narrow = np.float32 if np.array_equal(X.data.astype(np.float32), X.data) else np.float64
            if X.shape[0] * X.shape[1] * np.dtype(narrow).itemsize <= DENSE_ROWS_BYTES:
                # Rows j and l are read at ``where`` by one gather each.
                self._dense_rows = X.astype(narrow).toarray()
            else:
                # A dense row, all zeros between reads: a row scattered into it is read
                # at ``where`` by one gather (searching the row's sorted columns instead
                # made the 20,000-word tf-idf fits twice as slow).
                self._dense_rows = None
                self._scratch = np.zeros(X.shape[1])
        else:
            # float64 (float32 rows widened inside the ufuncs read 1.3x slower).
            self.X = np.asarray(X, dtype=np.float64)
            self._g = np.empty(X.shape[1])

    def _row(self, i):
        start, stop = self.indptr[i], self.indptr[i + 1]
        return self.indices[start:stop], self.data[start:stop]

    def _values_on(self, i, where):
        """Values of row ``i`` at the columns ``where`` (0 where it has none)."""
        if self._dense_rows is not None:
            return self._dense_rows[i].take(where)
        columns, values = self._row(i)
        self._scratch[columns] = values
        found = self._scratch[where]
        self._scratch[columns] = 0.0
        return found

    def difference_product(self, i, j, l):
        if not self.sparse:
            g = np.subtract(self.X[j], self.X[l], out=self._g)
            return slice(None), np.multiply(self.X[i], g, out=g)
        where, x = self._row(i)
        # Widened to float64 before subtracting, as the float64 rows would be.
        return where, x * np.subtract(self._values_on(j, where), self._values_on(l, where), dtype=np.float64)


class SOMLTruncatedGradient(_SparseOnlineMetric):
    """SOML-TG (Algorithm 1 of Gao et al. 2014): online gradient steps with l1 truncation.

    Parameters
    ----------
    learning_rate : float > 0, eta (seed: 1).
    l1 : float >= 0, lambda; the truncation threshold is ``eta * lambda`` (seed: 1e-5).
    negatives_per_pair : int, random non-matching images per ordered positive pair.
    n_epochs : int, passes over freshly sampled triplets (the seed makes one).
    random_state : int, RandomState or None, for the triplets.

    Attributes
    ----------
    coef_ : (m,) float64, the diagonal ``w``, starting from 0.
    n_triplets_, n_active_ : triplets seen, and those with a positive loss (updates).
    mean_loss_ : list of float, mean hinge loss of each epoch, before each update.
    """

    _parameter_constraints = {
        **_SparseOnlineMetric._parameter_constraints,
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "l1": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, learning_rate=1.0, l1=1e-5, negatives_per_pair=50, n_epochs=1, random_state=None):
        self.learning_rate = learning_rate
        self.l1 = l1
        self.negatives_per_pair = negatives_per_pair
        self.n_epochs = n_epochs
        self.random_state = random_state

    def _start(self, n_features):
        self._w = np.zeros(n_features)
        self._alpha = self.learning_rate * self.l1
        if self._dense:
            # Every triplet touches every coordinate: nothing is ever owed.
            self._clipped = np.empty(n_features)
            return
        # Active steps so far, and per coordinate the count it was last truncated at.
        self._n_updates = 0
        self._synced_at = np.zeros(n_features, dtype=np.int64)
        self._read = None  # the weights at ``where`` that _weights returned

    def _weights(self, where):
        if self._dense:
            return self._w
        owed = self._n_updates - self._synced_at.take(where)
        w = self._w.take(where)
        truncate(w, self.learning_rate * self.l1 * owed, out=w)
        # Written back (with the sync count) by the _step that follows.
        self._read = w
        return w

    def _step(self, where, g, active):
        if self._dense:
            if active:
                w = self._w
                if self.learning_rate != 1.0:
                    g = np.multiply(g, self.learning_rate, out=g)
                np.add(w, g, out=w)
                truncate(w, self._alpha, out=w, scratch=self._clipped)
            return
        w, self._read = self._read, None
        if active:
            self._n_updates += 1
            w += g if self.learning_rate == 1.0 else self.learning_rate * g
            truncate(w, self._alpha, out=w)
        self._w[where] = w
        self._synced_at[where] = self._n_updates

    def _final_weights(self):
        if self._dense:
            return self._w.copy()
        owed = self._n_updates - self._synced_at
        return truncate(self._w, self.learning_rate * self.l1 * owed)


class SOMLDualAveraging(_SparseOnlineMetric):
    """SOML-DA (Algorithm 2 of Gao et al. 2014): regularised dual averaging, Eq. 13-16.

    Parameters
    ----------
    gamma : float > 0, weight of the proximal term ``gamma / (2 sqrt(t)) ||w||^2`` (seed: 1e-4).
    rho : float >= 0, sparsity of the early steps, ``lambda_t = l1 + gamma rho / sqrt(t)`` (seed: 1).
    l1 : float >= 0, lambda (seed: 1e-6).
    update : {"every_step", "algorithm2"}, which reading of the seed (module docstring):
        Eq. 13's minimiser after every triplet, or Algorithm 2's update on active
        triplets only with every triplet in the average. ``"algorithm2"`` recomputes
        all m weights at each active triplet (O(m), not O(nnz(x))).
    negatives_per_pair, n_epochs, random_state : as :class:`SOMLTruncatedGradient`.

    Attributes
    ----------
    coef_ : (m,) float64, ``w_{n+1}`` of Eq. 16 after the last triplet.
    n_triplets_, n_active_, mean_loss_ : as :class:`SOMLTruncatedGradient`.
    """

    _parameter_constraints = {
        **_SparseOnlineMetric._parameter_constraints,
        "gamma": [Interval(Real, 0, None, closed="neither")],
        "rho": [Interval(Real, 0, None, closed="left")],
        "l1": [Interval(Real, 0, None, closed="left")],
        "update": [StrOptions(set(DA_UPDATES))],
    }

    def __init__(
        self, gamma=1e-4, rho=1.0, l1=1e-6, update="every_step", negatives_per_pair=50, n_epochs=1, random_state=None
    ):
        self.gamma = gamma
        self.rho = rho
        self.l1 = l1
        self.update = update
        self.negatives_per_pair = negatives_per_pair
        self.n_epochs = n_epochs
        self.random_state = random_state

    def _start(self, n_features):
        self._gradient_sum = np.zeros(n_features)
        self._t = 0
        # Algorithm 2 keeps w explicitly: it changes only on active triplets.
        self._w = np.zeros(n_features) if self.update == "algorithm2" else None
        self._clipped = np.empty(n_features)
        self._w_buffer = np.empty(n_features) if self._dense else None
        self._read = None  # Eq. 13's gradient sums at ``where`` that _weights read

    def _weights(self, where):
        if self._w is not None:
            return self._w if self._dense else self._w.take(where)
        if self._dense:
            if self._t == 0:
                return np.zeros_like(self._gradient_sum)
            return dual_averaging_weights(
                self._gradient_sum, self._t, self.gamma, self.rho, self.l1, out=self._w_buffer, scratch=self._clipped
            )
        self._read = self._gradient_sum.take(where)
        if self._t == 0:
            return np.zeros_like(self._read)
        return dual_averaging_weights(self._read, self._t, self.gamma, self.rho, self.l1)

    def _step(self, where, g, active):
        self._t += 1
        if self._w is None:
            read, self._read = self._read, None
            if active:
                if self._dense:
                    np.subtract(self._gradient_sum, g, out=self._gradient_sum)
                else:
                    self._gradient_sum[where] = read - g
            return
        if self._dense:
            np.subtract(self._gradient_sum, g, out=self._gradient_sum)
        else:
            self._gradient_sum[where] -= g
        if active:
            dual_averaging_weights(
                self._gradient_sum, self._t, self.gamma, self.rho, self.l1, out=self._w, scratch=self._clipped
            )

    def _final_weights(self):
        if self._w is not None:
            return self._w.copy()
        if self._t == 0:
            return np.zeros_like(self._gradient_sum)
        return dual_averaging_weights(self._gradient_sum, self._t, self.gamma, self.rho, self.l1)
