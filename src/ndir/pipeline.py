"""The workflow's stages as functions of file paths.

Each Snakemake rule has a two-line script in ``workflow/scripts/`` that hands its
named ``input``, ``output`` and ``params`` to one function here through
:func:`run_rule`. The functions read their inputs, call the library and write
their outputs atomically, so they can be run and tested without Snakemake.
"""

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import bovw, comparison, data, descriptors, encoding, evaluation, report
from .codebooks import (
    DescriptorPCA,
    fit_descriptor_pca as _fit_descriptor_pca,
    fit_fisher_codebook as _fit_fisher_codebook,
    fit_vlad_codebook as _fit_vlad_codebook,
)
from .errors import ConfigError, DatasetError, NdirInputError
from .index import load_codebook
from .projection import PCAProjection

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- running


def run_rule(smk, stage):
    """Run ``stage`` with a Snakemake job's named input, output and params.

    Logging goes to the job's log file; BLAS and OpenMP get the job's threads.
    Bad input (:class:`~ndir.errors.NdirInputError`) ends the job with its one-line
    message instead of a traceback.
    """
    from threadpoolctl import threadpool_limits

    logging.basicConfig(
        filename=smk.log[0] if smk.log else None,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    kwargs = {**dict(smk.input.items()), **dict(smk.output.items())}
    kwargs.update(smk.params.items())
    with threadpool_limits(limits=smk.threads):
        try:
            stage(**kwargs)
        except NdirInputError as error:
            logger.error("%s", error)
            print(f"ndir: error: {error}", file=sys.stderr)
            sys.exit(1)


@contextmanager
def atomic_output(path):
    """Yield a temporary path beside ``path``; move it into place on success.

    A job that fails leaves no half-written result behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _write_json(obj, path):
    with atomic_output(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def _write_csv(df, path):
    with atomic_output(path) as tmp:
        df.to_csv(tmp, index=False)


def read_image_table(path):
    """Read the image table written by :func:`index_dataset`."""
    return pd.read_csv(path, dtype={"image_id": str, "group_name": str})


# --------------------------------------------------------------------------- data


def build_embedded_dataset(folder, n_groups, view_size, allow_overlap, seed):
    """Write the embedded near-duplicate set into ``folder`` (Holidays naming)."""
    with _atomic_folder(folder) as tmp:
        table = data.build_embedded_dataset(
            tmp, n_groups=n_groups, seed=seed, view_size=view_size, allow_overlap=allow_overlap
        )
    logger.info("built %d images in %d groups into %s", len(table), table["group"].nunique(), folder)


@contextmanager
def _atomic_folder(folder):
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        yield tmp
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def index_dataset(images, skipped, report, kind, root, train_fraction, keep_together, seed, descriptors, max_dim):
    """Scan, check and split a data set; write the image table and a data report.

    Parameters
    ----------
    images, skipped, report : str
        Output paths: the image table (CSV, one row per kept image, with its
        ``split``), the skipped images with reasons (CSV) and a JSON summary.
    kind, root : str
        Data set kind (``embedded``, ``holidays``, ``ukbench``, ``folders``) and folder.
    train_fraction : float
        Share of groups in the training split.
    keep_together : dict or None
        ``{"table": CSV, "column": name}``: images with equal labels stay in one
        split (:func:`ndir.data.keep_together_labels`); None splits by group alone.
    seed : int
        Seed of the group split.
    descriptors : dict
        Descriptor parameters; images too small for one patch are skipped.
    max_dim : int
        Largest PCA output dimension asked for: the training split must hold more images.
    """
    table, ignored = data.scan_dataset(kind, root)
    min_size = descriptors_min_size(descriptors)
    kept, skipped_rows = data.validate_images(table, min_size=min_size)
    if kept.empty:
        raise DatasetError(f"{root}: no usable image groups left after checking the images; see {skipped}")
    together = (
        None
        if keep_together is None
        else data.keep_together_labels(kept, root, keep_together["table"], keep_together["column"])
    )
    split = data.split_groups(kept, train_fraction=train_fraction, seed=seed, together=together)
    n_train = int((split["split"] == "train").sum())
    if n_train <= max_dim:
        raise ConfigError(
            f"baseline.dims: the training split holds {n_train} images, but PCA to R = {max_dim} "
            f"needs more than {max_dim}; use a larger data set (embedded.n_groups) or smaller dims"
        )
    summary = {
        "kind": kind,
        "root": str(root),
        "n_images_found": int(len(table)),
        "n_files_ignored": int(len(ignored)),
        "n_images_skipped": int(len(skipped_rows)),
        "skipped_reasons": {str(k): int(v) for k, v in skipped_rows.get("reason", pd.Series(dtype=str)).value_counts().items()},
        "n_images": int(len(split)),
        "n_groups": int(split["group"].nunique()),
        "kept_together": None if keep_together is None else keep_together["column"],
        "splits": {
            name: {"n_groups": int(part["group"].nunique()), "n_images": int(len(part))}
            for name, part in split.groupby("split")
        },
    }
    _write_csv(split, images)
    _write_csv(pd.concat([skipped_rows, ignored], ignore_index=True), skipped)
    _write_json(summary, report)
    logger.info("data set: %s", summary)


def descriptors_min_size(params):
    """Smallest image side (px) that fits one descriptor patch at the finest scale."""
    return descriptors.min_image_size(params["cell_sizes"])


# --------------------------------------------------------------------------- codebooks


def sample_descriptors(images, sample, per_image, seed, descriptors):
    """Sample ``per_image`` local descriptors from each training image.

    Streams image by image: only the sample, (n_train * per_image, 128) float32,
    is ever held in memory.
    """
    table = read_image_table(images)
    train = table[table["split"] == "train"]
    rng = np.random.default_rng(seed)
    parts = []
    for path in train["path"]:
        local = _image_descriptors(path, descriptors)
        take = min(per_image, len(local))
        parts.append(local[rng.choice(len(local), size=take, replace=False)])
    stacked = np.concatenate(parts).astype(np.float32, copy=False)
    with atomic_output(sample) as tmp:
        np.save(tmp, stacked)
    logger.info("sampled %d descriptors from %d training images", len(stacked), len(train))


def _image_descriptors(path, params):
    return descriptors.image_descriptors(
        path, max_width=params["max_width"], step=params["step"], cell_sizes=tuple(params["cell_sizes"])
    )


def fit_descriptor_pca(sample, pca, n_components):
    """Fit the PCA of local descriptors (paper: 80 dims, for the Fisher Vectors)."""
    model = _fit_descriptor_pca(np.load(sample), n_components=n_components)
    with atomic_output(pca) as tmp:
        model.save(tmp)


def fit_vlad_codebook(sample, codebook, n_clusters, n_components, n_iter, seed):
    """Fit k-means and the cluster-wise PCA of a VLAD-K codebook."""
    model = _fit_vlad_codebook(np.load(sample), n_clusters=n_clusters, n_components=n_components, seed=seed, n_iter=n_iter)
    with atomic_output(codebook) as tmp:
        model.save(tmp)


def fit_fisher_codebook(sample, pca, codebook, n_clusters, n_iter, seed):
    """Fit the diagonal GMM of an FV-K codebook on PCA-reduced descriptors."""
    model = _fit_fisher_codebook(np.load(sample), n_clusters=n_clusters, pca=DescriptorPCA.load(pca), seed=seed, n_iter=n_iter)
    with atomic_output(codebook) as tmp:
        model.save(tmp)


def codebook_name(path):
    """``results/codebooks/fv-64.npz`` -> ``fv-64``."""
    return Path(path).name.removesuffix(".npz")


# --------------------------------------------------------------------------- signatures


def encode_shard(images, codebooks, signatures, shard, n_shards, alpha, descriptors):
    """Encode one shard of the images with every codebook.

    Each image's local descriptors are computed once and encoded with all
    codebooks, then power- (``alpha``) and L2-normalised. Writes an ``.npz`` with
    one (n_shard_images, D) float32 array per codebook name and ``image_id``.
    """
    table = read_image_table(images)
    rows = shard_rows(len(table), shard, n_shards)
    part = table.iloc[rows]
    models = {codebook_name(path): load_codebook(path)[0] for path in codebooks}
    out = {name: np.zeros((len(part), model.dim), dtype=np.float32) for name, model in models.items()}
    for i, path in enumerate(part["path"]):
        local = _image_descriptors(path, descriptors)
        for name, model in models.items():
            out[name][i] = model.encode(local)
        if (i + 1) % 25 == 0:
            logger.info("shard %d: %d / %d images", shard, i + 1, len(part))
    for name in out:
        out[name] = encoding.power_l2_normalise(out[name], alpha=alpha)
    with atomic_output(signatures) as tmp:
        np.savez(tmp, image_id=part["image_id"].to_numpy(dtype=str), **out)


def shard_rows(n_images, shard, n_shards):
    """Row slice of shard ``shard`` of ``n_shards`` contiguous, near-equal shards."""
    return slice(shard * n_images // n_shards, (shard + 1) * n_images // n_shards)


def gather_signatures(images, shards, signatures, name):
    """Concatenate one signature's shards into an (n_images, D) float32 ``.npy``.

    Rows follow the image table's order, which is checked.
    """
    table = read_image_table(images)
    parts, ids = [], []
    for path in shards:
        with np.load(path) as npz:
            parts.append(npz[name])
            ids.append(npz["image_id"])
    if not np.array_equal(np.concatenate(ids), table["image_id"].to_numpy(dtype=str)):
        raise DatasetError(f"{images}: the signature shards do not match the image table; rerun encode_shard")
    with atomic_output(signatures) as tmp:
        np.save(tmp, np.concatenate(parts))


# --------------------------------------------------------------------------- evaluation


def split_rows(images, X):
    """Rows of ``X`` (one per image of the table ``images``) by split.

    Returns ``{split: (X_split, groups, is_query)}`` for ``train`` and ``test``;
    ``X`` may be a NumPy array (returned as contiguous float32) or a sparse matrix.
    """
    table = read_image_table(images)
    if X.shape[0] != len(table):
        raise DatasetError(f"{images}: {len(table)} images but {X.shape[0]} signatures; rerun the encoding rules")
    out = {}
    for name in ("train", "test"):
        mask = (table["split"] == name).to_numpy()
        rows = X[mask] if sp.issparse(X) else np.ascontiguousarray(X[mask], dtype=np.float32)
        out[name] = (
            rows,
            table.loc[mask, "group"].to_numpy(),
            table.loc[mask, "is_query"].to_numpy(dtype=bool),
        )
    return out


def split_signatures(images, signatures):
    """Load signatures and the image table; return {split: (X, groups, is_query)}."""
    return split_rows(images, np.load(signatures, mmap_mode="r"))


def evaluate_pca_baseline(images, signatures, results, dims):
    """Test-split mAP of full signatures and of PCA-R reductions fitted on train.

    Writes a CSV with columns ``signature, encoding, K, dim, R, map`` (R = 0 for
    the full signature, mAP in [0, 1]) — the rows of the paper's Table I.
    """
    name = codebook_name(signatures).removesuffix(".npy")
    encoding_name, K = name.split("-")
    splits = split_signatures(images, signatures)
    X_train, _, _ = splits["train"]
    X_test, groups, is_query = splits["test"]
    rows = [{"R": 0, "map": evaluation.holidays_map(X_test, groups, is_query)}]
    for R in dims:
        projection = PCAProjection(n_components=R).fit(X_train)
        rows.append({"R": R, "map": evaluation.holidays_map(projection.transform(X_test), groups, is_query)})
    out = pd.DataFrame(rows)
    out.insert(0, "dim", X_test.shape[1])
    out.insert(0, "K", int(K))
    out.insert(0, "encoding", encoding_name)
    out.insert(0, "signature", name)
    _write_csv(out, results)
    logger.info("%s: %s", name, out.to_dict("records"))


def table1(results, data_report, table, kind):
    """Assemble Table I (mAP in % on the test split) in CSV, Markdown and LaTeX."""
    rows = pd.concat([pd.read_csv(path) for path in results], ignore_index=True)
    paper = report.load_paper_table1() if kind == "holidays" else None
    frame = report.table1(rows, paper=paper)
    stem = Path(table[0]).with_suffix("")
    title = "Table I: mAP (%) of VLAD and FV signatures and of their PCA reductions to R dims"
    report.write_table(frame, stem, caption=_caption(title, data_report, paper is not None))


def _caption(title, data_report, with_paper):
    """``title``, the data set and test split it was measured on, and why the paper's
    values are absent when they are."""
    with open(data_report) as f:
        summary = json.load(f)
    test = summary["splits"].get("test", {})
    caption = (
        f"{title}, {summary['kind']} data, test split "
        f"({test.get('n_groups', 0)} groups, {test.get('n_images', 0)} images)."
    )
    if not with_paper:
        caption += " The paper's values (INRIA Holidays) are shown only when the data set is Holidays."
    return caption


# --------------------------------------------------------------------------- sparse projectors

#: How reduced signatures are scored in the history and tables: ``dot`` is the
#: similarity the projector is trained for, ``y_q^T y_j`` (Eq. 2); ``l2`` first
#: L2-normalises the reduced signatures, as the PCA baseline of Table I does.
SCORINGS = ("dot", "l2")


def reduced_map(projector, X, groups, is_query):
    """mAP of ``X U`` under each scoring of :data:`SCORINGS`, as a dict."""
    Y = X @ projector.components_.toarray()
    norms = np.linalg.norm(Y, axis=1, keepdims=True)
    Y_l2 = np.divide(Y, norms, out=np.zeros_like(Y), where=norms > 0)
    return {
        "dot": evaluation.holidays_map(Y, groups, is_query),
        "l2": evaluation.holidays_map(Y_l2, groups, is_query),
    }


def train_sparse_projector(
    images,
    signatures,
    projector,
    history,
    n_components,
    sparsity,
    max_iter,
    queries_per_step,
    margin,
    tol,
    renormalize,
    line_search,
    eval_every,
    seed,
):
    """Learn a sparse rank projector (Algorithm 1) on the training split.

    Writes the projector (``.npz``, see :mod:`ndir.projection.storage`) and its
    history (CSV): one row per iteration with the objective (Eq. 13), the objective
    before that step's l0 projection and the step size, and every
    ``eval_every`` steps the train and test mAP under both scorings
    (``{train,test}_map_{dot,l2}``, in [0, 1]). Iteration 0 is the initial PCA
    projectors after the l0 projection: the "thresholded PCA, no learning" ablation.
    """
    from .projection import SparseRankProjector, save_projector

    splits = split_signatures(images, signatures)
    X_train, groups_train, is_query_train = splits["train"]
    measured = []
    evaluation_seconds = []

    def record(iteration, model):
        start = time.perf_counter()
        row = {"iteration": iteration}
        for name, (X, groups, is_query) in splits.items():
            for scoring, value in reduced_map(model, X, groups, is_query).items():
                row[f"{name}_map_{scoring}"] = value
        measured.append(row)
        logger.info("iteration %d: %s", iteration, row)
        evaluation_seconds.append(time.perf_counter() - start)

    model = SparseRankProjector(
        n_components=n_components,
        sparsity=sparsity,
        max_iter=max_iter,
        n_queries_per_step=queries_per_step,
        margin=margin,
        tol=tol,
        renormalize=renormalize,
        line_search=line_search,
        callback=record,
        callback_every=eval_every,
        n_jobs=1,
        random_state=seed,
    )
    start = time.perf_counter()
    model.fit(X_train, groups_train, queries=is_query_train)
    # The fit's own time: the mAP measurements of the callback are not training.
    fit_seconds = time.perf_counter() - start - sum(evaluation_seconds)
    # Row t: the state after t steps; the objective at U_{t-1} - mu G before its l0
    # projection, and the step mu that led there.
    curve = pd.DataFrame(
        {
            "iteration": np.arange(len(model.objective_)),
            "objective": model.objective_,
            "objective_before_projection": np.concatenate([[np.nan], model.objective_unprojected_]),
            "step_size": np.concatenate([[np.nan], model.step_sizes_]),
        }
    )
    curve = curve.merge(pd.DataFrame(measured), on="iteration", how="left")
    name = codebook_name(signatures).removesuffix(".npy")
    with atomic_output(projector) as tmp:
        save_projector(
            tmp,
            model.components_,
            signature=name,
            n_features=int(X_train.shape[1]),
            n_components=int(n_components),
            sparsity=float(sparsity),
            n_nonzero=int(model.n_nonzero_),
            n_iter=int(model.n_iter_),
            margin=float(margin),
            renormalize=bool(renormalize),
            line_search=str(line_search),
            seed=int(seed),
            fit_seconds=round(fit_seconds, 3),
        )
    _write_csv(curve, history)


def read_history(path):
    """A training history and its run's (signature, R, tau) from its path."""
    path = Path(path)
    R, tau = path.stem.removeprefix("R").split("-tau")
    return path.parent.name, int(R), float(tau), pd.read_csv(path)


def final_maps(histories, split="test", scoring="l2"):
    """Long table ``signature, encoding, K, R, tau, initial, final`` (mAP in [0, 1]).

    ``initial`` is the thresholded PCA projector (iteration 0), ``final`` the learned
    one at the last iterate; ``scoring`` is one of :data:`SCORINGS`.
    """
    rows = []
    for path in histories:
        signature, R, tau, curve = read_history(path)
        maps = curve[f"{split}_map_{scoring}"].dropna()
        encoding_name, K = signature.split("-")
        rows.append(
            {
                "signature": signature,
                "encoding": encoding_name,
                "K": int(K),
                "R": R,
                "tau": tau,
                "initial": maps.iloc[0],
                "final": maps.iloc[-1],
            }
        )
    return pd.DataFrame(rows)


def table2(histories, data_report, table, table_dot, ablation, kind):
    """Table II (test mAP of the sparse projectors), scored like Table I (L2-normalised
    reductions) and by the raw dot product, and the thresholded-PCA ablation."""
    maps = {scoring: final_maps(histories, scoring=scoring) for scoring in SCORINGS}
    paper = report.load_paper_table2() if kind == "holidays" else None
    titles = {
        "l2": "Table II: mAP (%) of signatures reduced by sparse rank projectors (L2-normalised, as Table I)",
        "dot": "Table II scored by the raw dot product y_q.y_j the projectors are trained for: mAP (%)",
    }
    for scoring, files in (("l2", table), ("dot", table_dot)):
        caption = _caption(titles[scoring], data_report, paper is not None)
        report.write_table(report.table2(maps[scoring], paper=paper), Path(files[0]).with_suffix(""), caption=caption)
    title = "mAP (%) of sparse rank projectors against PCA hard-thresholded to the same sparsity"
    ablation_table = report.table2_ablation(maps["l2"], maps["dot"], final_maps(histories, "train", "dot"))
    report.write_table(ablation_table, Path(ablation[0]).with_suffix(""), caption=_caption(title, data_report, True))


def cost_table(images, signatures, projectors, histories, table):
    """Storage and projection cost of each (R, tau) projector, with its test mAP."""
    from .projection import load_projector, projection_cost, projection_latency

    X_test = split_signatures(images, signatures)["test"][0]
    maps = final_maps(histories).set_index(["R", "tau"])["final"]
    rows = []
    for path in projectors:
        U, meta = load_projector(path)
        row = {"R": meta["n_components"], "tau": meta["sparsity"]}
        row.update(projection_cost(U))
        row.update(projection_latency(U, X_test))
        row["test_map"] = maps.loc[(row["R"], row["tau"])]
        rows.append(row)
    report.write_table(report.cost_table(pd.DataFrame(rows), signature=meta["signature"]), Path(table[0]).with_suffix(""))


def convergence_figures(fig2, fig3, fig4, figures, signature):
    """Figures 2-4 of the paper from training histories, as PNG and PDF."""
    from . import figures as plots

    out = {Path(path).stem: Path(path).with_suffix("") for path in figures}
    plots.convergence_figure([read_history(p) for p in fig2], vary="R", signature=signature, stem=out["fig2"])
    plots.convergence_figure([read_history(p) for p in fig3], vary="tau", signature=signature, stem=out["fig3"])
    plots.generalisation_figure([read_history(p) for p in fig4], signature=signature, stem=out["fig4"])


# --------------------------------------------------------------------------- the other seeds


def fit_visual_vocabulary(sample, vocabulary, n_words, n_iter, nprobe, seed):
    """Fit the visual vocabulary (k-means, faiss) of the bag of visual words."""
    model = bovw.fit_visual_vocabulary(np.load(sample), n_words, seed=seed, n_iter=n_iter, nprobe=nprobe)
    with atomic_output(vocabulary) as tmp:
        model.save(tmp)


def encode_bovw_shard(images, vocabulary, counts, shard, n_shards, descriptors):
    """Word counts of one shard of the images, as the arrays of a CSR matrix in an ``.npz``.

    Each image's descriptors are recomputed (tens of ms) rather than shared with
    :func:`encode_shard`, so that Table I does not wait for the 20,000-word k-means.
    """
    table = read_image_table(images)
    part = table.iloc[shard_rows(len(table), shard, n_shards)]
    model = bovw.VisualVocabulary.load(vocabulary)
    rows = []
    for i, path in enumerate(part["path"]):
        rows.append(sp.csr_array(model.encode(_image_descriptors(path, descriptors))[None, :]))
        if (i + 1) % 25 == 0:
            logger.info("bovw shard %d: %d / %d images", shard, i + 1, len(part))
    matrix = sp.vstack(rows, format="csr") if rows else sp.csr_array((0, model.n_words), dtype=np.float32)
    with atomic_output(counts) as tmp:
        np.savez(
            tmp,
            image_id=part["image_id"].to_numpy(dtype=str),
            data=matrix.data.astype(np.float32),
            indices=matrix.indices.astype(np.int32),
            indptr=matrix.indptr.astype(np.int64),
            shape=np.asarray(matrix.shape),
        )


def gather_bovw(images, shards, counts):
    """Stack the word-count shards into one (n_images, n_words) CSR ``.npz`` (scipy)."""
    table = read_image_table(images)
    parts, ids = [], []
    for path in shards:
        with np.load(path) as npz:
            parts.append(sp.csr_array((npz["data"], npz["indices"], npz["indptr"]), shape=tuple(npz["shape"])))
            ids.append(npz["image_id"])
    if not np.array_equal(np.concatenate(ids), table["image_id"].to_numpy(dtype=str)):
        raise DatasetError(f"{images}: the word-count shards do not match the image table; rerun encode_bovw_shard")
    with atomic_output(counts) as tmp:
        sp.save_npz(tmp, sp.csr_matrix(sp.vstack(parts, format="csr")))


def _bovw_splits(images, counts):
    """Word counts by split: ``{split: (counts CSR, groups, is_query)}``."""
    return split_rows(images, sp.load_npz(counts).tocsr())


def _tfidf_splits(images, counts):
    """tf-idf vectors by split, the idf from the training split's counts."""
    splits = _bovw_splits(images, counts)
    idf = bovw.inverse_document_frequency(splits["train"][0])
    return {name: (bovw.tfidf(C, idf), groups, is_query) for name, (C, groups, is_query) in splits.items()}


def _learning_splits(images, signatures):
    """Splits of the learners' input: tf-idf for the word counts (``.npz``), else VLAD/FV."""
    if str(signatures).endswith(".npz"):
        return _tfidf_splits(images, signatures)
    return split_signatures(images, signatures)


def _test_scores(score_pairs, X, groups, is_query):
    """Holidays mAP on the test split of a model's ``score_pairs(Q, X)``."""
    query_rows = np.flatnonzero(is_query)
    scores = np.asarray(score_pairs(X[query_rows], X), dtype=np.float64)
    return evaluation.map_from_scores(scores, query_rows, groups), X[query_rows]


def evaluate_tfidf(images, counts, record):
    """Record of the tf-idf baseline: cosine of tf-idf vectors, no learning."""
    splits = _bovw_splits(images, counts)
    start = time.perf_counter()
    idf = bovw.inverse_document_frequency(splits["train"][0])
    train_s = time.perf_counter() - start
    C_test, groups, is_query = splits["test"]
    X_test = bovw.tfidf(C_test, idf)
    test_map, Q = _test_scores(lambda A, B: (A @ B.T).toarray(), X_test, groups, is_query)
    madds = comparison.mean_nonzeros(Q) + comparison.sparse_dot_madds(Q, X_test).mean()
    result = {
        "method": "tf-idf",
        "signature": "tfidf",
        "query_dims": comparison.mean_nonzeros(Q),
        "model_bytes": 4 * len(idf),
        "db_bytes_per_image": comparison.database_bytes(X_test, sparse=True),
        "madds_per_query": float(madds),
        "test_map": test_map,
        "train_s": train_s,
        "n_words": len(idf),
    }
    _write_json(comparison.check_record(result), record)
    logger.info("tf-idf: %s", result)


def train_soml(images, signatures, model, record, variant, options, negatives_per_pair, epochs, seed):
    """Learn a SOML diagonal metric (Gao et al. 2014) on the training split; record its test mAP.

    ``variant`` ``"tg"`` (truncated gradient), ``"da"`` or ``"da-algorithm2"`` (dual
    averaging, the two readings of ``SOMLDualAveraging.update``) with the ``options``
    of its estimator. Writes the weights (``.npz``) and a comparison record.
    """
    from .soml import SOMLDualAveraging, SOMLTruncatedGradient

    estimator_class = SOMLTruncatedGradient if variant == "tg" else SOMLDualAveraging
    splits = _learning_splits(images, signatures)
    X_train, groups_train, _ = splits["train"]
    estimator = estimator_class(**options, negatives_per_pair=negatives_per_pair, n_epochs=epochs, random_state=seed)
    start = time.perf_counter()
    estimator.fit(X_train, groups_train)
    train_s = time.perf_counter() - start
    X_test, groups, is_query = splits["test"]
    test_map, Q = _test_scores(estimator.score_pairs, X_test, groups, is_query)
    mapped = estimator.transform(Q)
    name = "tfidf" if str(signatures).endswith(".npz") else codebook_name(signatures).removesuffix(".npy")
    result = {
        "method": {"tg": "SOML-TG", "da": "SOML-DA", "da-algorithm2": "SOML-DA (Alg. 2)"}[variant],
        "signature": name,
        "query_dims": comparison.mean_nonzeros(mapped),
        "model_bytes": int(estimator.model_bytes_),
        # The database keeps each signature on the support of w: sparse tf-idf stays
        # sparse, a dense FV keeps its nnz(w) weighted dimensions.
        "db_bytes_per_image": comparison.database_bytes(estimator.transform(X_test), sparse=sp.issparse(X_test)),
        "madds_per_query": float(
            comparison.mean_nonzeros(Q) + comparison.sparse_dot_madds(mapped, X_test).mean()
        ),
        "test_map": test_map,
        "train_s": train_s,
        "sparsity": float(estimator.sparsity_),
        "n_nonzero": int(estimator.n_nonzero_),
        "n_triplets": int(estimator.n_triplets_),
        "n_active": int(estimator.n_active_),
    }
    with atomic_output(model) as tmp:
        np.savez(tmp, coef=estimator.coef_, variant=np.asarray(variant), signature=np.asarray(name))
    _write_json(comparison.check_record(result), record)
    logger.info("SOML-%s on %s: %s", variant.upper(), name, result)


def train_similarity_matrix(images, counts, vocabulary, model, record, options, seed):
    """Learn Yan & Yu's sparse similarity matrix on the training split; record its test mAP.

    Writes the matrix M^s (scipy ``.npz``, CSR) and a comparison record.
    """
    from .similarity_matrix import SparseSimilarityMatrix

    splits = _bovw_splits(images, counts)
    C_train, groups_train, _ = splits["train"]
    words = bovw.VisualVocabulary.load(vocabulary).centroids_
    estimator = SparseSimilarityMatrix(**options, random_state=seed)
    start = time.perf_counter()
    estimator.fit(C_train, groups_train, words)
    train_s = time.perf_counter() - start
    C_test, groups, is_query = splits["test"]
    test_map, Q = _test_scores(estimator.score_pairs, C_test, groups, is_query)
    # A query is mapped to q M (a sparse row of M per query word), then compared
    # with the database's counts; the database norms sqrt(x^T M x) are precomputed.
    M = sp.csr_matrix(estimator.metric_)
    row_nnz = np.diff(M.indptr).astype(np.float64)
    mapped = comparison.support(Q) @ comparison.support(M)
    result = {
        "method": "sparse similarity matrix",
        "signature": "tfidf",
        "query_dims": comparison.mean_nonzeros(mapped),
        "model_bytes": int(estimator.model_bytes_),
        # The database keeps its word frequencies and one norm sqrt(x^T M x) per image.
        "db_bytes_per_image": comparison.database_bytes(C_test, sparse=True) + 4,
        "madds_per_query": float(
            (comparison.support(Q) @ row_nnz).mean() + comparison.sparse_dot_madds(mapped, C_test).mean()
        ),
        "test_map": test_map,
        "train_s": train_s,
        "n_parameters": int(sp.triu(M).nnz),
        "holdout_map": float(estimator.holdout_map_),
        "best_iteration": int(estimator.best_iteration_),
        "n_hard_triplets": int(estimator.n_hard_triplets_),
        "n_random_triplets": int(estimator.n_random_triplets_),
    }
    with atomic_output(model) as tmp:
        sp.save_npz(tmp, M)
    _write_json(comparison.check_record(result), record)
    logger.info("sparse similarity matrix: %s", result)


def seeds_comparison(images, records, signatures, projectors, histories, table, figure, dims):
    """The comparison table and figure: the seeds' learners, PCA and the sparse projectors.

    ``records`` are the JSON records of the tf-idf baseline and the seeds' learners;
    PCA is fitted here for each of ``dims`` on each of ``signatures``; the sparse
    rank projectors (``projectors``, with their ``histories``) were trained by
    :func:`train_sparse_projector`. See :mod:`ndir.comparison` for the columns.
    """
    from . import figures as plots
    from .projection import load_projector, projection_cost

    rows = [json.loads(Path(path).read_text()) for path in records]
    for path in signatures:
        name = codebook_name(path).removesuffix(".npy")
        splits = split_signatures(images, path)
        X_train = splits["train"][0]
        X_test, groups, is_query = splits["test"]
        for R in dims:
            start = time.perf_counter()
            pca = PCAProjection(n_components=R).fit(X_train)
            train_s = time.perf_counter() - start
            test_map = evaluation.holidays_map(pca.transform(X_test), groups, is_query)
            rows.append(
                comparison.dense_projection_record(f"PCA R={R}", name, X_test.shape[1], R, len(X_test), test_map, train_s)
            )
    n_test = int((read_image_table(images)["split"] == "test").sum())
    maps = final_maps(histories).set_index(["signature", "R", "tau"])["final"]
    for path in projectors:
        U, meta = load_projector(path)
        R, tau = meta["n_components"], meta["sparsity"]
        rows.append(
            comparison.sparse_projection_record(
                f"sparse rank R={R} τ={tau:g}",
                meta["signature"],
                projection_cost(U),
                n_test,
                maps.loc[(meta["signature"], R, tau)],
                meta["fit_seconds"],
            )
        )
    frame = pd.DataFrame([comparison.check_record(row) for row in rows])
    report.write_table(
        report.seeds_comparison_table(frame),
        Path(table[0]).with_suffix(""),
        caption="Sparse similarity learners on the same split: size and cost at query time, test mAP (%)",
    )
    plots.seeds_comparison_figure(frame, stem=Path(figure[0]).with_suffix(""))


# --------------------------------------------------------------------------- provenance


def write_run_info(data_report, outputs, run_info, config, benchmarks, repo):
    """Write ``results/run_info.json`` once every table and figure exists.

    ``outputs`` (the final tables and figures) are inputs only so that this runs
    last, when every job's benchmark file is there to be summarised.
    """
    from .provenance import run_info as gather

    with open(data_report) as f:
        summary = json.load(f)
    _write_json(gather(config, summary, benchmarks, repo), run_info)
