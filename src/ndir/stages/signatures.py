"""Stages of ``workflow/rules/signatures.smk``: VLAD and Fisher Vector signatures of every image."""

import logging

import numpy as np

from ndir.atomic import atomic_output
from ndir.codebooks import encode_image, load_codebook
from ndir.descriptors import image_descriptors_with
from ndir.encoding import power_l2_normalise
from ndir.model_files import read_result_arrays
from ndir.stages.common import check_shard_order, read_shard

logger = logging.getLogger(__name__)


def encode_shard(images, codebooks, signatures, shard, n_shards, alpha, descriptors):
    """Encode one shard of the images with every codebook.

    Each image's local descriptors are computed once (and reduced once by the
    Fisher codebooks' shared PCA) and encoded with all codebooks, then power-
    (``alpha``) and L2-normalised. Writes an ``.npz`` with
    one (n_shard_images, D) float32 array per codebook name and ``image_id``.
    """
    part = read_shard(images, shard, n_shards)
    # Named by their contents (encoding and K), as gather_signatures names its signatures.
    models = {name: model for model, name in map(load_codebook, codebooks)}
    out = {name: np.zeros((len(part), model.dim), dtype=np.float32) for name, model in models.items()}
    for i, path in enumerate(part["path"]):
        for name, signature in encode_image(image_descriptors_with(path, descriptors), models).items():
            out[name][i] = signature
        if (i + 1) % 25 == 0:
            logger.info("shard %d: %d / %d images", shard, i + 1, len(part))
    for name in out:
        out[name] = power_l2_normalise(out[name], alpha=alpha)
    with atomic_output(signatures) as tmp:
        np.savez(tmp, image_id=part["image_id"].to_numpy(dtype=str), **out)


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
