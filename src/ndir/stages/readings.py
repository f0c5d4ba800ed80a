"""Stage of ``workflow/rules/readings.smk``: which of the paper's findings hold on this run.

The run's rules store mean mAPs only; this stage recomputes the per-query APs the
findings of :mod:`ndir.readings` compare, from the run's files, as the rules that wrote
the tables computed them: the full signatures and PCA-R refitted on the training split
(Table I, :func:`ndir.stages.baseline.evaluate_pca_baseline`), the learned projectors
(Table II, their reductions L2-normalised) and their start, PCA-R hard-thresholded to
tau (:mod:`ndir.baselines`), tf-idf, SOML and the sparse similarity matrix
(:mod:`ndir.stages.seeds`), second-order pooling and JCF (:mod:`ndir.stages.jcf`).
Each recomputed mean is checked against the table or record the run wrote (2 decimals
of %): an independent check of those, counted in the table's caption.
"""

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ndir import bovw
from ndir import readings as findings
from ndir.encoding import l2_normalise_rows
from ndir.errors import ResultFileError, rebuild_advice
from ndir.evaluation import holidays_map, map_from_scores
from ndir.jcf import JCF
from ndir.model_files import read_result
from ndir.projection import fit_pca, load_projector
from ndir.projection.sparse_rank import project_components, thresholded_components
from ndir.report import (
    is_inria_holidays,
    load_paper_table1,
    load_paper_table2,
    signature_label,
    sparsity_label,
    table_caption,
    table_stem,
    write_table,
)
from ndir.similarity_matrix import SparseSimilarityMatrix
from ndir.stages.common import split_rows, split_signatures
from ndir.stages.jcf import load_features
from ndir.stages.seeds import SOML_VARIANTS
from ndir.stages.sparse import read_history

logger = logging.getLogger(__name__)


def test_aps(X, groups, is_query):
    """Per-query APs of signatures compared by dot product (:func:`holidays_map`)."""
    return holidays_map(X, groups, is_query, return_per_query=True)[1]


def precomputed_aps(scores, groups, is_query):
    """Per-query APs of an (n_test, n_test) similarity matrix, as
    :func:`ndir.comparison.record_quality` scores the models that score pairs."""
    query_rows = np.flatnonzero(is_query)
    return map_from_scores(np.asarray(scores, dtype=np.float64)[query_rows], query_rows, groups, True)[1]


class Checks:
    """Recomputed means against the means the run's tables and records hold (in %)."""

    def __init__(self):
        self.n_checked, self.mismatches = 0, []

    def add(self, what, ap, recorded_percent):
        """Compare ``mean(ap)`` (in [0, 1]) with ``recorded_percent`` to 2 decimals."""
        if recorded_percent is None or np.isnan(recorded_percent):
            return
        recomputed = np.round(100 * float(np.mean(ap)), 2)
        self.n_checked += 1
        if not np.isclose(recomputed, np.round(recorded_percent, 2), rtol=0, atol=1e-9):
            self.mismatches.append(what)
            logger.warning("%s: recomputed mean %.2f %%, the run's %.2f %%", what, recomputed, recorded_percent)

    def sentence(self):
        matched = self.n_checked - len(self.mismatches)
        sentence = (
            f" Recomputed means equal the run's tables and records to 2 decimals in {matched} of {self.n_checked} cells"
        )
        if self.mismatches:
            sentence += f" (not: {', '.join(self.mismatches[:5])}{'...' if len(self.mismatches) > 5 else ''})"
        return sentence + "."


def _table_cell(frame, row_label, column):
    """A cell of a written table (Table I, II) in %, None when absent."""
    if column not in frame.columns:
        return None
    rows = frame.loc[frame["Sign."] == row_label, column]
    return float(rows.iloc[0]) if len(rows) and pd.notna(rows.iloc[0]) else None


def _read_json(path):
    with open(path) as handle:
        return json.load(handle)


def projector_aps(images, signatures, signature_names, projectors, histories, table1_dims, renormalize, run, checks):
    """Fill ``run`` with the per-query APs of the full signatures, PCA (``table1_dims`` and
    every R of the projectors), the learned projectors and their thresholded-PCA start;
    ``histories`` (each beside its projector) give the start's mean to check."""
    by_signature = {}
    for path, history in zip(projectors, histories):
        U, meta = load_projector(path)
        if meta.get("signature") not in signature_names:
            raise ResultFileError(f"{path}: a projector of {meta.get('signature')}, not of {signature_names}")
        by_signature.setdefault(meta["signature"], []).append((U, meta, history))
    for path, name in zip(signatures, signature_names, strict=True):
        splits = split_signatures(images, path)
        X_train = splits["train"][0]
        X_test, groups, is_query = splits["test"]
        run.full[name] = test_aps(X_test, groups, is_query)
        dims = sorted(set(table1_dims) | {meta["n_components"] for _, meta, _ in by_signature.get(name, [])})
        pca = fit_pca(X_train, dims)
        for R in dims:
            run.pca[name, R] = test_aps(pca[R].transform(X_test), groups, is_query)
        for U, meta, history in by_signature.get(name, []):
            R, tau = int(meta["n_components"]), float(meta["sparsity"])
            run.learned[name, tau, R] = test_aps(l2_normalise_rows(project_components(U, X_test)), groups, is_query)
            start = thresholded_components(pca[R].components_, tau, renormalize)
            run.start[name, tau, R] = test_aps(l2_normalise_rows(project_components(start, X_test)), groups, is_query)
            curve = read_history(history)[3]
            initial = curve["test_map_l2"].dropna()
            if len(initial):
                checks.add(f"start {name} R={R} τ={tau:g}", run.start[name, tau, R], 100 * initial.iloc[0])
        logger.info("%s: per-query APs of the full signature, PCA %s and %d projectors", name, dims,
                    len(by_signature.get(name, [])))  # fmt: skip


def check_tables(run, table1, table2, checks):
    """Check the recomputed means against Table I and Table II as the run wrote them."""
    first, second = pd.read_csv(table1), pd.read_csv(table2)
    for name, ap in run.full.items():
        checks.add(f"Table I {name} full", ap, _table_cell(first, _label(name), "Full"))
    for (name, R), ap in run.pca.items():
        if R in run.table1_dims:
            checks.add(f"Table I {name} R={R}", ap, _table_cell(first, _label(name), str(R)))
    for (name, tau, R), ap in run.learned.items():
        checks.add(
            f"Table II {name} R={R} τ={tau:g}", ap, _table_cell(second, _label(name), f"{sparsity_label(tau)} R{R}")
        )


def _label(name):
    encoding, K = name.split("-")
    return signature_label(encoding, int(K))


def seed_aps(images, counts, tfidf_record, similarity_matrix, similarity_record, soml_models, soml_records,
             soml_variants, run, checks):  # fmt: skip
    """Per-query APs of tf-idf, the sparse similarity matrix and SOML on tf-idf."""
    C = read_result(counts, sp.load_npz).tocsr()
    splits = split_rows(images, C, counts)
    idf = bovw.inverse_document_frequency(splits["train"][0])
    C_test, groups, is_query = splits["test"]
    X_test = bovw.tfidf(C_test, idf)
    run.seeds["tf-idf"] = precomputed_aps((X_test @ X_test.T).toarray(), groups, is_query)
    checks.add("tf-idf", run.seeds["tf-idf"], 100 * _read_json(tfidf_record)["test_map"])
    if similarity_matrix:
        model = SparseSimilarityMatrix()
        model.metric_ = read_result(similarity_matrix, sp.load_npz)
        method = "sparse similarity matrix"
        run.seeds[method] = precomputed_aps(model.score_pairs(C_test, C_test), groups, is_query)
        checks.add(method, run.seeds[method], 100 * _read_json(similarity_record)["test_map"])
    for path, record, variant in zip(soml_models, soml_records, soml_variants, strict=True):
        estimator_class, method = SOML_VARIANTS[variant]
        model = estimator_class()
        model.coef_ = read_result(path, lambda p: np.load(p)["coef"])
        run.seeds[method] = precomputed_aps(model.score_pairs(X_test, X_test), groups, is_query)
        checks.add(method, run.seeds[method], 100 * _read_json(record)["test_map"])


def jcf_aps(images, features, codebooks, codebook_sizes, pooling_records, pooling_similarities, models, records, runs,
            run, checks):  # fmt: skip
    """Per-query APs of second-order pooling (without codebook, then with each Fisher
    codebook of ``codebook_sizes``; from the test similarities rule evaluate_second_order
    wrote) and of the learned JCF ``runs`` ([K, R, k] of each model), and their
    dimensions and parameters from their records."""
    codebook_of = dict(zip(codebook_sizes, codebooks, strict=True))
    splits = {1: load_features(images, features)["test"]}
    for K in codebook_sizes:
        splits[K] = load_features(images, features, codebook_of[K], K)["test"]
    for K, record, similarities in zip([1, *codebook_sizes], pooling_records, pooling_similarities, strict=True):
        _, _, groups, is_query = splits[K]
        key = (K, None, None)
        run.jcf[key] = precomputed_aps(pooling_similarities_of(similarities, groups), groups, is_query)
        _jcf_record(key, record, run, checks)
    for path, record, (K, R, k) in zip(models, records, runs, strict=True):
        X, H, groups, is_query = splits[int(K)]
        key = (int(K), int(R), None if k is None else int(k))
        model = JCF.load(path)
        run.jcf[key] = test_aps(model.transform(X, H if int(K) > 1 else None), groups, is_query)
        _jcf_record(key, record, run, checks)


def pooling_similarities_of(path, groups):
    """The (n_test, n_test) similarities of second-order pooling that rule
    evaluate_second_order wrote (``.npy``), checked against the test split's size."""
    similarities = read_result(path)
    if similarities.shape != (len(groups), len(groups)):
        raise ResultFileError(
            f"{path}: similarities of {similarities.shape} test images, not of the {len(groups)} of this run; "
            f"{rebuild_advice(path)}"
        )
    return similarities


def _jcf_record(key, record, run, checks):
    values = _read_json(record)
    run.jcf_info[key] = {"dims": values["dims"], "parameters": values["n_parameters"]}
    checks.add(f"JCF {values['method']}", run.jcf[key], 100 * values["test_map"])


def readings(
    images,
    data_report,
    signatures,
    projectors,
    histories,
    fig2,
    fig3,
    table1,
    table2,
    costs,
    table,
    signature_names,
    table1_dims,
    renormalize,
    seed,
    *,
    soml_variants,
    jcf_codebook_sizes,
    jcf_runs,
    counts=None,
    tfidf_record=None,
    similarity_matrix=None,
    similarity_record=None,
    soml_models=(),
    soml_records=(),
    jcf_features=None,
    jcf_codebooks=(),
    pooling_records=(),
    pooling_similarities=(),
    jcf_models=(),
    jcf_records=(),
):
    """The readings table (:func:`ndir.readings.readings_table`): every finding of
    :data:`ndir.readings.FINDINGS` (and on INRIA Holidays :data:`~ndir.readings.PAPER_FINDINGS`)
    checked on this run, paired bootstraps of :data:`~ndir.readings.N_RESAMPLES`
    resamples seeded by ``seed`` (the config's).

    ``signatures`` (named ``signature_names``), ``projectors`` (Table II's, each with its
    training history in ``histories``), ``table1_dims`` (``baseline.dims``) and
    ``renormalize`` (``sparse.renormalize``, the start's column norms) give Tables I-II's
    per-query APs; ``fig2``, ``fig3`` the training histories of Figures 2 and 3;
    ``table1``, ``table2``, ``costs`` the CSV tables the run wrote. The seeds' inputs
    (word ``counts``, models and records of tf-idf, the similarity matrix and SOML on
    tf-idf, of variants ``soml_variants``) and JCF's (local features, the Fisher
    codebooks of ``jcf_codebook_sizes``, the second-order pooling records and test
    similarities for K = 1 then those sizes, the models and records of ``jcf_runs`` [K, R,
    k]) are optional.
    """
    run = findings.Run(table1_dims=tuple(int(R) for R in table1_dims))
    checks = Checks()
    projector_aps(images, signatures, signature_names, projectors, histories, run.table1_dims, renormalize, run, checks)
    check_tables(run, table1, table2, checks)
    if counts:
        seed_aps(images, counts, tfidf_record, similarity_matrix, similarity_record, soml_models, soml_records,
                 soml_variants, run, checks)  # fmt: skip
    if jcf_features:
        jcf_aps(images, jcf_features, jcf_codebooks, jcf_codebook_sizes, pooling_records, pooling_similarities,
                jcf_models, jcf_records,
                jcf_runs, run, checks)  # fmt: skip
    run.fig2 = [read_history(path)[3] for path in fig2]
    run.fig3 = [read_history(path)[3] for path in fig3]
    run.costs = pd.read_csv(costs)
    holidays = is_inria_holidays(data_report)
    if holidays:
        run.paper_table1, run.paper_table2 = load_paper_table1(), load_paper_table2()
    results = findings.read_all(run, n_resamples=findings.N_RESAMPLES, seed=seed)
    for reading in results:
        logger.info("%s: %s (%s)", reading.finding.key, reading.verdict, reading.counts)
    n_queries = len(next(iter(run.full.values()))) if run.full else 0
    write_readings(results, table, data_report, seed, n_queries, checks, holidays)


def caption(data_report, seed, n_queries, checks, holidays):
    """The readings table's caption: data, statistics, verdict rule and the check."""
    title = "Which of the paper's findings hold on this run"
    text = table_caption(title, data_report, paper_table=False)
    text += (
        f" Per cell, A − B (points of the unit) and its 95 % interval from a paired percentile bootstrap over the "
        f"{n_queries} test queries' APs ({findings.N_RESAMPLES:,} resamples of the queries, seed {seed}: the "
        "config's); Holm p: the cell's two-sided bootstrap p-value, Holm-corrected over the finding's cells. A "
        "cell is for the claim (A above B) when its Holm p is below 0.05 and A > B, against it when below 0.05 and "
        "A < B, within otherwise. Training curves and costs (one training per cell, counted costs) have no "
        "interval: for, against or tied as the numbers compare. Verdict: does not hold when a cell is against "
        "the claim, holds when none is and more than half are for it, not settled otherwise."
    )
    if holidays:
        text += (
            " INRIA Holidays: the paper's Table I-II values against ours (ours − paper), each inside or outside "
            "our cell's 95 % interval."
        )
    else:
        text += " The paper's values (INRIA Holidays) are compared only on INRIA Holidays."
    return text + checks.sentence()


def write_readings(results, table, data_report, seed, n_queries, checks, holidays):
    """Write the readings table (CSV, Markdown, LaTeX) with its caption."""
    frame = findings.readings_table(results)
    write_table(frame, table_stem(table), caption=caption(data_report, seed, n_queries, checks, holidays))
    logger.info("readings written to %s", Path(table[0]).parent)
