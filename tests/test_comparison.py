import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from ndir.comparison import (
    check_record,
    read_record,
    database_bytes,
    dense_projection_record,
    mean_nonzeros,
    sparse_dot_madds,
    sparse_projection_record,
    support,
)
from ndir.errors import ResultFileError
from ndir.projection import projection_cost
from ndir.report import method_family, seeds_comparison_table


def test_sparse_dot_madds_counts_support_overlaps_brute_force():
    rng = np.random.default_rng(0)
    Q = sp.random(5, 40, density=0.3, random_state=1, format="csr")
    X = sp.random(9, 40, density=0.2, random_state=2, format="csr")
    Q.data[:3] = 0.0  # explicit zeros do not cost a multiply-add
    expected = [
        sum(len(set(Q[i].nonzero()[1]) & set(X[b].nonzero()[1])) for b in range(9)) for i in range(5)
    ]
    np.testing.assert_array_equal(sparse_dot_madds(Q, X), expected)
    dense = rng.standard_normal((3, 40))
    # Against a dense database every non-zero of the query costs one per image.
    np.testing.assert_array_equal(sparse_dot_madds(Q, dense), [np.count_nonzero(Q[i].toarray()) * 3 for i in range(5)])


def test_mean_nonzeros_and_support():
    X = np.array([[0.0, 2.0, 0.0], [1.0, -1.0, 3.0]])
    assert mean_nonzeros(X) == 2.0
    np.testing.assert_array_equal(support(X).toarray(), (X != 0).astype(float))


def test_projection_records_hand_worked():
    recall = {"recall_at_1": 0.5}
    pca = dense_projection_record(
        "PCA R=2", "fv-8", n_features=10, n_components=2, n_database=4, test_map=0.5, train_s=0.1, recall=recall
    )
    assert pca["model_bytes"] == 4 * 10 * 3 and pca["madds_per_query"] == 10 * 2 + 2 * 4
    assert pca["db_bytes_per_image"] == 4 * 2
    U = np.zeros((10, 2))
    U[[1, 4, 7], [0, 1, 1]] = 1.0
    sparse = sparse_projection_record(
        "sparse rank", "fv-8", projection_cost(U), n_database=4, test_map=0.6, train_s=1.0, recall=recall
    )
    assert sparse["model_bytes"] == 8 * 3 + 4 * 3 and sparse["madds_per_query"] == 3 + 2 * 4
    assert sparse["recall_at_1"] == pca["recall_at_1"] == 0.5
    assert check_record(sparse) is sparse


def test_check_record_refuses_missing_keys_and_percentages():
    with pytest.raises(ValueError, match="lacks"):
        check_record({"method": "x", "test_map": 0.5})
    record = dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, test_map=55.0, train_s=0.1, recall={"recall_at_1": 0.5})
    with pytest.raises(ValueError, match=r"test_map must be in \[0, 1\]"):
        check_record(record)
    without_recall = {key: value for key, value in record.items() if key != "recall_at_1"}
    with pytest.raises(ValueError, match=r"lacks \['recall_at_1'\]"):
        check_record({**without_recall, "test_map": 0.5})
    record = {**record, "test_map": 0.5, "recall_at_1": 87.6}
    with pytest.raises(ValueError, match=r"recall_at_1 must be in \[0, 1\]"):
        check_record(record)


def test_read_record_names_the_file_of_a_stale_or_wrong_record(tmp_path):
    """A rule's JSON record is read back checked: a missing key (also one of the
    caller's ``extra_keys``) or a percentage where a fraction belongs is refused as a
    ResultFileError that names the file and says to rerun."""
    record = dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, test_map=0.55, train_s=0.1, recall={"recall_at_1": 0.5})
    good = tmp_path / "good.json"
    good.write_text(json.dumps(record))
    assert read_record(good) == record
    with pytest.raises(ResultFileError, match=r"good.json: record without \['K'\].*run `snakemake \S*good.json"):
        read_record(good, extra_keys=("K",))
    percent = tmp_path / "percent.json"
    percent.write_text(json.dumps({**record, "test_map": 55.0}))
    with pytest.raises(ResultFileError, match=r"percent.json: .*test_map must be in \[0, 1\]; delete it and run `snakemake "):
        read_record(percent)


def test_comparison_table_orders_and_converts_units():
    records = pd.DataFrame(
        [
            dense_projection_record("PCA R=2", "fv-8", 10, 2, 4, 0.5, 0.1, {"recall_at_1": 0.75}),
            {"method": "tf-idf", "signature": "tfidf", "query_dims": 3.5, "model_bytes": 2048,
             "db_bytes_per_image": 28.0, "madds_per_query": 10.4, "test_map": 0.61234, "recall_at_1": 0.8125,
             "train_s": 0.01},
        ]
    )
    table = seeds_comparison_table(records)
    assert list(table["Method"]) == ["tf-idf", "PCA R=2"]
    assert list(table["Input"]) == ["tf-idf", "FV-8"]
    assert table.loc[0, "Model KiB"] == 2.0 and table.loc[0, "Test mAP"] == pytest.approx(61.23)
    assert table.loc[0, "Madds per query"] == 10 and table.loc[0, "Bytes per db image"] == 28
    assert list(table["Recall@1"]) == [81.25, 75.0]


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
