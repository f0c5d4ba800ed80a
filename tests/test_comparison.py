import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from ndir.comparison import (
    NS_KEY,
    check_record,
    database_bytes,
    dense_projection_record,
    mean_nonzeros,
    read_record,
    record_quality,
    sparse_dot_madds,
    sparse_projection_record,
    support,
)
from ndir.errors import ResultFileError
from ndir.evaluation import holidays_map, recall_at_k
from ndir.projection import projection_cost
from ndir.report import method_family, seeds_comparison_table

from .test_ns_score import on_circle


def test_sparse_dot_madds_counts_support_overlaps_brute_force():
    rng = np.random.default_rng(0)
    Q = sp.random(5, 40, density=0.3, random_state=1, format="csr")
    X = sp.random(9, 40, density=0.2, random_state=2, format="csr")
    Q.data[:3] = 0.0  # explicit zeros do not cost a multiply-add
    expected = [sum(len(set(Q[i].nonzero()[1]) & set(X[b].nonzero()[1])) for b in range(9)) for i in range(5)]
    np.testing.assert_array_equal(sparse_dot_madds(Q, X), expected)
    dense = rng.standard_normal((3, 40))
    # Against a dense database every non-zero of the query costs one per image.
    np.testing.assert_array_equal(sparse_dot_madds(Q, dense), [np.count_nonzero(Q[i].toarray()) * 3 for i in range(5)])


def test_mean_nonzeros_and_support():
    X = np.array([[0.0, 2.0, 0.0], [1.0, -1.0, 3.0]])
    assert mean_nonzeros(X) == 2.0
    np.testing.assert_array_equal(support(X).toarray(), (X != 0).astype(float))


def test_dense_support_counts_are_those_of_the_sparse_support():
    """Dense inputs are counted without a sparse copy of their support: the same values,
    bit for bit and of the same type, as the CSR path (the inputs made sparse), and
    the brute-force counts; zeros of either sign, negatives and whole zero columns."""
    rng = np.random.default_rng(4)
    Q = rng.standard_normal((6, 50)).astype(np.float32)
    X = rng.standard_normal((9, 50)).astype(np.float32)
    Q[rng.random(Q.shape) < 0.4] = 0.0
    X[rng.random(X.shape) < 0.3] = -0.0
    X[:, :5] = 0.0
    madds = sparse_dot_madds(Q, X)
    assert madds.dtype == np.float64 and madds.shape == (6,)
    np.testing.assert_array_equal(madds, sparse_dot_madds(sp.csr_array(Q), sp.csr_array(X)))
    expected = [sum(np.count_nonzero((q != 0) & (x != 0)) for x in X) for q in Q]
    np.testing.assert_array_equal(madds, expected)
    for M in (Q, X):
        mean = mean_nonzeros(M)
        assert type(mean) is float and mean == mean_nonzeros(sp.csr_array(M)) == np.count_nonzero(M) / len(M)
        assert database_bytes(M, sparse=False) == database_bytes(sp.csr_array(M), sparse=False)


def test_projection_records_hand_worked():
    quality = {"test_map": 0.5, "recall_at_1": 0.5}
    pca = dense_projection_record(
        "PCA R=2", "fv-8", n_features=10, n_components=2, n_database=4, quality=quality, train_s=0.1
    )
    assert pca["model_bytes"] == 4 * 10 * 3 and pca["madds_per_query"] == 10 * 2 + 2 * 4
    assert pca["db_bytes_per_image"] == 4 * 2
    U = np.zeros((10, 2))
    U[[1, 4, 7], [0, 1, 1]] = 1.0
    sparse = sparse_projection_record(
        "sparse rank", "fv-8", projection_cost(U), n_database=4, quality={**quality, "test_map": 0.6}, train_s=1.0
    )
    assert sparse["model_bytes"] == 8 * 3 + 4 * 3 and sparse["madds_per_query"] == 3 + 2 * 4
    assert sparse["recall_at_1"] == pca["recall_at_1"] == 0.5 and sparse["test_map"] == 0.6
    assert check_record(sparse) is sparse


def test_check_record_refuses_missing_keys_and_percentages():
    with pytest.raises(ValueError, match="lacks"):
        check_record({"method": "x", "test_map": 0.5})
    record = dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, {"test_map": 55.0, "recall_at_1": 0.5}, train_s=0.1)
    with pytest.raises(ValueError, match=r"test_map must be in \[0, 1\]"):
        check_record(record)
    without_recall = {key: value for key, value in record.items() if key != "recall_at_1"}
    with pytest.raises(ValueError, match=r"lacks \['recall_at_1'\]"):
        check_record({**without_recall, "test_map": 0.5})
    record = {**record, "test_map": 0.5, "recall_at_1": 87.6}
    with pytest.raises(ValueError, match=r"recall_at_1 must be in \[0, 1\]"):
        check_record(record)


def test_read_record_names_the_file_of_a_stale_or_wrong_record(results_path):
    """A rule's JSON record is read back checked: a missing key (also one of the
    caller's ``extra_keys``) or a percentage where a fraction belongs is refused as a
    ResultFileError that names the file and says to rerun."""
    record = dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, {"test_map": 0.55, "recall_at_1": 0.5}, train_s=0.1)
    good = results_path / "good.json"
    good.write_text(json.dumps(record))
    assert read_record(good) == record
    with pytest.raises(ResultFileError, match=r"good.json: record without \['K'\].*run `snakemake \S*good.json"):
        read_record(good, extra_keys=("K",))
    percent = results_path / "percent.json"
    percent.write_text(json.dumps({**record, "test_map": 55.0}))
    with pytest.raises(
        ResultFileError, match=r"percent.json: .*test_map must be in \[0, 1\]; delete it and run `snakemake "
    ):
        read_record(percent)


def test_comparison_table_orders_and_converts_units():
    records = pd.DataFrame(
        [
            dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, {"test_map": 0.5, "recall_at_1": 0.75}, 0.1),
            {
                "method": "tf-idf",
                "signature": "tfidf",
                "query_dims": 3.5,
                "model_bytes": 2048,
                "db_bytes_per_image": 28.0,
                "madds_per_query": 10.4,
                "test_map": 0.61234,
                "recall_at_1": 0.8125,
                "train_s": 0.01,
            },
        ]
    )
    table = seeds_comparison_table(records)
    assert list(table["Method"]) == ["tf-idf", "PCA R=2"]
    assert list(table["Input"]) == ["tf-idf", "FV-8"]
    assert table.loc[0, "Model KiB"] == 2.0 and table.loc[0, "Test mAP"] == pytest.approx(61.23)
    assert table.loc[0, "Madds per query"] == 10 and table.loc[0, "Bytes per db image"] == 28
    assert list(table["Recall@1"]) == [81.25, 75.0]
    assert "N-S" not in table  # not on UKBench: the records have no test_ns


def test_on_ukbench_the_comparison_table_shows_the_ns_score_beside_the_map():
    qualities = [
        {"test_map": 0.5, "recall_at_1": 0.75, NS_KEY: 3.5},
        {"test_map": 0.6, "recall_at_1": 0.8, NS_KEY: 3.125},
    ]
    records = pd.DataFrame(
        [dense_projection_record(f"PCA R={R}", "fv-8", 10, R, 4, quality, 0.1) for R, quality in zip((2, 4), qualities)]
    )
    table = seeds_comparison_table(records)
    assert list(table.columns[table.columns.get_loc("Test mAP") :][:3]) == ["Test mAP", "N-S", "Recall@1"]
    assert list(table["N-S"]) == [3.5, 3.12] and list(table["Test mAP"]) == [50.0, 60.0]


def test_record_quality_hand_worked_and_ns_only_when_asked():
    """The three groups of tests/test_ns_score.py (N-S 38/12): from the signatures and
    from their dot products alike; mAP and Recall@k those of ndir.evaluation."""
    X = on_circle([0, 5, 10, 15, 40, 45, 50, 100, 90, 95, 105, 110])
    groups = np.repeat([0, 1, 2], 4)
    is_query = np.arange(12) % 2 == 0
    expected = {
        "test_map": holidays_map(X, groups, is_query),
        **{f"recall_at_{k}": value for k, value in recall_at_k(X, groups, (1, 2, 4, 8)).items()},
    }
    assert record_quality(X, groups, is_query) == pytest.approx(expected)
    assert NS_KEY not in record_quality(X @ X.T, groups, is_query, "precomputed")
    assert record_quality(X @ X.T, groups, is_query, "precomputed") == pytest.approx(expected)
    # Every image a query: 38/12; the even ones only: 4, 4, 3, 3, 3, 3 (image 7 is no query).
    for queries, expected_ns in ((np.ones(12, bool), 38 / 12), (is_query, 20 / 6)):
        assert record_quality(X, groups, queries, ns=True)[NS_KEY] == pytest.approx(expected_ns)
        assert record_quality(X @ X.T, groups, queries, "precomputed", ns=True)[NS_KEY] == pytest.approx(expected_ns)
    with pytest.raises(ValueError, match="metric must be 'dot' or 'precomputed'"):
        record_quality(X, groups, is_query, "cosine")


def test_check_record_refuses_an_ns_score_out_of_4():
    quality = {"test_map": 0.5, "recall_at_1": 0.5, NS_KEY: 4.0}
    record = dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, quality, 0.1)
    assert check_record(record) is record
    for wrong in (0.9, 87.5):
        with pytest.raises(ValueError, match=r"test_ns must be in \[1, 4\] \(out of 4\)"):
            check_record({**record, NS_KEY: wrong})


def test_database_bytes():
    X = sp.csr_matrix(np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]))
    assert database_bytes(X, sparse=True) == 8 * 1.5
    assert database_bytes(X.toarray(), sparse=False) == 4 * 1.5


@pytest.mark.parametrize(
    ("method", "family"),
    [("PCA R=64", "PCA"), ("sparse rank R=64 τ=0.99", "sparse rank τ=0.99"), ("SOML-TG", "SOML-TG")],
)
def test_method_family(method, family):
    assert method_family(method) == family
