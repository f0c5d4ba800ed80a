"""The JCF stages (:mod:`ndir.stages.jcf`) and the ``seeds.jcf`` config checks, without Snakemake."""

import copy
import itertools
import json
import re
from types import SimpleNamespace

import cv2
import numpy as np
import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from ndir.codebooks import fit_descriptor_pca, fit_fisher_codebook
from ndir.config import check_config
from ndir.descriptors import image_descriptors_with
from ndir.errors import ConfigError, DatasetError, ResultFileError
from ndir.evaluation import holidays_map, recall_at_k
from ndir.jcf import (
    JCF,
    codebook_features,
    codebook_second_order_pooling,
    second_order_pooling,
    subsample_descriptors,
)
from ndir.report import jcf_table, method_family
from ndir.stages import jcf as stages_jcf
from ndir.stages.common import split_together
from ndir.stages.jcf import (
    evaluate_second_order,
    extract_jcf_features,
    gather_jcf_features,
    jcf_record,
    load_features,
    method_name,
    read_records,
    train_jcf,
)

from .conftest import REPO

DESCRIPTORS = {"max_width": 512, "step": 8, "cell_sizes": [4, 8]}
N_GROUPS, PER_GROUP, PER_IMAGE, D, K = 8, 3, 40, 8, 4


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    """8 groups of 3 noisy views of a blurred random texture (4 groups train, 4 test;
    training groups 0 and 1 "cut from one photo"), their image table and an FV-4
    codebook on PCA-8 fitted on the training images."""
    root = tmp_path_factory.mktemp("jcf_set")
    rng = np.random.default_rng(0)
    rows = []
    for group in range(N_GROUPS):
        base = cv2.GaussianBlur(rng.integers(0, 256, size=(64, 80)).astype(np.float32), (0, 0), 2.0)
        base = 255 * (base - base.min()) / (base.max() - base.min())
        for view in range(PER_GROUP):
            noisy = np.clip(base + rng.normal(0, 10, size=base.shape), 0, 255).astype(np.uint8)
            path = root / f"{group}_{view}.png"
            cv2.imwrite(str(path), noisy)
            rows.append(
                {
                    "image_id": f"{group}{view}",
                    "path": str(path),
                    "group": group,
                    "is_query": view == 0,
                    "split": "train" if group < N_GROUPS // 2 else "test",
                    "together": f"photo-{max(group, 1)}" if group < N_GROUPS // 2 else None,
                }
            )
    table = pd.DataFrame(rows)
    images = root / "images.csv"
    table.to_csv(images, index=False)
    local = [image_descriptors_with(path, DESCRIPTORS) for path in table["path"]]
    sample = np.concatenate([x for x, split in zip(local, table["split"]) if split == "train"])
    pca = fit_descriptor_pca(sample, n_components=D)
    pca.save(root / "pca.npz")
    codebook = root / "fv-4.npz"
    fit_fisher_codebook(sample, n_clusters=K, pca=pca, seed=0, n_iter=5).save(codebook)
    features = root / "features.npz"
    _features(images, root / "pca.npz", features, n_shards=2)
    return {
        "root": root, "images": images, "table": table, "pca": root / "pca.npz", "codebook": codebook,
        "local": local, "features": features, "training_sample": sample,
    }  # fmt: skip


def _features(images, pca, features, n_shards):
    shards = [str(features) + f".{s}.npz" for s in range(n_shards)]
    for s, path in enumerate(shards):
        extract_jcf_features(images, pca, path, s, n_shards, PER_IMAGE, 3, DESCRIPTORS)
    gather_jcf_features(images, shards, features)


def test_sample_does_not_depend_on_the_number_of_shards(small_set, tmp_path):
    with np.load(small_set["features"]) as two:
        expected = {key: two[key] for key in ("image_id", "features", "offsets", "pca_components")}
    for n_shards in (1, 3):
        _features(small_set["images"], small_set["pca"], tmp_path / f"{n_shards}.npz", n_shards)
        with np.load(tmp_path / f"{n_shards}.npz") as other:
            for key, value in expected.items():
                np.testing.assert_array_equal(other[key], value)
    # Every image keeps PER_IMAGE of its descriptors, drawn with its table row as key.
    assert list(np.diff(expected["offsets"])) == [min(PER_IMAGE, len(x)) for x in small_set["local"]]
    assert expected["features"].dtype == np.float32 and expected["features"].shape[1] == D


def test_an_image_without_local_descriptors_is_refused_by_name(small_set, tmp_path, monkeypatch):
    """An image whose dense HOG comes out empty stops its shard with a DatasetError that
    names it, and no shard file is written. (The descriptors refuse images too small for
    one descriptor first; descriptors that return none reach the stage's own check.)"""
    empty = str(small_set["table"]["path"][1])
    describe = stages_jcf.image_descriptors_with

    def descriptors(path, params):
        local = describe(path, params)
        return local[:0] if str(path) == empty else local

    monkeypatch.setattr(stages_jcf, "image_descriptors_with", descriptors)
    shard = tmp_path / "shard.npz"
    with pytest.raises(DatasetError, match=re.escape(f"{empty}: no local descriptor")):
        extract_jcf_features(small_set["images"], small_set["pca"], shard, 0, 2, PER_IMAGE, 3, DESCRIPTORS)
    assert not shard.exists()


def test_loaded_features_are_the_codebooks_view_of_the_keyed_sample(small_set):
    from ndir.codebooks import FisherCodebook

    codebook = FisherCodebook.load(small_set["codebook"])
    splits = load_features(small_set["images"], small_set["features"], small_set["codebook"])
    X, H, groups, is_query = splits["test"]
    row = int(np.flatnonzero(small_set["table"]["split"] == "test")[1])
    (sample,) = subsample_descriptors([small_set["local"][row]], PER_IMAGE, 3, keys=[row])
    x, h = codebook_features(codebook, sample)
    np.testing.assert_allclose(X[1], x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(H[1], h, rtol=1e-5, atol=1e-6)
    assert len(X) == len(groups) == 12 and is_query.sum() == 4
    assert load_features(small_set["images"], small_set["features"])["train"][1] is None


def test_features_of_another_image_table_are_refused(small_set, tmp_path):
    table = small_set["table"].iloc[::-1]
    images = tmp_path / "images.csv"
    table.to_csv(images, index=False)
    with pytest.raises(ResultFileError, match="rerun extract_jcf_features"):
        load_features(images, small_set["features"])


def test_a_codebook_on_another_descriptor_pca_is_refused(small_set, tmp_path):
    """The features are shared by every codebook size because all Fisher codebooks hold
    the same descriptor PCA; a codebook fitted on another PCA cannot give their h(x)."""
    sample = small_set["training_sample"]
    other = fit_fisher_codebook(sample, n_clusters=K, pca=fit_descriptor_pca(sample[::2], n_components=D), seed=0)
    other.save(tmp_path / "fv-4.npz")
    with pytest.raises(ResultFileError, match="another descriptor PCA"):
        load_features(small_set["images"], small_set["features"], tmp_path / "fv-4.npz")


def test_second_order_records(small_set, tmp_path, monkeypatch):
    clock = itertools.count(1000.0, 2.0)  # every reading of the stage's clock 2 s after the last
    monkeypatch.setattr(stages_jcf, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    paths = {n_clusters: tmp_path / f"second_order_pooling-K{n_clusters}.json" for n_clusters in (1, K)}
    grams = {n_clusters: path.with_suffix(".npy") for n_clusters, path in paths.items()}
    evaluate_second_order(small_set["images"], small_set["features"], paths[1], grams[1], n_clusters=1, ns_score=False)
    evaluate_second_order(
        small_set["images"],
        small_set["features"],
        paths[K],
        grams[K],
        n_clusters=K,
        codebook=small_set["codebook"],
        ns_score=False,
    )
    plain, with_codebook = (json.loads(path.read_text()) for path in paths.values())
    T = D * (D + 1) // 2
    assert (plain["dims"], with_codebook["dims"]) == (T, K * T)
    assert (plain["K"], with_codebook["K"]) == (1, K)
    assert plain["method"] == "second-order pooling"
    assert with_codebook["method"] == f"codebook second-order pooling K={K}"
    assert (plain["signature"], with_codebook["signature"]) == (f"local-pca-{D}", f"local-fv-{K}")
    for record in (plain, with_codebook):
        assert record["n_parameters"] == record["model_bytes"] == 0 and record["initialisation"] == "none"
        assert record["db_bytes_per_image"] == 4 * record["dims"]
        assert record["n_local_features"] == PER_IMAGE
        # Pooling and scoring timed together, per test image (12).
        assert record["pool_and_score_ms_per_image"] == pytest.approx(2e3 / 12)
    assert plain["madds_per_query"] == PER_IMAGE * T + T * 12
    assert with_codebook["madds_per_query"] == PER_IMAGE * T * (1 + K) + K * T * 12
    # Scored from the Gram matrix, as from the signatures themselves (cosine).
    X, H, groups, is_query = load_features(small_set["images"], small_set["features"], small_set["codebook"])["test"]
    for record, Y, gram in (
        (plain, second_order_pooling(X), grams[1]),
        (with_codebook, codebook_second_order_pooling(X, H), grams[K]),
    ):
        Y = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        # The test similarities it scored, kept for readings and browse.
        np.testing.assert_allclose(np.load(gram), Y @ Y.T, rtol=0, atol=1e-6)
        assert record["test_map"] == pytest.approx(holidays_map(Y, groups, is_query))
        recalls = recall_at_k(Y, groups, (1, 2, 4, 8))
        assert [record[f"recall_at_{n}"] for n in (1, 2, 4, 8)] == pytest.approx([recalls[n] for n in (1, 2, 4, 8)])


@pytest.mark.parametrize(
    ("K_run", "k", "learning_rate", "seed", "best_epoch", "patience"),
    # Settings (found by trying seeds) where the hold-out mAP peaks after epoch 0 and
    # before the last epoch, so that the learned model is neither the random start
    # nor the last epoch's; with a patience of 1 epoch the second run stops after
    # epoch 2 (of 3).
    [(K, 2, 0.2, 1, 2, None), (K, None, 0.1, 1, 1, 1), (1, None, 0.2, 5, 1, None)],
)
def test_train_jcf_writes_the_learned_model_and_its_random_initialisation(
    small_set, tmp_path, monkeypatch, K_run, k, learning_rate, seed, best_epoch, patience
):
    out = {name: tmp_path / f"run.{ext}" for name, ext in (("model", "npz"), ("record", "json"), ("history", "csv"))}
    out["random_record"] = tmp_path / "run-random.json"
    R = 3
    settings = dict(
        margin=0.3, learning_rate=learning_rate, epochs=3, epochs_no_change=patience, batch_groups=2,
        holdout_fraction=0.5, sqrt_eps=1e-4, posterior_threshold=0.0,
    )  # fmt: skip
    n_epochs = 3 if patience is None else best_epoch + patience
    codebook = small_set["codebook"] if K_run > 1 else None
    clock = itertools.count(1000.0, 2.0)  # every reading of the stage's clock 2 s after the last
    monkeypatch.setattr(stages_jcf, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    train_jcf(
        small_set["images"], small_set["features"], **out, codebook=codebook, n_clusters=K_run, n_components=R,
        n_shared=k, settings=settings, seed=seed, ns_score=False,
    )  # fmt: skip
    learned, random = (json.loads(out[name].read_text()) for name in ("record", "random_record"))
    parameters = 2 * R * D * K_run if k is None else 2 * (K_run * k + R * D * k)
    for record in (learned, random):
        assert (record["K"], record["R"], record["k"], record["dims"]) == (K_run, R, k, R)
        assert record["n_parameters"] == parameters and record["model_bytes"] == 4 * parameters
        # The hold-out: two of the four training groups of three images.
        assert record["n_holdout_images"] == 6
    assert learned["initialisation"] == "learned" and random["initialisation"] == "random"
    assert random["method"] == learned["method"] + ", random init" and random["train_s"] == 0
    assert (learned["epochs"], random["epochs"]) == (n_epochs, 0)
    # The fit alone is timed; encoding the 12 test images, for each model.
    assert learned["train_s"] == 2.0
    assert learned["encode_ms_per_image"] == random["encode_ms_per_image"] == pytest.approx(2e3 / 12)
    assert learned["family"] == {(1, None): "factorised", (K, None): "JCF", (K, 2): "JCF shared"}[(K_run, k)]
    assert learned["signature"] == random["signature"] == (f"local-fv-{K}" if K_run > 1 else f"local-pca-{D}")
    history = pd.read_csv(out["history"])
    assert list(history["epoch"]) == list(range(n_epochs + 1))
    maps = history["holdout_map"].to_numpy()
    assert learned["best_epoch"] == int(np.argmax(maps)) == best_epoch and random["best_epoch"] == 0
    assert maps[best_epoch] > maps[0] and maps[best_epoch] > maps[-1]
    assert learned["holdout_map"] == pytest.approx(maps[best_epoch])
    assert random["holdout_map"] == pytest.approx(maps[0])
    # Each record scores its own model on the test split: the saved one for the
    # learned record, the same estimator and seed without an epoch for the random one.
    splits = load_features(small_set["images"], small_set["features"], codebook)
    (X_train, H_train, groups_train, _), (X, H, groups, is_query) = splits["train"], splits["test"]
    start = JCF(
        n_components=R, n_shared=k, margin=0.3, learning_rate=learning_rate, n_epochs=0, batch_groups=2,
        holdout_fraction=0.5, sqrt_eps=1e-4, posterior_threshold=0.0, random_state=seed,
    )  # fmt: skip
    start.fit(X_train, H_train, groups_train, split_together(small_set["images"], "train"))
    model = JCF.load(out["model"])
    for record, estimator in ((learned, model), (random, start)):
        Y = estimator.transform(X, H)
        assert record["test_map"] == pytest.approx(holidays_map(Y, groups, is_query), abs=1e-12)
        recalls = recall_at_k(Y, groups, (1, 2, 4, 8))
        assert [record[f"recall_at_{n}"] for n in (1, 2, 4, 8)] == pytest.approx([recalls[n] for n in (1, 2, 4, 8)])
    assert learned["test_map"] != random["test_map"]
    assert not np.allclose(model.U_, start.U_)
    # The hold-out keeps training groups 0 and 1 (one photo) together: {0, 1} or {2, 3}.
    assert model.holdout_groups_.tolist() in ([0, 1], [2, 3])


def test_a_codebook_of_another_size_is_refused(small_set, tmp_path):
    out = {name: tmp_path / name for name in ("model", "record", "random_record", "history")}
    with pytest.raises(ResultFileError, match="K = 8"):
        train_jcf(
            small_set["images"], small_set["features"], **out, codebook=small_set["codebook"],
            n_clusters=8, n_components=2, n_shared=None, seed=0, ns_score=False,
            settings=dict(
                margin=0.3, learning_rate=0.05, epochs=1, epochs_no_change=None, batch_groups=2,
                holdout_fraction=0.0, sqrt_eps=1e-4, posterior_threshold=0.0,
            ),
        )  # fmt: skip


def test_jcf_record_hand_worked():
    Y = np.array([[1.0, 0.0], [0.9, np.sqrt(0.19)], [0.0, 1.0], [0.1, np.sqrt(0.99)]])
    groups, is_query = np.array([0, 0, 1, 1]), np.array([True, False, True, False])
    record = jcf_record("JCF shared", "local-fv-64", 64, 2, 8, Y, groups, is_query, 123, 1.5, "learned")
    assert record["method"] == "JCF-2-8 (K=64)" and record["test_map"] == 1.0
    assert record["recall_at_1"] == 1.0 and record["db_bytes_per_image"] == 8 and record["model_bytes"] == 492
    # Rows a, c, b, d: each image's nearest other image is now of the other group.
    swapped = jcf_record("factorised", "local-fv-64", 1, 2, None, Y[[0, 2, 1, 3]], groups, is_query, 8, 0, "random")
    assert swapped["method"] == "factorised R=2 (K=1), random init"
    assert swapped["recall_at_1"] == 0.0
    assert method_family(record["method"]) == "JCF-R-8 (K=64)"
    assert (
        method_family("JCF-64 (K=64)") == "JCF-R (K=64)"
        and method_family("factorised R=64 (K=1)") == "factorised (K=1)"
    )


def _record(method, family, K, R, k, initialisation, recall):
    return {
        "method": method, "family": family, "K": K, "R": R, "k": k, "n_parameters": 0 if R is None else 100,
        "dims": 10 if R is None else R, "initialisation": initialisation, "db_bytes_per_image": 40,
        "test_map": 0.5, "recall_at_1": recall, "train_s": 1.0, "best_epoch": 3,
    }  # fmt: skip


def test_jcf_table_puts_baselines_first_and_each_random_init_before_its_model():
    """Every record with its own figures (no two columns alike, K against R in the
    order), so that a column filled from another key or a sort key dropped shows."""
    rows = [
        # method, family, K, R, k, initialisation, parameters, dims, bytes, mAP, R@1, train s, best epoch
        ("JCF-4 (K=8)", "JCF", 8, 4, None, "learned", 256, 4, 16, 0.61, 0.52, 12.5, 7),
        ("JCF-4 (K=8), random init", "JCF", 8, 4, None, "random", 256, 4, 16, 0.33, 0.21, 0.0, 0),
        ("codebook second-order pooling K=8", "codebook second-order pooling", 8, None, None, "none", 0, 288, 1152,
         0.71, 0.68, 0.0, None),
        ("JCF-4-2 (K=8)", "JCF shared", 8, 4, 2, "learned", 96, 4, 16, 0.57, 0.49, 9.25, 3),
        ("JCF-8 (K=4)", "JCF", 4, 8, None, "learned", 512, 8, 32, 0.64, 0.55, 20.0, 11),
        ("second-order pooling", "second-order pooling", 1, None, None, "none", 0, 36, 144, 0.66, 0.59, 0.0, None),
        ("JCF-4-1 (K=8)", "JCF shared", 8, 4, 1, "learned", 80, 4, 16, 0.45, 0.38, 8.0, 5),
    ]  # fmt: skip
    keys = ["method", "family", "K", "R", "k", "initialisation", "n_parameters", "dims", "db_bytes_per_image"]
    keys += ["test_map", "recall_at_1", "train_s", "best_epoch"]
    table = jcf_table(pd.DataFrame([dict(zip(keys, row)) for row in rows]))
    # Baselines, then by family, K, R, k; a random init just before its model.
    order = [5, 2, 4, 1, 0, 6, 3]
    assert list(table.columns) == [
        "Method", "K", "R", "k", "Parameters", "Dims", "Bytes per db image", "Test mAP", "Recall@1", "Best epoch",
        "Train s",
    ]  # fmt: skip
    assert list(table["Method"]) == [rows[i][0] for i in order]
    assert table["K"].tolist() == [rows[i][2] for i in order]
    assert table["R"].tolist() == [pd.NA, pd.NA, 8, 4, 4, 4, 4]
    assert table["k"].tolist() == [pd.NA, pd.NA, pd.NA, pd.NA, pd.NA, 1, 2]
    assert table["Parameters"].tolist() == [rows[i][6] for i in order]
    assert table["Dims"].tolist() == [rows[i][7] for i in order]
    assert table["Bytes per db image"].tolist() == [rows[i][8] for i in order]
    assert table["Test mAP"].tolist() == pytest.approx([100 * rows[i][9] for i in order])
    assert table["Recall@1"].tolist() == pytest.approx([100 * rows[i][10] for i in order])
    assert table["Train s"].tolist() == [rows[i][11] for i in order]
    # Only learned models have a best epoch.
    assert table["Best epoch"].tolist() == [pd.NA, pd.NA, 11, pd.NA, 7, 5, 3]


def test_a_record_of_an_older_ndir_is_refused_naming_it(tmp_path):
    record = _record("JCF-4 (K=8)", "JCF", 8, 4, None, "learned", 0.6)
    record.update(signature="local-fv-8", query_dims=4, model_bytes=400, madds_per_query=10.0)
    good, stale = tmp_path / "good.json", tmp_path / "stale.json"
    good.write_text(json.dumps(record))
    stale.write_text(json.dumps({key: value for key, value in record.items() if key != "recall_at_1"}))
    assert len(read_records([good])) == 1
    with pytest.raises(ResultFileError, match=r"stale.json: .*\['recall_at_1'\]"):
        read_records([good, stale])


# --------------------------------------------------------------------------- config

DEFAULTS = yaml.safe_load((REPO / "config.yaml").read_text())


def _checked(**jcf):
    config = copy.deepcopy(DEFAULTS)
    config["seeds"]["jcf"].update(jcf)
    validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))
    check_config(config)
    return config


def test_default_jcf_config_is_accepted():
    assert _checked()["seeds"]["jcf"]["codebook_sizes"] == [64]
    sweep = yaml.safe_load((REPO / "configs/jcf_sweep.yaml").read_text())["seeds"]["jcf"]
    assert _checked(**sweep)["seeds"]["jcf"]["codebook_sizes"] == [64, 128, 256]


@pytest.mark.parametrize(
    ("jcf", "key", "says"),
    [
        ({"codebook_sizes": [64, 1024]}, "seeds.jcf.codebook_sizes", "[1024] without a Fisher codebook"),
        ({"shared_ranks": [8, 65]}, "seeds.jcf.shared_ranks", "[65] above the codebook's K = 64"),
        ({"codebook_sizes": [128, 64], "shared_ranks": [100]}, "seeds.jcf.shared_ranks", "K = 64 (the smallest"),
        ({"codebook_sizes": [64, 256], "descriptors_per_image": 200}, "seeds.jcf.descriptors_per_image", "K = 256"),
        ({"dims": [64, 4000]}, "seeds.jcf.dims", "[4000] above d (d+1) / 2 = 3240"),
        ({"descriptors_per_image": 50}, "seeds.jcf.descriptors_per_image", "K = 64"),
        ({"full_codebook": False, "without_codebook": False, "shared_ranks": []}, "seeds.jcf", "no model"),
    ],
)
def test_impossible_jcf_values_are_refused_naming_the_key(jcf, key, says):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as error:
        _checked(**jcf)
    assert says in str(error.value)


def test_jcf_codebooks_must_be_fisher_codebooks_of_the_grid():
    config = copy.deepcopy(DEFAULTS)
    config["signatures"]["encodings"] = ["vlad"]
    config["seeds"]["soml"]["signatures"] = ["tfidf"]
    config["seeds"]["comparison_signatures"] = ["vlad-256"]
    validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))
    with pytest.raises(ConfigError, match=r"seeds\.jcf\.codebook_sizes: \[64\] without a Fisher codebook"):
        check_config(config)
    config["seeds"]["jcf"]["enabled"] = False
    check_config(config)
    # The single codebook of older configs is gone: the schema names the key.
    config["seeds"]["jcf"]["codebook"] = "fv-64"
    with pytest.raises(Exception, match="'codebook' was unexpected"):
        validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))


def test_method_names_of_each_family():
    """As the JCF table prints them, the family given as a run-time string (from a record)."""
    family = "".join(["codebook ", "second-order pooling"])
    assert method_name(family, 64) == "codebook second-order pooling K=64"
    assert method_name("second-order pooling", 1) == "second-order pooling"
    assert method_name("factorised", 1, 16) == "factorised R=16 (K=1)"
    assert method_name("JCF", 64, 16) == "JCF-16 (K=64)" and method_name("JCF shared", 64, 16, 4) == "JCF-16-4 (K=64)"


def test_shards_reduced_by_different_pcas_are_refused(small_set, tmp_path):
    """Any shard whose descriptor PCA differs from the others', the first one included."""
    shards = [tmp_path / f"features.{s}.npz" for s in range(3)]
    for s, path in enumerate(shards):
        extract_jcf_features(small_set["images"], small_set["pca"], path, s, 3, PER_IMAGE, 3, DESCRIPTORS)
    arrays = dict(np.load(shards[0]))
    arrays["pca_components"] = arrays["pca_components"] * -1.0
    np.savez(shards[0], **arrays)
    with pytest.raises(ResultFileError, match="different descriptor PCAs"):
        gather_jcf_features(small_set["images"], shards, tmp_path / "features.npz")
    assert not (tmp_path / "features.npz").exists()


def test_stored_pooling_similarities_of_another_split_are_refused_naming_the_command(tmp_path):
    """readings and browse score second-order pooling from the similarities that
    evaluate_second_order wrote: a matrix of another number of test images (an older
    run's) is refused, naming the file and the command that writes it anew."""
    from ndir.stages.readings import pooling_similarities_of

    path = tmp_path / "results" / "jcf" / "second_order_pooling-K1.npy"
    path.parent.mkdir(parents=True)
    np.save(path, np.eye(4))
    np.testing.assert_array_equal(pooling_similarities_of(path, np.arange(4)), np.eye(4))
    with pytest.raises(ResultFileError, match=r"second_order_pooling-K1.npy: similarities of \(4, 4\) test images, "
                       r"not of the 5 of this run; delete it and run "
                       r"`snakemake results/jcf/second_order_pooling-K1.npy --cores all`"):  # fmt: skip
        pooling_similarities_of(path, np.arange(5))
