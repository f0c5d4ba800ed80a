import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfTransformer

from ndir import bovw
from ndir.bovw import (
    VisualVocabulary,
    fit_visual_vocabulary,
    inverse_document_frequency,
    inverted_file_lists,
    tfidf,
)
from ndir.errors import NdirInputError


@pytest.fixture(scope="module")
def vocabulary():
    rng = np.random.default_rng(0)
    centroids = rng.standard_normal((300, 16)).astype(np.float32)
    return VisualVocabulary(centroids, seed=0, n_iter=1, nprobe=inverted_file_lists(300))


@pytest.mark.parametrize("chunk", [None, 7])
def test_assign_with_every_list_is_the_exact_nearest_word(vocabulary, chunk, monkeypatch):
    """Visiting every inverted list, the exact nearest word (brute force); with
    chunk = 7 the 500 descriptors are searched in 72 calls (ASSIGN_CHUNK, a last one of
    3), which must give the same words."""
    if chunk is not None:
        monkeypatch.setattr(bovw, "ASSIGN_CHUNK", chunk)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((500, 16)).astype(np.float32)
    distances = ((X[:, None, :] - vocabulary.centroids_[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(vocabulary.assign(X), distances.argmin(axis=1))


def test_approximate_assignment_finds_the_word_of_a_noisy_copy():
    rng = np.random.default_rng(2)
    centroids = rng.standard_normal((2000, 32)).astype(np.float32)
    model = VisualVocabulary(centroids, seed=0, n_iter=1, nprobe=8)
    words = rng.integers(0, 2000, size=1000)
    X = centroids[words] + 0.01 * rng.standard_normal((1000, 32)).astype(np.float32)
    assert (model.assign(X) == words).mean() > 0.99


@pytest.mark.parametrize("nprobe", [1, 3, 8])
def test_assign_finds_the_words_that_faiss_inverted_file_finds(nprobe):
    """The list-by-list GEMM search visits the lists faiss's IndexIVFFlat visits: the
    same word for every descriptor but where two candidates are within float32
    rounding of each other."""
    import faiss

    rng = np.random.default_rng(4)
    centroids = rng.standard_normal((3000, 24)).astype(np.float32)
    model = VisualVocabulary(centroids, seed=0, n_iter=1, nprobe=nprobe)
    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(24), 24, inverted_file_lists(3000))
    index.cp.min_points_per_centroid = 1
    index.train(centroids)
    index.add(centroids)
    index.nprobe = nprobe
    X = rng.standard_normal((4000, 24)).astype(np.float32)
    _, expected = index.search(X, 1)
    words = model.assign(X)
    differ = np.flatnonzero(words != expected[:, 0])
    gap = np.abs(
        ((X[differ] - centroids[words[differ]]) ** 2).sum(1)
        - ((X[differ] - centroids[expected[differ, 0]]) ** 2).sum(1)
    )
    assert differ.size <= 2 and np.all(gap < 1e-4)


def test_encode_counts_words(vocabulary):
    X = vocabulary.centroids_[[3, 3, 7, 299]]
    counts = vocabulary.encode(X)
    assert counts.shape == (300,) and counts.dtype == np.float32
    assert counts[3] == 2 and counts[7] == 1 and counts[299] == 1 and counts.sum() == 4


def test_fit_visual_vocabulary_is_deterministic():
    rng = np.random.default_rng(3)
    sample = rng.standard_normal((2000, 8)).astype(np.float32)
    a = fit_visual_vocabulary(sample, 20, seed=5, n_iter=5, nprobe=2)
    b = fit_visual_vocabulary(sample, 20, seed=5, n_iter=5, nprobe=2)
    assert a.n_words == 20 and a.dim == 20
    np.testing.assert_array_equal(a.centroids_, b.centroids_)


def test_vocabulary_shrinks_to_what_the_sample_supports_and_says_so(caplog):
    """The issue's case: ~1 sampled descriptor per word. 5 per word at least."""
    sample = np.random.default_rng(4).standard_normal((1040, 8)).astype(np.float32)
    with caplog.at_level("WARNING"):
        fitted = fit_visual_vocabulary(sample, 1000, seed=0, n_iter=2, nprobe=2)
    assert fitted.n_words == 1040 // 5 == 208
    assert "seeds.bovw.vocabulary_size: 1000 words asked" in caplog.text and "fitting 208 words" in caplog.text
    caplog.clear()
    assert fit_visual_vocabulary(sample, 208, seed=0, n_iter=2, nprobe=2).n_words == 208
    assert "vocabulary_size" not in caplog.text
    with pytest.raises(NdirInputError, match="seeds.bovw.vocabulary_size"):
        fit_visual_vocabulary(sample[:9], 4, seed=0, n_iter=2, nprobe=2)


def test_save_load_round_trip(vocabulary, tmp_path):
    path = tmp_path / "vocabulary.npz"
    vocabulary.save(path)
    loaded = VisualVocabulary.load(path)
    np.testing.assert_array_equal(loaded.centroids_, vocabulary.centroids_)
    assert (loaded.seed, loaded.n_iter, loaded.nprobe) == (0, 1, vocabulary.nprobe)


def test_load_refuses_another_kind(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, kind=np.array("vlad"), centroids=np.zeros((2, 2)))
    with pytest.raises(NdirInputError, match="not a visual vocabulary"):
        VisualVocabulary.load(path)


def test_idf_hand_worked():
    counts = sp.csr_matrix(np.array([[2, 0, 1], [0, 0, 3], [1, 0, 0]], dtype=np.float32))
    # n = 3 images; df = (2, 0, 2); idf = ln((1 + n) / (1 + df)) + 1
    expected = np.log(4 / np.array([3, 1, 3])) + 1
    np.testing.assert_allclose(inverse_document_frequency(counts), expected)


def test_tfidf_matches_scikit_learn_and_is_unit_norm():
    counts = sp.random(30, 50, density=0.2, random_state=4, format="csr") * 10
    counts.data = np.ceil(counts.data)
    idf = inverse_document_frequency(counts)
    X = tfidf(counts, idf)
    reference = TfidfTransformer(norm="l2", smooth_idf=True).fit_transform(counts)
    assert sp.issparse(X) and X.dtype == np.float32
    np.testing.assert_allclose(X.toarray(), reference.toarray(), atol=1e-6)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
    np.testing.assert_allclose(norms[norms > 0], 1.0, atol=1e-6)


def test_never_more_inverted_lists_than_words_and_a_one_word_vocabulary_assigns_everything_to_it():
    assert [inverted_file_lists(n) for n in (1, 2, 3, 16, 100, 20_000)] == [1, 1, 2, 4, 10, 141]
    rng = np.random.default_rng(1)
    single = VisualVocabulary(rng.standard_normal((1, 16)).astype(np.float32), seed=0, n_iter=1, nprobe=8)
    assert np.array_equal(single.encode(rng.standard_normal((5, 16))), [5.0])


def test_a_small_vocabulary_builds_its_index_without_a_faiss_warning(capfd):
    """20 words in 4 inverted lists: faiss warns below its points-per-centroid floor,
    which the vocabulary lowers to one word per list."""
    centroids = np.random.default_rng(2).standard_normal((20, 16)).astype(np.float32)
    capfd.readouterr()
    VisualVocabulary(centroids, seed=0, n_iter=1, nprobe=4)
    assert capfd.readouterr().err == ""


def test_a_vocabulary_is_hashable_and_equal_only_to_itself(vocabulary):
    """Compared by identity (its centroids are an array): usable as a dict key."""
    same_words = VisualVocabulary(vocabulary.centroids_, vocabulary.seed, vocabulary.n_iter, vocabulary.nprobe)
    assert {vocabulary: 1, same_words: 2}[vocabulary] == 1
    assert vocabulary == vocabulary and vocabulary != same_words
