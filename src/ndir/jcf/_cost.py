"""Multiply-adds of encoding and scoring an image with each pooling."""


def pooling_madds(n_features, d, K, R=None, k=None, n_database=0):
    """Multiply-adds to encode one image of ``n_features`` local features and score it
    against ``n_database`` images. The codebook's posteriors, shared with the Fisher
    Vector of the same codebook, are not counted (as no row counts computing its
    input signature).

    - second-order pooling (``R`` None, ``K`` = 1): ``n T`` products and sums, T =
      d (d+1) / 2, then ``T`` per database image;
    - codebook second-order pooling (``R`` None, K > 1): ``n T`` products and the
      (K x n) by (n x T) pooling, ``K T`` per database image;
    - JCF (``R`` given): the lift ``h ⊗ x`` (n c d, c = K, or k after the (n x K) by
      (K x k) products ``A^T h``, ``B^T h``), the (n x c d) by (c d x 2R) projections,
      ``n R`` products, then ``R`` per database image.
    """
    T = d * (d + 1) // 2
    if R is None:
        encode = n_features * T * (1 if K == 1 else 1 + K)
        return encode + (T if K == 1 else K * T) * n_database
    if k is None:
        encode = n_features * K * d * (1 + 2 * R) + n_features * R
    else:
        encode = 2 * n_features * (K * k + k * d * (1 + R)) + n_features * R
    return encode + R * n_database
