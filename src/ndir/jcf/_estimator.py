"""The estimator :class:`JCF`: learning the factorised projectors with Adam on the
triplet loss, model selection on held-out groups, encoding, and its model file."""

import json
import time
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ndir.data import holdout_mask
from ndir.evaluation import map_from_scores, recall_at_k
from ndir.jcf._factorised import _from_columns, _Model, _to_columns
from ndir.jcf._features import _check_images
from ndir.jcf._loss import hardest_negative_triplet_loss
from ndir.jcf._normalisation import _normalise, _normalise_backward
from ndir.model_files import read_model_file, write_model_file

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


class _Adam:
    """Adam's moments of each parameter and its step counter; :meth:`step` updates the
    parameters in place (Kingma & Ba 2015, Algorithm 1, betas :data:`ADAM_BETAS`)."""

    def __init__(self, params, learning_rate):
        self.learning_rate = learning_rate
        self.moments = {name: (np.zeros_like(value), np.zeros_like(value)) for name, value in params.items()}
        self.n_steps = 0

    def step(self, params, grads):
        """``m = beta1 m + (1 - beta1) g``, ``v = beta2 v + (1 - beta2) g^2``, then
        ``params -= lr m_hat / (sqrt(v_hat) + eps)``; the operations in that order, in
        two scratch arrays per parameter (no temporary per operation)."""
        beta1, beta2 = ADAM_BETAS
        self.n_steps += 1
        for name, grad in grads.items():
            m, v = self.moments[name]
            scratch = np.multiply(grad, 1 - beta1)
            m *= beta1
            m += scratch
            np.square(grad, out=scratch)
            scratch *= 1 - beta2
            v *= beta2
            v += scratch
            # scratch = sqrt(v_hat) + eps, then step = (lr * m_hat) / scratch.
            np.divide(v, 1 - beta2**self.n_steps, out=scratch)
            np.sqrt(scratch, out=scratch)
            scratch += ADAM_EPS
            step = np.divide(m, 1 - beta1**self.n_steps)
            step *= self.learning_rate
            step /= scratch
            params[name] -= step


def _epoch_record(epoch, loss, n_active, n_triplets, holdout_map, holdout_recall_at_1, start):
    """One entry of :attr:`JCF.history_`, ``seconds`` counted from ``start``."""
    return {
        "epoch": epoch,
        "loss": loss,
        "n_active": n_active,
        "n_triplets": n_triplets,
        "holdout_map": holdout_map,
        "holdout_recall_at_1": holdout_recall_at_1,
        "seconds": time.perf_counter() - start,
    }


class JCF(BaseEstimator):
    """Joint Codebook Factorization (seed 004): a learned R-dimensional second-order signature.

    ``z_i = mean_x (h(x)^T U_i^T x)(h(x)^T V_i^T x)`` (JCF-R), or with ``n_shared = k``
    ``z_i = mean_x (h(x)^T A Ũ_i^T x)(h(x)^T B Ṽ_i^T x)`` (JCF-R-k); then the signed
    square root (if ``signed_sqrt``) and L2 normalisation. See :mod:`ndir.jcf`.

    Learning. Each epoch visits the training groups in a random order, ``batch_groups``
    groups per Adam step (all of them, one full-batch step per epoch, when None). In a
    batch, every image with a near duplicate is an anchor, paired with each of its
    positives and its hardest negative under the current model
    (:func:`hardest_negative_triplet_loss`, margin on the cosine). Gradients are analytic:
    through the loss, the L2 normalisation, the smoothed signed square root
    ``sign(z)(sqrt(|z| + sqrt_eps) - sqrt(sqrt_eps))`` (bounded derivative; the plain
    one is infinite at 0) and the mean pooling (GEMMs, :mod:`ndir.jcf`).

    Initialisation: i.i.d. N(0, 1) entries for Ũ, Ṽ (U, V) and A, B, then U, V rescaled
    by one common factor so that the training z have unit RMS (the loss does not
    depend on that scale except through ``sqrt_eps``, which is thus relative to it, and
    Adam's steps are relative to O(1) parameters). Random rather than PCA-based because
    it is an unbiased sketch of the un-normalised second-order representation: for
    Gaussian ``p_i, q_i``, ``E[z_i z'_i] = <M, M'>_F`` with ``M = mean_x (h⊗x)(h⊗x)^T``;
    a truncated PCA of the K d (d+1)/2-dim codebook pooling has no rank-one-per-codeword
    factorisation to start from.

    Model selection: ``holdout_fraction`` of the training groups (those of >= 2 images)
    are held out (:func:`ndir.data.holdout_mask`; with ``together`` labels in
    :meth:`fit`, groups cut from one photograph are held out or kept together, so the
    hold-out shares no photograph with the groups trained on); after every epoch their
    mAP (every held-out image a query, other held-out images as database,
    :func:`ndir.evaluation.map_from_scores`) and Recall@1 are recorded, and the
    parameters of the best mAP (epoch 0, the initialisation, included; earliest on ties)
    are kept; training stops early once ``n_iter_no_change`` epochs in a row have not
    beaten that mAP. Without hold-out every epoch runs and the last is kept.

    Parameters
    ----------
    n_components : int >= 1, R, the signature's dimension.
    n_shared : int >= 1 or None, k of JCF-R-k (k <= K); None for JCF-R.
    signed_sqrt : bool, apply the (smoothed) signed square root before L2 normalisation.
    sqrt_eps : float >= 0, smoothing of the signed square root, in units of the
        unit-RMS initial z.
    margin : float > 0, triplet margin on the cosine. 0.1 (the calibration's) is
        reached on every training triplet within a few epochs on the embedded set,
        after which nothing is learned; 0.3 learned more there (JCF-64 at K = 64 and
        K = 1, 30 training groups, one seed).
    learning_rate : float > 0, Adam's step size (parameters are O(1) at start).
    n_epochs : int >= 0, at most this many epochs; 0 returns the (rescaled) random
        initialisation.
    n_iter_no_change : int >= 1 or None, stop once this many consecutive epochs have
        not raised the best hold-out mAP (their parameters could not be kept); None:
        all ``n_epochs``. The hold-out mAP of the default run's models peaks at epochs
        7, 8 and 19 of 30, after dips of up to 14 epochs (JCF-64-8: epoch 5, then
        16): 15 keeps those three models and stops the largest after 22 epochs.
    batch_groups : int >= 2 or None, groups per Adam step; None: full batch (one
        step per epoch: on a toy problem the hardest-negative loss then sits for
        long on its collapsed plateau, all signatures alike and the loss near the
        margin, which mini-batches leave far sooner).
    holdout_fraction : float in [0, 1), share of training groups held out for model
        selection.
    posterior_threshold : float in [0, 1), posteriors h(x) below it count as 0 (in
        fitting and encoding), as VLFeat's Fisher encoder skips those below 1e-6: most
        of a descriptor's K posteriors are tiny, and the projections then run over the
        non-zero ones only (:data:`ndir.jcf._factorised.SPARSE_POSTERIORS_MAX`). 0
        keeps them all (the model as defined by the seed).
    random_state : int, RandomState or None (hold-out groups, initialisation, batches).

    Attributes
    ----------
    U_, V_ : (R, d, K) float64 projectors U_i, V_i; in the shared form (R, d, k),
        the Ũ_i, Ṽ_i.
    A_, B_ : (K, k) float64 shared projectors, or None.
    n_features_, n_clusters_ : d and K seen in ``fit`` (K = 1 without posteriors).
    history_ : list of dict per epoch (0 = initialisation): ``epoch``, ``loss`` (mean
        over the epoch's batches, each before its step; epoch 0: the whole training
        set), ``n_active`` and ``n_triplets`` (summed over batches), ``holdout_map``,
        ``holdout_recall_at_1`` (NaN without hold-out), ``seconds`` (since fit began).
    best_epoch_, holdout_map_ : the epoch kept and its hold-out mAP (NaN without hold-out).
    n_iter_ : epochs run (``n_epochs``, or fewer when stopped early).
    n_holdout_images_ : training images held out for the selection.
    holdout_groups_ : (n_held_groups,) the labels of the held-out groups, sorted.
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_shared": [Interval(Integral, 1, None, closed="left"), None],
        "signed_sqrt": ["boolean"],
        "sqrt_eps": [Interval(Real, 0, None, closed="left")],
        "margin": [Interval(Real, 0, None, closed="neither")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_epochs": [Interval(Integral, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), None],
        "batch_groups": [Interval(Integral, 2, None, closed="left"), None],
        "holdout_fraction": [Interval(Real, 0, 1, closed="left")],
        "posterior_threshold": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components=64,
        n_shared=None,
        signed_sqrt=True,
        sqrt_eps=1e-4,
        margin=0.3,
        learning_rate=0.05,
        n_epochs=30,
        n_iter_no_change=15,
        batch_groups=8,
        holdout_fraction=0.2,
        posterior_threshold=1e-6,
        random_state=None,
    ):
        self.n_components = n_components
        self.n_shared = n_shared
        self.signed_sqrt = signed_sqrt
        self.sqrt_eps = sqrt_eps
        self.margin = margin
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.n_iter_no_change = n_iter_no_change
        self.batch_groups = batch_groups
        self.holdout_fraction = holdout_fraction
        self.posterior_threshold = posterior_threshold
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters

    @property
    def n_parameters_(self):
        """Learned parameters: 2 R d K, or 2 (K k + R d k) in the shared form."""
        check_is_fitted(self)
        return int(self.U_.size + self.V_.size + (0 if self.A_ is None else self.A_.size + self.B_.size))

    @property
    def projectors_(self):
        """(U, V): the full (R, d, K) projectors, ``U_i = Ũ_i A^T`` in the shared form."""
        check_is_fitted(self)
        if self.A_ is None:
            return self.U_, self.V_
        return self.U_ @ self.A_.T, self.V_ @ self.B_.T

    def _init_params(self, d, K, rng):
        c = K if self.n_shared is None else self.n_shared
        R = self.n_components
        params = {"Wu": rng.standard_normal((c * d, R)), "Wv": rng.standard_normal((c * d, R))}
        if self.n_shared is not None:
            params["A"] = rng.standard_normal((K, c))
            params["B"] = rng.standard_normal((K, c))
        return params

    def _params_from_attributes(self):
        params = {"Wu": _to_columns(self.U_), "Wv": _to_columns(self.V_)}
        if self.A_ is not None:
            params["A"], params["B"] = self.A_, self.B_
        return params

    # ------------------------------------------------------------------ objective

    def _signatures(self, model, X, H, offsets, images):
        return _normalise(model.pool(X, H, offsets, images), self.sqrt_eps, self.signed_sqrt)

    def _loss_and_gradient(self, params, X, H, offsets, images, groups, scale=1.0):
        """Loss of the batch ``images`` (labels ``groups``) and its gradient (float64 dict)."""
        model = _Model(params, X.dtype, scale)
        z, kept = model.pool(X, H, offsets, images, keep=True)
        z = z.astype(np.float64)
        Y = _normalise(z, self.sqrt_eps, self.signed_sqrt)
        loss, grad_Y, n_active, n_triplets = hardest_negative_triplet_loss(Y, groups, self.margin)
        if n_active == 0:
            return loss, {name: np.zeros_like(value) for name, value in params.items()}, n_active, n_triplets
        grad_z = _normalise_backward(z, grad_Y, self.sqrt_eps, self.signed_sqrt)
        return loss, model.pool_backward(X, H, offsets, kept, grad_z), n_active, n_triplets

    def _evaluate(self, params, scale, X, H, offsets, images, groups):
        if images.size == 0:
            return float("nan"), float("nan")
        Y = self._signatures(_Model(params, X.dtype, scale), X, H, offsets, images).astype(np.float64)
        S = Y @ Y.T
        return map_from_scores(S, np.arange(images.size), groups), recall_at_k(S, groups, (1,), "precomputed")[1]

    # ------------------------------------------------------------------ fitting

    def fit(self, features, posteriors, groups, together=None):
        """Learn the projectors from training images grouped into near duplicates.

        Parameters
        ----------
        features : list of (n_i, d) arrays, the local features of each image (n_i >= 1;
            e.g. :func:`subsample_descriptors` then :func:`codebook_features`).
            Computed in float32 (float64 when every array is float64).
        posteriors : list of (n_i, K) arrays, the soft assignments h(x), or None for
            the factorised form without codebook (K = 1, h ≡ 1).
        groups : (n_images,) labels; images of one group are near duplicates. At
            least two groups, one of them with two images or more.
        together : (n_images,) labels or None, e.g. each image's source photograph:
            groups sharing a label are held out or trained on together (missing
            values link nothing); None: each group alone.

        Cost of an epoch: 8 d K R flops per training feature (the lifted rows times
        [U V], then the transposed product back; about 8 d k R in the shared form),
        plus a forward pass over the held-out images; see benchmarks/bench_jcf.py.
        Memory: the features, the posteriors, a copy of a batch's (its rows gathered)
        and two (n_i, R) arrays per image of a batch.

        Returns
        -------
        self
        """
        self._validate_params()
        X, H, offsets = _check_images(features, posteriors)
        H = self._thresholded(H)
        groups = column_or_1d(groups)
        n_images = len(offsets) - 1
        if groups.size != n_images:
            raise ValueError(f"groups has {groups.size} labels for {n_images} images")
        d, K = X.shape[1], H.shape[1]
        if self.n_shared is not None and self.n_shared > K:
            raise ValueError(f"n_shared = {self.n_shared} exceeds the codebook size K = {K} (need k <= K)")
        rng = check_random_state(self.random_state)
        train, holdout = self._split_holdout(groups, rng, together)
        data = (X, H, offsets)

        start = time.perf_counter()
        params = self._init_params(d, K, rng)
        z = _Model(params, X.dtype).pool(X, H, offsets, train).astype(np.float64)
        rms = float(np.sqrt(np.mean(z**2)))
        scale = 1.0 / rms if rms > 0 else 1.0
        Y = _normalise(scale * z, self.sqrt_eps, self.signed_sqrt)
        loss, _, n_active, n_triplets = hardest_negative_triplet_loss(Y, groups[train], self.margin)
        holdout_map, holdout_r1 = self._evaluate(params, scale, *data, holdout, groups[holdout])
        self.history_ = [_epoch_record(0, loss, n_active, n_triplets, holdout_map, holdout_r1, start)]
        best = (holdout_map, {name: value.copy() for name, value in params.items()}, 0)
        adam = _Adam(params, self.learning_rate)
        for epoch in range(1, self.n_epochs + 1):
            losses, n_active, n_triplets = self._train_epoch(params, adam, scale, data, train, groups[train], rng)
            holdout_map, holdout_r1 = self._evaluate(params, scale, *data, holdout, groups[holdout])
            mean_loss = float(np.mean(losses)) if losses else float("nan")
            self.history_.append(_epoch_record(epoch, mean_loss, n_active, n_triplets, holdout_map, holdout_r1, start))
            if not np.isnan(holdout_map) and holdout_map > best[0]:
                best = (holdout_map, {name: value.copy() for name, value in params.items()}, epoch)
            elif self._no_change(epoch, best[2], holdout_map):
                break
        if np.isnan(best[0]):
            best = (best[0], params, self.n_epochs)
        self.holdout_map_, params, self.best_epoch_ = best
        self.n_iter_ = len(self.history_) - 1

        root = np.sqrt(scale)
        self.U_ = _from_columns(params["Wu"] * root, d)
        self.V_ = _from_columns(params["Wv"] * root, d)
        self.A_ = params.get("A")
        self.B_ = params.get("B")
        self.n_features_, self.n_clusters_ = d, K
        self.n_holdout_images_ = int(holdout.size)
        self.holdout_groups_ = np.unique(groups[holdout])
        return self

    def _no_change(self, epoch, best_epoch, holdout_map):
        """Whether training stops after ``epoch``: ``n_iter_no_change`` epochs since the
        best one (never without hold-out, whose mAP is NaN)."""
        patience = self.n_iter_no_change
        return patience is not None and not np.isnan(holdout_map) and epoch - best_epoch >= patience

    def _split_holdout(self, groups, rng, together):
        """Image rows trained on and held out for model selection (:func:`ndir.data.holdout_mask`)."""
        held = holdout_mask(groups, self.holdout_fraction, rng, together)
        train, holdout = np.flatnonzero(~held), np.flatnonzero(held)
        _, sizes = np.unique(groups[train], return_counts=True)
        if sizes.size < 2 or sizes.max() < 2:
            raise ValueError("groups: training needs two groups or more, one of them with two images or more")
        return train, holdout

    def _train_epoch(self, params, adam, scale, data, train, train_groups, rng):
        """One pass over the training groups in a random order, ``batch_groups`` per Adam
        step (a batch without triplet is skipped); updates ``params`` in place.
        Returns the batches' losses and the active and total triplets summed over them."""
        labels = np.unique(train_groups)
        order = rng.permutation(labels)
        per_batch = labels.size if self.batch_groups is None else self.batch_groups
        losses, n_active, n_triplets = [], 0, 0
        for first in range(0, order.size, per_batch):
            in_batch = np.isin(train_groups, order[first : first + per_batch])
            loss, grads, active, triplets = self._loss_and_gradient(
                params, *data, train[in_batch], train_groups[in_batch], scale
            )
            if triplets == 0:
                continue
            losses.append(loss)
            n_active += active
            n_triplets += triplets
            adam.step(params, grads)
        return losses, n_active, n_triplets

    # ------------------------------------------------------------------ encoding

    def pool(self, features, posteriors):
        """Raw z (n_images, R) of images (before square root and normalisation).

        Parameters as :meth:`transform`. Returns float32 (float64 for float64 features).
        """
        check_is_fitted(self)
        X, H, offsets = self._check_transform(features, posteriors)
        model = _Model(self._params_from_attributes(), X.dtype)
        H = self._thresholded(H)
        return model.pool(X, H, offsets, np.arange(len(offsets) - 1))

    def transform(self, features, posteriors):
        """JCF signatures of images: signed square root (if set) and L2 normalisation of z.

        Parameters
        ----------
        features : list of (n_i, d) arrays, one per image, d = ``n_features_``.
        posteriors : list of (n_i, K) arrays (K = ``n_clusters_``), or None if the model
            was fitted without (K = 1).

        Returns
        -------
        (n_images, R) float32 (float64 for float64 features), unit rows (a zero z stays
        zero): compare by dot product.
        """
        z = self.pool(features, posteriors)
        return _normalise(z.astype(np.float64), self.sqrt_eps, self.signed_sqrt).astype(z.dtype)

    def fit_transform(self, features, posteriors, groups, together=None):
        return self.fit(features, posteriors, groups, together).transform(features, posteriors)

    # ------------------------------------------------------------------ storage

    def save(self, path):
        """Write the fitted model to the ``.npz`` file ``path`` (kind ``"jcf"``): the
        projectors, the hyper-parameters and the history (JSON)."""
        check_is_fitted(self)
        arrays = {"U": self.U_, "V": self.V_}
        if self.A_ is not None:
            arrays["A"], arrays["B"] = self.A_, self.B_
        params = {key: value for key, value in self.get_params().items() if key != "random_state"}
        state = {
            "params": params,
            "n_features": self.n_features_,
            "n_clusters": self.n_clusters_,
            "best_epoch": self.best_epoch_,
            "holdout_map": self.holdout_map_,
            "n_holdout_images": self.n_holdout_images_,
            "holdout_groups": self.holdout_groups_.tolist(),
            "history": self.history_,
        }
        write_model_file(path, "jcf", state=np.array(json.dumps(state)), **arrays)

    @classmethod
    def load(cls, path):
        """Read a model written by :meth:`save` (:class:`~ndir.errors.NdirInputError`
        naming ``path`` for a missing, unreadable or other file)."""
        arrays = read_model_file(path, "jcf", ["U", "V", "state"])
        state = json.loads(str(arrays["state"]))
        model = cls(**state["params"])
        model.U_, model.V_ = arrays["U"], arrays["V"]
        model.A_, model.B_ = arrays.get("A"), arrays.get("B")
        model.n_features_, model.n_clusters_ = state["n_features"], state["n_clusters"]
        model.best_epoch_, model.holdout_map_ = state["best_epoch"], state["holdout_map"]
        model.n_holdout_images_, model.history_ = state["n_holdout_images"], state["history"]
        model.n_iter_ = len(model.history_) - 1
        model.holdout_groups_ = np.asarray(state["holdout_groups"])
        return model

    def _thresholded(self, H):
        """The posteriors H (n, K) with those below ``posterior_threshold`` set to 0."""
        if self.posterior_threshold == 0 or H.shape[1] == 1:
            return H
        return np.where(H >= self.posterior_threshold, H, 0).astype(H.dtype, copy=False)

    def _check_transform(self, features, posteriors):
        if posteriors is None and self.n_clusters_ != 1:
            raise ValueError(f"posteriors: the model was fitted with K = {self.n_clusters_} codewords; pass them")
        return _check_images(features, posteriors, self.n_features_, self.n_clusters_)
