"""The fast paths of :mod:`ndir.soml` against the computations they replaced.

Each reference below is a plain transcription of the code before the speed-up
(``sign(v) * max(|v| - alpha, 0)``, Eq. 16 as printed, fresh float64 arrays at every
triplet, lazy truncation on the support of ``x_i``). The fast paths must give the same
values exactly (tolerance 0; ``assert_array_equal`` counts -0.0 equal to +0.0, the
one difference: the fast forms write every zero as +0.0).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from ndir import soml
from ndir.soml import SOMLDualAveraging, SOMLTruncatedGradient, _RowReader, dual_averaging_weights, truncate
from ndir.triplets import sample_triplets


def _old_truncate(v, alpha):
    return np.sign(v) * np.maximum(np.abs(v) - alpha, 0.0)


def _old_dual_averaging_weights(gradient_sum, t, gamma, rho, l1):
    mean = gradient_sum / t
    threshold = l1 + gamma * rho / np.sqrt(t)
    return -(np.sqrt(t) / gamma) * (mean - threshold * np.sign(mean)) * (np.abs(mean) > threshold)


def _awkward_values(rng, alpha, n=4000):
    """Random values with exact +-alpha, zeros of both signs and values just inside and
    outside the threshold."""
    v = rng.standard_normal(n) * 3 * np.max(alpha)
    v[:6] = [0.0, -0.0, np.max(alpha), -np.max(alpha), 1e-300, -1e-300]
    a = np.broadcast_to(alpha, v.shape)
    v[6:20] = np.nextafter(a[6:20], 0) * np.where(np.arange(14) % 2, 1, -1)
    v[20:34] = np.nextafter(a[20:34], np.inf) * np.where(np.arange(14) % 2, 1, -1)
    return v


@pytest.mark.parametrize("alpha_kind", ["scalar", "array", "zero"])
def test_truncate_equals_the_sign_max_form(alpha_kind):
    rng = np.random.default_rng(0)
    alpha = {"scalar": 0.37, "array": rng.uniform(0, 1, 4000) * (rng.random(4000) < 0.8), "zero": 0.0}[alpha_kind]
    v = _awkward_values(rng, alpha)
    expected = _old_truncate(v, alpha)
    np.testing.assert_array_equal(truncate(v, alpha), expected)
    # In place, with a scratch buffer: the same values, and v itself is the result.
    w, scratch = v.copy(), np.empty_like(v)
    assert truncate(w, alpha, out=w, scratch=scratch) is w
    np.testing.assert_array_equal(w, expected)
    # The only bit difference: zeros are +0.0 (the old form gives -0.0 for negative v).
    same_bits = expected.view(np.int64) == w.view(np.int64)
    assert (w[~same_bits] == 0).all() and not np.signbit(w[w == 0]).any()


@pytest.mark.parametrize(
    ("t", "gamma", "rho", "l1"), [(1, 1e-4, 1.0, 1e-6), (37, 0.5, 0.5, 0.01), (1000, 2.0, 0.0, 0.0)]
)
def test_dual_averaging_weights_equal_eq16_as_printed(t, gamma, rho, l1):
    rng = np.random.default_rng(1)
    threshold = l1 + gamma * rho / np.sqrt(t)
    G = _awkward_values(rng, threshold * t)
    expected = _old_dual_averaging_weights(G, t, gamma, rho, l1)
    assert np.count_nonzero(expected) and np.count_nonzero(expected == 0)
    np.testing.assert_array_equal(dual_averaging_weights(G, t, gamma, rho, l1), expected)
    out, scratch, before = np.empty_like(G), np.empty_like(G), G.copy()
    assert dual_averaging_weights(G, t, gamma, rho, l1, out=out, scratch=scratch) is out
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(G, before)


def _sparse_X(dtype, seed=0, n=30, m=60):
    X = sp.random(n, m, density=0.3, random_state=seed, format="csr", dtype=np.float64) * 3
    X = X.tolil()
    X[4, :] = 0.0  # an image without words
    return sp.csr_matrix(X.tocsr(), dtype=dtype)


def _reader_paths(monkeypatch, path):
    """The sparse reader's three ways of reading rows j and l, or the dense reader."""
    if path == "scratch":
        monkeypatch.setattr(soml, "DENSE_ROWS_BYTES", 0)
    X = {
        "dense-float32": _sparse_X(np.float32),
        "dense-float64": _sparse_X(np.float64),
        "scratch": _sparse_X(np.float64),
        "dense input": _sparse_X(np.float32).toarray(),
    }[path]
    return X


@pytest.mark.parametrize("path", ["dense-float32", "dense-float64", "scratch", "dense input"])
def test_row_reader_paths_equal_float64_rows(monkeypatch, path):
    X = _reader_paths(monkeypatch, path)
    reader = _RowReader(X)
    if path != "dense input":
        kind = None if path == "scratch" else np.dtype(path.split("-")[1])
        assert (reader._dense_rows is None) if kind is None else reader._dense_rows.dtype == kind
    dense = X.toarray() if sp.issparse(X) else X
    dense = dense.astype(np.float64)
    reads = []
    for i, j, l in [(0, 1, 2), (4, 0, 1), (0, 4, 4), (3, 4, 5), (7, 7, 8), (9, 2, 3)]:
        where, g = reader.difference_product(i, j, l)
        support = np.flatnonzero(dense[i]) if sp.issparse(X) else np.arange(X.shape[1])
        np.testing.assert_array_equal(np.arange(X.shape[1])[where], support)
        np.testing.assert_array_equal(g, dense[i, support] * (dense[j, support] - dense[l, support]))
        assert g.dtype == np.float64
        reads.append(g.copy())
    assert any(r.any() for r in reads)


def test_float64_values_that_float32_would_round_are_read_in_float64():
    X = _sparse_X(np.float64)
    X.data[0] = 1.0 + 2.0**-40  # not a float32
    reader = _RowReader(X)
    assert reader._dense_rows.dtype == np.float64
    i = int(np.searchsorted(X.indptr, 0, side="right")) - 1
    column = X.indices[0]
    other = next(r for r in range(X.shape[0]) if r != i and X[r, column] != 0)
    where, g = reader.difference_product(other, i, other)
    dense = X.toarray()
    np.testing.assert_array_equal(g, dense[other, where] * (dense[i, where] - dense[other, where]))


def _old_fit(model, X, groups):
    """The loop as it was: per triplet, ``g`` on the stored columns of ``x_i`` (all
    columns for dense X), fresh arrays, TG's lazy truncation, Eq. 16 as printed."""
    sparse = sp.issparse(X)
    dense = (X.toarray() if sparse else np.asarray(X)).astype(np.float64)
    if sparse:
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        X.sum_duplicates()
    m = dense.shape[1]
    rng = np.random.RandomState(model.random_state)
    tg = isinstance(model, SOMLTruncatedGradient)
    w, G, synced = np.zeros(m), np.zeros(m), np.zeros(m, dtype=np.int64)
    n_updates = t = n_active = 0
    for _ in range(model.n_epochs):
        for i, j, l in sample_triplets(groups, model.negatives_per_pair, rng):
            where = X.indices[X.indptr[i] : X.indptr[i + 1]] if sparse else np.arange(m)
            g = dense[i, where] * (dense[j, where] - dense[l, where])
            if tg:
                alpha = model.learning_rate * model.l1
                w[where] = _old_truncate(w[where], alpha * (n_updates - synced[where]))
                synced[where] = n_updates
                active = max(0.0, 1.0 - float(w[where] @ g)) > 0.0
                if active:
                    n_updates += 1
                    w[where] = _old_truncate(w[where] + model.learning_rate * g, alpha)
                    synced[where] = n_updates
            elif model.update == "every_step":
                current = np.zeros(len(where)) if t == 0 else _old_dual_averaging_weights(G[where], t, *_da(model))
                active = max(0.0, 1.0 - float(current @ g)) > 0.0
                t += 1
                if active:
                    G[where] -= g
            else:
                active = max(0.0, 1.0 - float(w[where] @ g)) > 0.0
                t += 1
                G[where] -= g
                if active:
                    w = _old_dual_averaging_weights(G, t, *_da(model))
            n_active += active
    if tg:
        w = _old_truncate(w, model.learning_rate * model.l1 * (n_updates - synced))
    elif model.update == "every_step":
        w = _old_dual_averaging_weights(G, t, *_da(model)) if t else np.zeros(m)
    return w, n_active


def _da(model):
    return model.gamma, model.rho, model.l1


MODELS = {
    "tg": SOMLTruncatedGradient(learning_rate=1.0, l1=0.02, negatives_per_pair=3, n_epochs=2, random_state=1),
    "tg-eta": SOMLTruncatedGradient(learning_rate=0.3, l1=0.05, negatives_per_pair=3, n_epochs=2, random_state=2),
    "da": SOMLDualAveraging(gamma=0.5, rho=0.5, l1=0.01, negatives_per_pair=3, n_epochs=2, random_state=1),
    "da-algorithm2": SOMLDualAveraging(
        gamma=0.5, rho=0.5, l1=0.01, update="algorithm2", negatives_per_pair=3, n_epochs=2, random_state=1
    ),
}


@pytest.mark.parametrize("path", ["dense-float32", "dense-float64", "scratch", "dense input"])
@pytest.mark.parametrize("name", list(MODELS))
def test_fits_equal_the_old_loop(monkeypatch, name, path):
    X = _reader_paths(monkeypatch, path)
    groups = np.repeat(np.arange(10), 3)
    model = clone(MODELS[name])
    expected, n_active = _old_fit(model, X, groups)
    fitted = model.fit(X, groups)
    assert 0 < n_active < fitted.n_triplets_ and fitted.n_active_ == n_active
    assert np.count_nonzero(expected) and np.count_nonzero(expected == 0)
    np.testing.assert_array_equal(fitted.coef_, expected)
    assert fitted.coef_.dtype == np.float64
