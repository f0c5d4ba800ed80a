"""Joint Codebook Factorization (Jacob, Picard, Histace & Klein, "JCF", seed 004) and its baselines.

Images are sets of local features ``x`` in R^d (dense HOG reduced by the Fisher
codebook's descriptor PCA, d = 80) with soft assignments ``h(x)`` in R^K, the GMM
posteriors of that same Fisher codebook (:func:`codebook_features`). The codebook is
fixed and shared with the Fisher Vector path, so comparing JCF with the FV (and
with the other rows of the comparison) isolates the pooling: only the projections
below are learned.

Second-order pooling, no learning (the poster's "Problems"):

- without codebook, ``C = mean_x x x^T`` (:func:`second_order_pooling`);
- with codebook, one ``C_k = mean_x h_k(x) x x^T`` per codeword
  (:func:`codebook_second_order_pooling`), K times larger.

Joint codebook factorization. The raw second-order representation with a codebook
is ``y = h(x) ⊗ x ⊗ h(x) ⊗ x``; each output dimension ``z_i = <w_i, mean_x y>``
with ``w_i`` factorised in rank one, ``w_i = p_i ⊗ q_i``, and ``p_i = vec(U_i)``,
``q_i = vec(V_i)`` with ``U_i, V_i`` in R^{d x K} (vec stacks the K columns, so
``p_i[k d + a] = U_i[a, k]``, matching ``h ⊗ x`` in ``np.kron`` order)::

    z_i = mean_x (h(x)^T U_i^T x) (h(x)^T V_i^T x),        i = 1 .. R      (JCF-R)

2 R d K parameters. The shared-projector form (JCF-R-k) writes ``U_i = Ũ_i A^T``,
``V_i = Ṽ_i B^T`` with ``A, B`` in R^{K x k}, ``Ũ_i, Ṽ_i`` in R^{d x k}::

    z_i = mean_x (h(x)^T A Ũ_i^T x) (h(x)^T B Ṽ_i^T x)                      (JCF-R-k)

2 (K k + R d k) parameters. K = 1 with h ≡ 1 is the factorised bilinear pooling
without codebook, ``z_i = mean_x (u_i^T x)(v_i^T x)``. Then (both steps of the
signature, as for the baselines): signed square root of each ``z_i`` and L2
normalisation of ``z``; images are compared by the dot product of these unit vectors
(cosine).

Computation. With ``g(x) = h(x)`` (or ``A^T h(x)``, resp. ``B^T h(x)``) the lifted row
``g(x) ⊗ x`` of the image's n features times the (K d, R) matrix ``[p_1 .. p_R]``
gives all ``h^T U_i^T x`` at once: one (n, K d) x (K d, 2R) GEMM per image for U and V
together; the backward pass is the transposed GEMM. The lift is formed per block of
at most :data:`~ndir.jcf._factorised.LIFT_ELEMENTS` values, never for a whole data set. At n = 400, d = 80,
K = R = 64 that is 0.52 Gflop per image, about 10 ms on one core: 17 times the Fisher
Vector of the same codebook, in proportion to the flops; the shared JCF-64-8 costs 3
times the FV, K = 1 half of it (benchmarks/bench_jcf.py).

Learning (:class:`JCF`): triplet margin loss on the cosine of the normalised ``z``
with the hardest negative of each anchor in the batch
(:func:`hardest_negative_triplet_loss`), Adam with analytic gradients through the
mean pooling, a smoothed signed square root (:func:`signed_sqrt`) and the L2
normalisation, from a seeded Gaussian initialisation; the epoch with the best mAP on
held-out training groups (none sharing a source photograph with a group trained on,
given the photographs) is kept.

Layout. One private module per concern, as scikit-learn lays out an estimator family
(``sklearn/decomposition/_pca.py`` beside ``_base.py``): the public names are the ones
imported here, ``from ndir.jcf import JCF, ...``; a module of its own may change
without notice. They depend on each other in this order, none on a later one:

- ``_features``: the local features and soft assignments of an image, and the check
  that concatenates per-image arrays into rows (every pooling reads those rows);
- ``_normalisation``: the signed square root and the L2 normalisation of signatures,
  with their backward pass;
- ``_factorised``: factorised pooling, forward and backward, by blocks of lifted rows;
- ``_second_order``: the second-order baselines without learning (they reuse the lift);
- ``_loss``: the hardest-negative triplet loss and its gradient;
- ``_config``: the table from the workflow config's ``seeds.jcf`` keys to the
  estimator's parameters (:data:`CONFIG_PARAMETERS`, :func:`jcf_params`);
- ``_estimator``: :class:`JCF`, learning, model selection, encoding and its model file,
  loaded on first use of ``JCF`` (PEP 562): it imports scikit-learn, 0.7 s of the start
  of the workflow jobs that extract features or score the baselines without it;
- ``_cost``: multiply-adds per image of each pooling, for the cost tables.

The split keeps each formula beside its test's subject (tests/test_jcf.py follows the
same sections) and the 360-line estimator apart from the numerical kernels it calls.
"""

from ndir.jcf._config import CONFIG_GRID, CONFIG_OTHERS, CONFIG_PARAMETERS, jcf_params
from ndir.jcf._cost import pooling_madds
from ndir.jcf._factorised import factorised_pooling
from ndir.jcf._features import codebook_features, subsample_descriptors
from ndir.jcf._loss import hardest_negative_triplet_loss
from ndir.jcf._normalisation import signed_sqrt
from ndir.jcf._second_order import (
    codebook_second_order_pooling,
    second_order_gram,
    second_order_pooling,
    triangle_layout,
)

__all__ = [
    "CONFIG_GRID",
    "CONFIG_OTHERS",
    "CONFIG_PARAMETERS",
    "JCF",
    "codebook_features",
    "codebook_second_order_pooling",
    "factorised_pooling",
    "hardest_negative_triplet_loss",
    "jcf_params",
    "pooling_madds",
    "second_order_gram",
    "second_order_pooling",
    "signed_sqrt",
    "subsample_descriptors",
    "triangle_layout",
]


def __getattr__(name):
    if name != "JCF":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ndir.jcf._estimator import JCF

    globals()["JCF"] = JCF
    return JCF
