"""Stages of ``workflow/rules/jcf.smk``: Joint Codebook Factorization (seed 004) and the
second-order baselines it is about, on ndir's own local features.

Local features: each image's dense HOG (the descriptors every signature is built
from), a seeded subsample of ``per_image`` of them (:func:`ndir.jcf.subsample_descriptors`,
keyed by the image's row in the image table, so that the number of shards does not
change the sample), reduced by the descriptor PCA that every Fisher codebook of the
grid shares (``results/codebooks/pca.npz``): one set of ``x`` for every codebook size
K of ``seeds.jcf.codebook_sizes``. Only these ``x`` are stored; the soft assignments
``h(x)``, the posteriors of the GMM of the Fisher codebook fv-K, are recomputed when
loading, which costs less than reading them (:func:`load_features`).

Every representation is scored on the test split as everywhere else (Holidays mAP,
one query per group) and by Recall@1, 2, 4, 8 (every test image a query). Each
evaluation writes a JSON *record* with the keys of :data:`ndir.comparison.RECORD_KEYS`
and the JCF table's (:data:`JCF_KEYS`); the learned JCF models and the baselines (without
codebook and at each K) also enter the seeds comparison.
"""

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ndir import comparison, report
from ndir.atomic import atomic_output, write_csv, write_json
from ndir.codebooks import DescriptorPCA, load_codebook
from ndir.descriptors import image_descriptors_with
from ndir.encoding import gmm_posteriors
from ndir.errors import DatasetError, ResultFileError
from ndir.jcf import (
    CONFIG_GRID,
    CONFIG_PARAMETERS,
    jcf_params,
    pooling_madds,
    second_order_gram,
    subsample_descriptors,
)
from ndir.model_files import read_result_arrays
from ndir.report import table_caption, table_stem
from ndir.stages.common import check_shard_order, read_image_table, shard_rows, split_together

logger = logging.getLogger(__name__)

#: Keys a JCF record has beside :data:`ndir.comparison.RECORD_KEYS`: codebook size K
#: (1 without codebook), output dimension R and shared rank k (None where they do
#: not apply), learned parameters, signature dimensions, ``initialisation``
#: (``"none"`` for the baselines, ``"random"`` or ``"learned"``); ``family`` is one
#: of :data:`ndir.report.JCF_FAMILY_ORDER`.
JCF_KEYS = ("family", "K", "R", "k", "n_parameters", "dims", "initialisation")
#: The keys of the config's ``seeds.jcf`` section that a training reads: the estimator's
#: (:data:`ndir.jcf.CONFIG_PARAMETERS` but the grid of runs, which reaches a training
#: as its R and k).
TRAINING_KEYS = tuple(key for key in CONFIG_PARAMETERS if key not in CONFIG_GRID)


def training_settings(section):
    """The keys of :data:`TRAINING_KEYS` of the config's ``seeds.jcf`` section: the
    ``settings`` of :func:`train_jcf` (and rule train_jcf's, which reruns a training
    when one of them changes, not when a codebook size or a run is added)."""
    return {key: section[key] for key in TRAINING_KEYS}


# --------------------------------------------------------------------------- local features


def local_signature(K, d):
    """Input name of the JCF records: the local features seen through the Fisher
    codebook fv-K (``"local-fv-64"``), or for K = 1 (no codebook) the PCA-reduced
    dense HOG alone (``"local-pca-80"``, d = 80)."""
    return f"local-fv-{K}" if K > 1 else f"local-pca-{d}"


def shard_features(paths, rows, pca, per_image, seed, descriptors):
    """Local features ``x`` of images: subsampled dense HOG reduced by the descriptor PCA.

    Parameters
    ----------
    paths : image files; rows : their rows in the image table (the subsample's keys).
    pca : :class:`ndir.codebooks.DescriptorPCA`, the one every Fisher codebook holds.
    per_image, seed : see :func:`ndir.jcf.subsample_descriptors`.
    descriptors : the workflow's descriptor parameters (:func:`ndir.descriptors.image_descriptors_with`).

    Returns
    -------
    features : (sum n_i, d) float32, the images' rows one after the other.
    offsets : (n_images + 1,) int64, image ``j`` owning rows ``offsets[j]:offsets[j + 1]``.
    """
    parts = []
    for path, row in zip(paths, rows):
        local = image_descriptors_with(path, descriptors)
        if len(local) == 0:
            raise DatasetError(f"{path}: no local descriptor (image smaller than a HOG cell?); remove it")
        (sample,) = subsample_descriptors([local], per_image, seed, keys=[int(row)])
        parts.append(pca.transform(np.asarray(sample, dtype=np.float32)).astype(np.float32))
    d = pca.n_components
    features = np.concatenate(parts) if parts else np.zeros((0, d), dtype=np.float32)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts], dtype=np.int64)]).astype(np.int64)
    return features, offsets


def extract_jcf_features(images, pca, features, shard, n_shards, per_image, seed, descriptors):
    """Local features of one shard of the images (:func:`shard_features`), as an ``.npz``
    with ``image_id``, ``features``, ``offsets`` and ``pca_components`` (the (D, d)
    axes of the descriptor PCA ``pca``, by which :func:`load_features` checks that a
    codebook's posteriors are those of these features)."""
    table = read_image_table(images)
    rows = shard_rows(len(table), shard, n_shards)
    part = table.iloc[rows]
    model = DescriptorPCA.load(pca)
    X, offsets = shard_features(part["path"], range(rows.start, rows.stop), model, per_image, seed, descriptors)
    logger.info("shard %d: %d images, %d local features of dimension %d", shard, len(part), len(X), X.shape[1])
    with atomic_output(features) as tmp:
        np.savez(
            tmp,
            image_id=part["image_id"].to_numpy(dtype=str),
            features=X,
            offsets=offsets,
            pca_components=model.components_,
        )


def gather_jcf_features(images, shards, features):
    """Concatenate the shards' local features in the image table's order (checked, as
    that all shards used one descriptor PCA)."""
    parts, ids, offsets, start, axes = [], [], [np.zeros(1, dtype=np.int64)], 0, []
    for path in shards:
        npz = read_result_arrays(path, ["features", "image_id", "offsets", "pca_components"])
        parts.append(npz["features"])
        ids.append(npz["image_id"])
        offsets.append(npz["offsets"][1:] + start)
        axes.append(npz["pca_components"])
        start += len(npz["features"])
    check_shard_order(images, ids, "JCF local-feature", "extract_jcf_features")
    if any(not np.array_equal(a, axes[0]) for a in axes[1:]):
        raise ResultFileError(
            f"{features}: the shards were reduced by different descriptor PCAs; rerun extract_jcf_features"
        )
    with atomic_output(features) as tmp:
        np.savez(
            tmp,
            image_id=np.concatenate(ids),
            features=np.concatenate(parts),
            offsets=np.concatenate(offsets),
            pca_components=axes[0],
        )


def _fisher_codebook(path):
    model, name = load_codebook(path)
    if not name.startswith("fv-"):
        raise ResultFileError(f"{path}: JCF needs a Fisher codebook (its GMM posteriors are h(x)), not {name}")
    return model


def load_features(images, features, codebook=None, n_clusters=None):
    """Local features by split, with the codebook's posteriors recomputed.

    Returns ``{split: (X, H, groups, is_query)}`` for ``train`` and ``test``: ``X`` a
    list of (n_i, d) float32 arrays, ``H`` the list of their (n_i, K) posteriors under
    ``codebook`` (a path; :func:`ndir.jcf.codebook_features` gives the same), or None
    when ``codebook`` is None. A codebook whose descriptor PCA is not the one the
    features were reduced by, or whose K is not ``n_clusters`` (when given), is refused
    (ResultFileError).
    """
    table = read_image_table(images)
    npz = read_result_arrays(features)
    if "pca_components" not in npz:
        raise ResultFileError(f"{features}: written by an older ndir (no pca_components); rerun extract_jcf_features")
    ids, X, offsets, axes = npz["image_id"], npz["features"], npz["offsets"], npz["pca_components"]
    if not np.array_equal(ids, table["image_id"].to_numpy(dtype=str)):
        raise ResultFileError(f"{features}: images differ from {images}; rerun extract_jcf_features")
    model = None if codebook is None else _fisher_codebook(codebook)
    if model is not None and n_clusters is not None and model.n_clusters != n_clusters:
        raise ResultFileError(f"{codebook}: K = {model.n_clusters} codewords, the run asks for K = {n_clusters}")
    if model is not None and not np.array_equal(model.pca_.components_, axes):
        raise ResultFileError(
            f"{features}: features reduced by another descriptor PCA than {codebook}'s; rerun extract_jcf_features"
        )
    per_image = [X[offsets[j] : offsets[j + 1]] for j in range(len(table))]
    out = {}
    for name in ("train", "test"):
        mask = (table["split"] == name).to_numpy()
        chosen = [x for x, keep in zip(per_image, mask) if keep]
        H = None
        if model is not None:
            H = [gmm_posteriors(x, model.weights_, model.means_, model.variances_) for x in chosen]
        out[name] = (
            chosen,
            H,
            table.loc[mask, "group"].to_numpy(),
            table.loc[mask, "is_query"].to_numpy(dtype=bool),
        )
    return out


# --------------------------------------------------------------------------- records


def method_name(family, K, R=None, k=None):
    """Row label of a JCF record: ``"JCF-64-8 (K=64)"``, ``"factorised R=64 (K=1)"``..."""
    if family == "second-order pooling":
        return "second-order pooling"
    if family == "codebook second-order pooling":
        return f"codebook second-order pooling K={K}"
    if family == "factorised":
        return f"factorised R={R} (K=1)"
    return f"JCF-{R}" + ("" if k is None else f"-{k}") + f" (K={K})"


def jcf_record(family, signature, K, R, k, Y, groups, is_query, n_parameters, train_s, initialisation, ns_score=False):
    """A record (:data:`ndir.comparison.RECORD_KEYS` but the multiply-adds, and
    :data:`JCF_KEYS`) of test signatures ``Y`` (n_test, D), L2-normalised, compared by
    dot product: Holidays mAP and Recall@1, 2, 4, 8 (every test image a query), and
    with ``ns_score`` (on UKBench) the N-S score (:func:`ndir.comparison.record_quality`).

    ``initialisation``: ``"none"``, ``"random"`` or ``"learned"``.
    """
    Y = np.asarray(Y)
    scores = comparison.record_quality(Y, groups, is_query, ns=ns_score)
    return _record(family, signature, K, R, k, Y.shape[1], n_parameters, train_s, initialisation, scores)


def pooling_record(signature, K, dims, similarities, groups, is_query, ns_score=False):
    """The record of a second-order pooling baseline (K = 1: without codebook), which
    learns nothing, from the cosine similarities (n_test, n_test) of its ``dims``-long
    test signatures (:func:`ndir.jcf.second_order_gram`): as :func:`jcf_record`."""
    scores = comparison.record_quality(similarities, groups, is_query, "precomputed", ns_score)
    family = "second-order pooling" if K == 1 else "codebook second-order pooling"
    return _record(family, signature, K, None, None, dims, 0, 0.0, "none", scores)


def _record(family, signature, K, R, k, dims, n_parameters, train_s, initialisation, scores):
    method = method_name(family, K, R, k)
    if initialisation == "random":
        method += ", random init"
    return {
        "method": method,
        "family": family,
        "signature": signature,
        "K": int(K),
        "R": None if R is None else int(R),
        "k": None if k is None else int(k),
        "n_parameters": int(n_parameters),
        "dims": int(dims),
        "initialisation": initialisation,
        "query_dims": int(dims),
        "model_bytes": 4 * int(n_parameters),
        "db_bytes_per_image": 4 * int(dims),
        "train_s": float(train_s),
        **scores,
    }


def _finish(record, n_features, d, n_database):
    """Add the multiply-adds per query (:func:`pooling_madds`) and check the record."""
    K, R, k = record["K"], record["R"], record["k"]
    record["n_local_features"] = float(n_features)
    record["madds_per_query"] = float(pooling_madds(n_features, d, K, R, k, n_database))
    return comparison.check_record(record)


def evaluate_second_order(images, features, record, similarities, n_clusters, ns_score, codebook=None):
    """The record of second-order pooling on the test split, and its test images' (n_test,
    n_test) float64 cosine ``similarities`` (``.npy``, which readings and browse score
    again): without codebook
    (``n_clusters`` = 1, d (d+1)/2 dimensions) or with the Fisher codebook fv-K
    (``codebook``, K d (d+1)/2 dimensions); nothing is learned. With ``ns_score`` (on
    UKBench) the record carries the N-S score.

    Scored from the Gram matrix of the signatures, accumulated over blocks of
    codewords (:func:`ndir.jcf.second_order_gram`), so that memory stays bounded
    at every K; the record's ``pool_and_score_ms_per_image`` is that computation's time
    per test image.

    The plain signed square root (no smoothing: nothing is differentiated; the
    smoothing ``seeds.jcf.sqrt_eps`` is relative to JCF's unit-RMS z, while the
    entries of ``mean x x^T`` are around 1e-4 here, and smoothing them by 1e-4 cost
    2 points of mAP on the default run).
    """
    K = int(n_clusters)
    X, H, groups, is_query = load_features(images, features, codebook if K > 1 else None, K)["test"]
    d = X[0].shape[1]
    dims = K * d * (d + 1) // 2
    start = time.perf_counter()
    gram = second_order_gram(X, H)
    seconds = time.perf_counter() - start
    result = pooling_record(local_signature(K, d), K, dims, gram, groups, is_query, ns_score)
    result["pool_and_score_ms_per_image"] = 1e3 * seconds / len(X)
    with atomic_output(similarities) as tmp:
        np.save(tmp, gram)
    write_json(_finish(result, float(np.mean([len(x) for x in X])), d, len(X)), record)
    logger.info(
        "%s: %d dims, test mAP %.4f, Recall@1 %.4f", result["method"], dims, result["test_map"], result["recall_at_1"]
    )


def train_jcf(
    images,
    features,
    model,
    record,
    random_record,
    history,
    n_clusters,
    n_components,
    n_shared,
    settings,
    seed,
    ns_score,
    codebook=None,
):
    """Learn JCF-R (``n_shared`` None), JCF-R-k or, with ``n_clusters`` = 1, the
    factorised form without codebook, on the training split; score it and its random
    initialisation (the same estimator and seed, no epoch) on the test split.

    ``settings`` holds the config's ``seeds.jcf`` keys of :data:`TRAINING_KEYS`
    (:func:`training_settings`), which reach the estimator under the names of
    :data:`ndir.jcf.CONFIG_PARAMETERS`; ``seed`` is its random state.

    ``codebook``: the Fisher codebook fv-K whose posteriors are h(x) (K =
    ``n_clusters`` > 1; unused for K = 1); those under ``settings["posterior_threshold"]``
    count as 0 (:class:`ndir.jcf.JCF`). The hold-out that picks the epoch keeps the groups
    of one source photograph (the image table's ``together``) on one side.

    Writes the model (``.npz``, :meth:`ndir.jcf.JCF.save`), the learned and the
    random records (JSON; with the N-S score when ``ns_score``, on UKBench) and the
    training history (CSV, one row per epoch, 0 = the initialisation: loss, active
    triplets, hold-out mAP and Recall@1, seconds).
    """
    from ndir.jcf import JCF  # scikit-learn: for this stage only, not the module's others

    use_codebook = int(n_clusters) > 1
    splits = load_features(images, features, codebook if use_codebook else None, int(n_clusters))
    X_train, H_train, groups_train, _ = splits["train"]
    X_test, H_test, groups, is_query = splits["test"]
    together = split_together(images, "train")
    options = jcf_params(settings, n_components, n_shared, seed)
    family = "factorised" if not use_codebook else ("JCF" if n_shared is None else "JCF shared")
    n_features = float(np.mean([len(x) for x in X_test]))
    d = X_test[0].shape[1]
    signature = local_signature(int(n_clusters), d)

    start = time.perf_counter()
    learned = JCF(**options).fit(X_train, H_train, groups_train, together)
    train_s = time.perf_counter() - start
    random = JCF(**{**options, "n_epochs": 0}).fit(X_train, H_train, groups_train, together)

    results = {}
    for name, estimator, seconds in (("learned", learned, train_s), ("random", random, 0.0)):
        start = time.perf_counter()
        Y = estimator.transform(X_test, H_test)
        encode_s = time.perf_counter() - start
        result = jcf_record(
            family,
            signature,
            n_clusters,
            n_components,
            n_shared,
            Y,
            groups,
            is_query,
            estimator.n_parameters_,
            seconds,
            name,
            ns_score,
        )
        result.update(
            {
                "encode_ms_per_image": 1e3 * encode_s / len(X_test),
                "epochs": int(estimator.n_iter_),
                "best_epoch": int(estimator.best_epoch_),
                "holdout_map": float(estimator.holdout_map_),
                "n_holdout_images": int(estimator.n_holdout_images_),
                "margin": float(estimator.margin),
                "learning_rate": float(estimator.learning_rate),
            }
        )
        results[name] = _finish(result, n_features, d, len(X_test))
        logger.info("%s: %s", result["method"], result)
    with atomic_output(model) as tmp:
        learned.save(tmp)
    write_csv(pd.DataFrame(learned.history_), history)
    write_json(results["learned"], record)
    write_json(results["random"], random_record)


# --------------------------------------------------------------------------- report


def read_records(paths):
    """The JCF records (JSON files) as a frame, each checked."""
    return pd.DataFrame([comparison.read_record(path, JCF_KEYS) for path in paths])


def jcf_report(records, data_report, table, figure):
    """The JCF table (:func:`ndir.report.jcf_table`) and the Recall@1-against-parameters
    figure (:func:`ndir.figures.jcf_recall_figure`) from the runs' records."""
    from ndir import figures as plots  # matplotlib, only for the stages that draw

    frame = read_records(records)
    caption = table_caption(
        "JCF (seed 004) and second-order pooling on dense HOG: test mAP and Recall@1 (%)",
        data_report,
        paper_table=False,
    )
    report.write_table(report.jcf_table(frame), table_stem(table), caption=caption)
    plots.jcf_recall_figure(frame, stem=Path(figure[0]).with_suffix(""))
