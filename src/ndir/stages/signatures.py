"""Stages of ``workflow/rules/signatures.smk``: VLAD and Fisher Vector signatures of every
image, and its visual words when the seeds run."""

import logging

import numpy as np
import scipy.sparse as sp

from ndir import bovw
from ndir.atomic import atomic_output
from ndir.codebooks import encode_image, load_codebook
from ndir.descriptors import image_descriptors_with
from ndir.encoding import power_l2_normalise
from ndir.model_files import read_result_arrays
from ndir.stages.common import check_shard_order, read_shard

logger = logging.getLogger(__name__)


def encode_shard(images, codebooks, signatures, shard, n_shards, alpha, descriptors, vocabulary=None, counts=None):
    """Encode one shard of the images with every codebook and, given the seeds' visual
    ``vocabulary``, count their visual words.

    Each image's local descriptors are computed once (and reduced once by the
    Fisher codebooks' shared PCA) and encoded with all codebooks, then power-
    (``alpha``) and L2-normalised: ``signatures``, an ``.npz`` with one
    (n_shard_images, D) float32 array per codebook name and ``image_id`` (not written
    when None). The same descriptors give the word ``counts`` (:func:`write_word_counts`)
    of the bag of words (:class:`ndir.bovw.VisualVocabulary`), rather than a second
    pass that computes them again (52 ms of the 185 ms an image takes here on the
    default run).
    """
    part = read_shard(images, shard, n_shards)
    # Named by their contents (encoding and K), as gather_signatures names its signatures.
    models = {name: model for model, name in map(load_codebook, codebooks)}
    words = bovw.VisualVocabulary.load(vocabulary) if vocabulary else None
    out = {name: np.zeros((len(part), model.dim), dtype=np.float32) for name, model in models.items()}
    rows = []
    for i, path in enumerate(part["path"]):
        local = image_descriptors_with(path, descriptors)
        for name, signature in encode_image(local, models).items():
            out[name][i] = signature
        if words is not None:
            rows.append(sp.csr_array(words.encode(local)[None, :]))
        if (i + 1) % 25 == 0:
            logger.info("shard %d: %d / %d images", shard, i + 1, len(part))
    image_ids = part["image_id"].to_numpy(dtype=str)
    if signatures:
        for name in out:
            out[name] = power_l2_normalise(out[name], alpha=alpha)
        with atomic_output(signatures) as tmp:
            np.savez(tmp, image_id=image_ids, **out)
    if words is not None:
        write_word_counts(counts, image_ids, rows, words.n_words)


def write_word_counts(counts, image_ids, rows, n_words):
    """Write the word counts of a shard's images: ``rows``, one (1, n_words) sparse row
    per image of ``image_ids``, as the arrays of a float32 CSR matrix in the ``.npz``
    ``counts`` (with ``image_id``), which rule gather_bovw stacks."""
    matrix = sp.vstack(rows, format="csr") if rows else sp.csr_array((0, n_words), dtype=np.float32)
    with atomic_output(counts) as tmp:
        np.savez(
            tmp,
            image_id=image_ids,
            data=matrix.data.astype(np.float32),
            indices=matrix.indices.astype(np.int32),
            indptr=matrix.indptr.astype(np.int64),
            shape=np.asarray(matrix.shape),
        )


def gather_signatures(images, shards, signatures, name):
    """Concatenate one signature's shards into an (n_images, D) float32 ``.npy``.

    Rows follow the image table's order, which is checked.
    """
    parts, ids = [], []
    for path in shards:
        arrays = read_result_arrays(path, [name, "image_id"])
        parts.append(arrays[name])
        ids.append(arrays["image_id"])
    check_shard_order(images, ids, "signature", "encode_shard")
    with atomic_output(signatures) as tmp:
        np.save(tmp, np.concatenate(parts))
