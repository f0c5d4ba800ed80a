"""Bag of visual words with tf-idf weighting (Sivic & Zisserman 2003).

The representation both sparse metric learners of the other seeds work on: Yan & Yu
(IJCNN 2013, Eq. 1-2) and SOML (Gao et al., AAAI 2014). Each local descriptor is
hard-assigned to its nearest visual word of a large vocabulary (k-means on the
training split); an image is the vector of its word counts.

- :func:`fit_visual_vocabulary` -> :class:`VisualVocabulary` (faiss k-means).
- :meth:`VisualVocabulary.encode` -> word counts of one image.
- :func:`inverse_document_frequency` and :func:`tfidf`: the weighting, with the
  document frequencies of the training split.

Assignment to 20,000 words by brute force costs 2 * n * 20,000 * 128 flops per image
(~150 GFLOP for 30k descriptors, over a second here); the vocabulary is therefore
searched through an inverted file over the words themselves, ``nprobe`` lists
visited per descriptor — the approximate assignment that large vocabularies are used
with in practice (Philbin et al. 2007 use randomised k-d trees). ``nprobe = nlist``
gives the exact nearest word. faiss trains the coarse quantizer and finds each
descriptor's lists (``IndexIVFFlat``); the words of the visited lists are then
compared list by list, one GEMM for all the descriptors that visit a list, where
faiss's scan computes one distance at a time: the same candidates, 2.4x faster for
the fine search (``benchmarks/bench_encoding.py``).
"""

import logging
import math
from dataclasses import dataclass, field

import faiss
import numpy as np
import scipy.sparse as sp

from ndir.codebooks import kmeans
from ndir.errors import NdirInputError
from ndir.model_files import read_model_file, write_model_file

logger = logging.getLogger(__name__)

ASSIGN_CHUNK = 65536
"""Descriptors per faiss search call."""

MIN_POINTS_PER_WORD = 5
"""Fewest sampled descriptors per visual word: below it most words would be fitted to
one or two descriptors (k-means degenerates into sampling), so the vocabulary is made
smaller. The default run samples 6.4 per word (128,800 for 20,000 words)."""


def inverted_file_lists(n_words):
    """Number of inverted lists for a vocabulary of ``n_words``: about sqrt(n).

    Each descriptor is compared with every list's centre, then with the words of the
    lists it visits: with 20,000 words, 141 lists of about 140 words at ``nprobe`` 3
    give 79 % of the default run's descriptors their exact nearest word in 87 ms an
    image, 4 sqrt(n) = 566 lists at ``nprobe`` 4 gave 76 % in 124 ms (one thread)."""
    return max(1, min(n_words, int(round(math.sqrt(n_words)))))


@dataclass(frozen=True, eq=False)
class VisualVocabulary:
    """Visual words (k-means centroids) and the index that assigns descriptors to them.

    Attributes
    ----------
    centroids_ : (n_words, 128) float32, the words, in descriptor space.
    seed, n_iter : the k-means settings it was fitted with.
    nprobe : inverted lists visited per descriptor when assigning.
    """

    centroids_: np.ndarray
    seed: int
    n_iter: int
    nprobe: int
    _quantizer: faiss.Index = field(init=False, repr=False)
    _lists: list = field(init=False, repr=False)

    def __post_init__(self):
        n_words, dim = self.centroids_.shape
        nlist = inverted_file_lists(n_words)
        quantizer = faiss.IndexFlatL2(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist)
        # faiss seeds its coarse k-means itself (fixed seed): the lists are reproducible.
        index.cp.min_points_per_centroid = 1
        index.train(self.centroids_)
        index.add(self.centroids_)
        # Each list's words: their ids (ascending), their centroids and half their
        # squared norms, for the GEMM of the fine search.
        lists = []
        for number in range(nlist):
            size = index.invlists.list_size(number)
            ids = np.sort(faiss.rev_swig_ptr(index.invlists.get_ids(number), size).astype(np.int64))
            words = self.centroids_[ids]
            lists.append((ids, np.ascontiguousarray(words.T), 0.5 * np.einsum("kd,kd->k", words, words)))
        index.own_fields = False  # the quantizer outlives the index
        object.__setattr__(self, "_quantizer", quantizer)
        object.__setattr__(self, "_lists", lists)

    @property
    def n_words(self):
        return self.centroids_.shape[0]

    @property
    def dim(self):
        """Length of the bag-of-words vector: the vocabulary size."""
        return self.n_words

    def assign(self, descriptors):
        """Index (n,) int64 of the (approximately) nearest word of each descriptor (n, 128):
        the nearest among the words of its ``nprobe`` nearest inverted lists, as
        faiss's ``IndexIVFFlat`` finds it (ties to the lowest word id; distances
        within float32 rounding of each other may go either way)."""
        descriptors = np.ascontiguousarray(descriptors, dtype=np.float32)
        words = np.empty(len(descriptors), dtype=np.int64)
        for start in range(0, len(descriptors), ASSIGN_CHUNK):
            block = descriptors[start : start + ASSIGN_CHUNK]
            words[start : start + len(block)] = self._nearest_words(block)
        return words

    def _nearest_words(self, block):
        """Nearest word (n,) of each row of ``block`` (n, d) among its visited lists."""
        nprobe = min(self.nprobe, len(self._lists))
        _, visited = self._quantizer.search(block, nprobe)
        # The (descriptor, list) pairs grouped by list: a descriptor visits a list once.
        pairs = visited.ravel()
        order = np.argsort(pairs, kind="stable")
        bounds = np.searchsorted(pairs[order], np.arange(len(self._lists) + 1))
        best_score = np.full(len(block), -np.inf, dtype=np.float32)
        best_word = np.zeros(len(block), dtype=np.int64)
        for number, (ids, words_T, half_sq_norms) in enumerate(self._lists):
            rows = order[bounds[number] : bounds[number + 1]] // nprobe
            if rows.size == 0 or ids.size == 0:
                continue
            # argmin |x - w|^2 = argmax x.w - |w|^2 / 2
            scores = block[rows] @ words_T
            scores -= half_sq_norms
            at = scores.argmax(axis=1)
            score = scores[np.arange(rows.size), at]
            better = (score > best_score[rows]) | ((score == best_score[rows]) & (ids[at] < best_word[rows]))
            best_score[rows[better]] = score[better]
            best_word[rows[better]] = ids[at[better]]
        return best_word

    def encode(self, descriptors):
        """Word counts (n_words,) float32 of one image's descriptors (n, 128)."""
        return np.bincount(self.assign(descriptors), minlength=self.n_words).astype(np.float32)

    def save(self, path):
        """Write the vocabulary to the ``.npz`` file ``path`` (kind ``"bovw"``)."""
        write_model_file(
            path, "bovw", centroids=self.centroids_, seed=self.seed, n_iter=self.n_iter, nprobe=self.nprobe
        )

    @classmethod
    def load(cls, path):
        """Read a vocabulary written by :meth:`save`; NdirInputError if ``path`` is not one."""
        arrays = read_model_file(path, "bovw", ["centroids", "seed", "n_iter", "nprobe"])
        return cls(arrays["centroids"], int(arrays["seed"]), int(arrays["n_iter"]), int(arrays["nprobe"]))


def fit_visual_vocabulary(sample, n_words, seed=0, n_iter=5, nprobe=3, kmeans_threads=2):
    """k-means vocabulary on a descriptor sample (n, 128) float32 (faiss).

    ``kmeans_threads``: threads of the k-means, which set its last bits
    (:func:`ndir.codebooks.kmeans`); 2, the count of the default run's vocabulary.

    ``n_words`` words, or ``n // MIN_POINTS_PER_WORD`` when the sample is too small
    for that many (logged as a WARNING naming ``seeds.bovw.vocabulary_size``; the
    vocabulary's ``n_words`` says what was fitted). NdirInputError when the sample
    cannot support even two words.
    """
    supported = len(sample) // MIN_POINTS_PER_WORD
    if n_words > supported:
        if supported < 2:
            raise NdirInputError(
                f"seeds.bovw.vocabulary_size: {len(sample)} sampled descriptors cannot support a visual "
                f"vocabulary ({MIN_POINTS_PER_WORD} per word at least); use more training images or "
                "raise codebooks.descriptors_per_image"
            )
        logger.warning(
            "seeds.bovw.vocabulary_size: %d words asked, but %d sampled descriptors support %d at %d per word; "
            "fitting %d words (raise codebooks.descriptors_per_image or use more training images for more)",
            n_words,
            len(sample),
            supported,
            MIN_POINTS_PER_WORD,
            supported,
        )
        n_words = supported
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    centroids = kmeans(sample, n_words, seed, n_iter, kmeans_threads)
    return VisualVocabulary(centroids, seed, n_iter, nprobe)


def inverse_document_frequency(counts):
    """Smoothed idf (n_words,) float64 of word counts (n_images, n_words), sparse or dense.

    ``idf_w = ln((1 + n) / (1 + df_w)) + 1`` with ``df_w`` the number of images where
    word ``w`` occurs — scikit-learn's ``TfidfTransformer(smooth_idf=True)``, whose
    smoothing keeps words unseen in training finite (they get the largest weight).
    """
    # scikit-learn here and in tfidf, not at the top: the encoding jobs count words
    # without it (0.7 s of imports a job).
    from sklearn.feature_extraction.text import TfidfTransformer

    return TfidfTransformer(smooth_idf=True).fit(counts).idf_


def tfidf(counts, idf):
    """L2-normalised tf-idf vectors (n_images, n_words) float32 CSR of word counts.

    Yan & Yu, Eq. 2: ``w * I / ||w * I||`` with ``I`` the term frequencies and ``w``
    the idf; L1-normalising the counts first would not change the result.
    """
    from sklearn.preprocessing import normalize

    weighted = sp.csr_matrix(counts, dtype=np.float64).multiply(np.asarray(idf)[None, :])
    return normalize(sp.csr_matrix(weighted), norm="l2").astype(np.float32)
