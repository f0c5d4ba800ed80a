"""Stages of ``workflow/rules/codebooks.smk``: the descriptor sample and the codebooks fitted on it."""

import logging

import numpy as np

from ndir import codebooks
from ndir.atomic import atomic_output
from ndir.descriptors import image_descriptors_with
from ndir.encoding import blas_block_map
from ndir.model_files import read_result
from ndir.stages.common import read_image_table

logger = logging.getLogger(__name__)


#: Training images described at once by sample_descriptors (a few per thread).
SAMPLE_BATCH = 8


def sample_descriptors(images, sample, per_image, seed, descriptors):
    """Sample ``per_image`` local descriptors from each training image.

    Streams a few images at a time: only the sample, (n_train * per_image, 128) float32,
    and the descriptors of those images are held in memory. The images of a batch are
    described on as many threads as BLAS may use (the rule's ``threads``; OpenCV and
    NumPy release the GIL), then sampled in order: the same sample on any number.
    """
    table = read_image_table(images)
    paths = table.loc[table["split"] == "train", "path"].tolist()
    rng = np.random.default_rng(seed)
    parts = []
    with blas_block_map() as map_images:
        for first in range(0, len(paths), SAMPLE_BATCH):
            for local in map_images(
                lambda path: image_descriptors_with(path, descriptors), paths[first : first + SAMPLE_BATCH]
            ):
                take = min(per_image, len(local))
                parts.append(local[rng.choice(len(local), size=take, replace=False)])
    stacked = np.concatenate(parts).astype(np.float32, copy=False)
    with atomic_output(sample) as tmp:
        np.save(tmp, stacked)
    logger.info("sampled %d descriptors from %d training images", len(stacked), len(paths))


def fit_descriptor_pca(sample, pca, n_components):
    """Fit the PCA of local descriptors (paper: 80 dims, for the Fisher Vectors)."""
    model = codebooks.fit_descriptor_pca(read_result(sample), n_components=n_components)
    with atomic_output(pca) as tmp:
        model.save(tmp)


def fit_vlad_codebook(sample, codebook, n_clusters, n_components, n_iter, seed):
    """Fit k-means and the cluster-wise PCA of a VLAD-K codebook."""
    model = codebooks.fit_vlad_codebook(
        read_result(sample), n_clusters=n_clusters, n_components=n_components, seed=seed, n_iter=n_iter
    )
    with atomic_output(codebook) as tmp:
        model.save(tmp)


def fit_fisher_codebook(sample, pca, codebook, n_clusters, n_iter, seed):
    """Fit the diagonal GMM of an FV-K codebook on PCA-reduced descriptors."""
    model = codebooks.fit_fisher_codebook(
        read_result(sample), n_clusters=n_clusters, pca=codebooks.DescriptorPCA.load(pca), seed=seed, n_iter=n_iter
    )
    with atomic_output(codebook) as tmp:
        model.save(tmp)
