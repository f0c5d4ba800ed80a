"""Stage of ``workflow/rules/browser.smk``: the retrieval browser of a run,
``results/browse/index.html`` (:mod:`ndir.browse`).

Every method's ranking of the test queries is recomputed from the run's files as
:mod:`ndir.stages.readings` recomputes their per-query APs, with its pieces: the full
signatures, PCA-R refitted on the training split, the learned projectors through
:func:`~ndir.stages.readings.project` (reductions L2-normalised), their start (PCA-R
hard-thresholded to tau), tf-idf, the sparse similarity matrix, SOML on tf-idf,
second-order pooling and JCF. The readings keep the APs only; here the scores of each
method give its top k and the ranks of its true matches, and the APs those ranks give
(equal to the evaluation's, checked) are checked against Tables I-II and the seeds'
records with the readings' :class:`~ndir.stages.readings.Checks` (the sentence under
the page's summary). Random and Gaussian projections and PQ (tables' means over
seeds), whitened PCA and SOML on signatures are in the tables, not in the browser.
"""

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ndir import bovw
from ndir import browse as browser
from ndir import readings as findings
from ndir.encoding import l2_normalise_rows
from ndir.errors import ResultFileError
from ndir.evaluation import map_from_scores
from ndir.jcf import JCF
from ndir.model_files import read_result
from ndir.projection import fit_pca, load_projector
from ndir.projection.sparse_rank import project_components, thresholded_components
from ndir.report import input_label, signature_label
from ndir.similarity_matrix import SparseSimilarityMatrix
from ndir.stages.common import read_image_table, split_rows, split_signatures
from ndir.stages.jcf import load_features
from ndir.stages.readings import Checks, check_tables, pooling_similarities_of
from ndir.stages.seeds import SOML_VARIANTS
from ndir.stages.sparse import read_history

logger = logging.getLogger(__name__)

#: Families of the browser's methods, as the summary names them.
FULL, PCA, THRESHOLDED, LEARNED = "full signature", "PCA", "thresholded PCA", "sparse rank (learned)"


class Scored:
    """Collects the methods of the page: each from its test scores, its per-query APs
    computed by :func:`ndir.evaluation.map_from_scores` as the run's tables do."""

    def __init__(self, groups, is_query, k):
        self.groups, self.query_rows, self.k = groups, np.flatnonzero(is_query), k
        self.methods = []

    def add(self, key, label, group, scores, **describe):
        """``scores``: (n_queries, n_test) or (n_test, n_test) similarities; returns the APs."""
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape[0] != self.query_rows.size:
            scores = scores[self.query_rows]
        ap = map_from_scores(scores, self.query_rows, self.groups, return_per_query=True)[1]
        self.methods.append(
            browser.method_from_scores(key, label, group, scores, self.query_rows, self.groups, self.k, ap, **describe)
        )
        return ap

    def dot(self, key, label, group, Y, **describe):
        return self.add(key, label, group, browser.dot_scores(Y, self.query_rows), **describe)


def _tau_text(tau):
    return f"τ = {100 * tau:g} %"


def projector_methods(images, signatures, signature_names, projectors, table1_dims, renormalize, k, run):
    """The full signatures, PCA (``table1_dims`` and every R of the projectors), the
    learned projectors and their thresholded-PCA start, signature by signature; their
    per-query APs also go into ``run`` (a :class:`ndir.readings.Run`) for the checks.
    Returns the methods and the test split's (groups, is_query)."""
    by_signature = {}
    for path in projectors:
        U, meta = load_projector(path)
        if meta.get("signature") not in signature_names:
            raise ResultFileError(f"{path}: a projector of {meta.get('signature')}, not of {signature_names}")
        by_signature.setdefault(meta["signature"], []).append((U, meta))
    methods, test = [], None
    for path, name in zip(signatures, signature_names, strict=True):
        splits = split_signatures(images, path)
        X_train = splits["train"][0]
        X_test, groups, is_query = test = splits["test"]
        scored = Scored(groups, is_query, k)
        label = signature_label(*_encoding_k(name))
        group = f"{label} (D = {X_test.shape[1]:,})"
        common = {"input": label}
        run.full[name] = scored.dot(f"{name}/full", f"{label} full signature", group, X_test, family=FULL, **common)
        trained = sorted(by_signature.get(name, []), key=lambda item: (item[1]["n_components"], -item[1]["sparsity"]))
        dims = sorted(set(int(R) for R in table1_dims) | {int(meta["n_components"]) for _, meta in trained})
        fitted = fit_pca(X_train, dims)
        for R in dims:
            pca = fitted[R]
            run.pca[name, R] = scored.dot(
                f"{name}/pca-R{R}", f"{label} PCA R = {R}", group, pca.transform(X_test),
                family=PCA, R=R, record=(f"PCA R={R}", name), **common,
            )  # fmt: skip
            for U, meta in (item for item in trained if int(item[1]["n_components"]) == R):
                tau = float(meta["sparsity"])
                start = thresholded_components(pca.components_, tau, renormalize)
                run.start[name, tau, R] = scored.dot(
                    f"{name}/thresholded-R{R}-tau{tau:g}", f"{label} thresholded PCA R = {R}, {_tau_text(tau)}", group,
                    l2_normalise_rows(project_components(start, X_test)),
                    family=THRESHOLDED, R=R, tau=tau, record=(f"thresholded PCA R={R} τ={tau:g}", name), **common,
                )  # fmt: skip
                run.learned[name, tau, R] = scored.dot(
                    f"{name}/sparse-R{R}-tau{tau:g}", f"{label} sparse rank R = {R}, {_tau_text(tau)} (learned)", group,
                    l2_normalise_rows(project_components(U, X_test)),
                    family=LEARNED, R=R, tau=tau, record=(f"sparse rank R={R} τ={tau:g}", name), **common,
                )  # fmt: skip
        methods += scored.methods
        logger.info("%s: %d methods ranked", name, len(scored.methods))
    return methods, test


def _encoding_k(name):
    encoding, K = name.split("-")
    return encoding, int(K)


def _read_json(path):
    with open(path) as handle:
        return json.load(handle)


def seed_methods(images, counts, tfidf_record, similarity_matrix, similarity_record, soml_models, soml_records,
                 soml_variants, k, checks):  # fmt: skip
    """tf-idf, the sparse similarity matrix and SOML on tf-idf, as the readings score them."""
    C = read_result(counts, sp.load_npz).tocsr()
    splits = split_rows(images, C, counts)
    idf = bovw.inverse_document_frequency(splits["train"][0])
    C_test, groups, is_query = splits["test"]
    X_test = bovw.tfidf(C_test, idf)
    scored, group, common = Scored(groups, is_query, k), "Seeds (bag of words, tf-idf)", {"input": "tf-idf"}
    ap = scored.add("seeds/tf-idf", "tf-idf", group, (X_test @ X_test.T).toarray(), family="tf-idf",
                    record=("tf-idf", "tfidf"), **common)  # fmt: skip
    checks.add("tf-idf", ap, 100 * _read_json(tfidf_record)["test_map"])
    if similarity_matrix:
        model = SparseSimilarityMatrix()
        model.metric_ = read_result(similarity_matrix, sp.load_npz)
        method = "sparse similarity matrix"
        ap = scored.add("seeds/similarity-matrix", method, group, model.score_pairs(C_test, C_test), family=method,
                        record=(method, "tfidf"), **common)  # fmt: skip
        checks.add(method, ap, 100 * _read_json(similarity_record)["test_map"])
    for path, record, variant in zip(soml_models, soml_records, soml_variants, strict=True):
        estimator_class, method = SOML_VARIANTS[variant]
        model = estimator_class()
        model.coef_ = read_result(path, lambda p: np.load(p)["coef"])
        ap = scored.add(f"seeds/soml-{variant}", f"{method} on tf-idf", group, model.score_pairs(X_test, X_test),
                        family=method, record=(method, "tfidf"), **common)  # fmt: skip
        checks.add(method, ap, 100 * _read_json(record)["test_map"])
    return scored.methods


def jcf_methods(images, features, codebooks, codebook_sizes, pooling_records, pooling_similarities, models, records,
                runs, k, checks):  # fmt: skip
    """Second-order pooling (without codebook, then with each codebook; from the test
    similarities rule evaluate_second_order wrote) and the JCF runs ([K, R, k] of each
    model), named as their records name them."""
    codebook_of = dict(zip(codebook_sizes, codebooks, strict=True))
    splits = {1: load_features(images, features)["test"]}
    for K in codebook_sizes:
        splits[K] = load_features(images, features, codebook_of[K], K)["test"]
    group = "JCF (local features, seed 004)"
    scored = Scored(splits[1][2], splits[1][3], k)
    for K, record, similarities in zip([1, *codebook_sizes], pooling_records, pooling_similarities, strict=True):
        values, scores = _read_json(record), pooling_similarities_of(similarities, splits[K][2])
        ap = scored.add(f"jcf/pooling-K{K}", values["method"], group, scores,
                        family="second-order pooling", input=input_label(values["signature"]),
                        record=(values["method"], values["signature"]))  # fmt: skip
        checks.add(f"JCF {values['method']}", ap, 100 * values["test_map"])
    for path, record, (K, R, shared) in zip(models, records, runs, strict=True):
        X, H, _, _ = splits[int(K)]
        values = _read_json(record)
        Y = JCF.load(path).transform(X, H if int(K) > 1 else None)
        ap = scored.dot(f"jcf/K{K}-R{R}" + ("" if shared is None else f"-k{shared}"), values["method"], group, Y,
                        family=values.get("family", "JCF"), input=input_label(values["signature"]), R=int(R),
                        record=(values["method"], values["signature"]))  # fmt: skip
        checks.add(f"JCF {values['method']}", ap, 100 * values["test_map"])
    return scored.methods


def default_pair(methods):
    """The pair compared first: the learned projector of the last signature at its
    smallest R and highest tau (the paper's Fig. 4 case), against PCA at that R."""
    learned = [m for m in methods if m.family == LEARNED]
    if not learned:
        return [m.key for m in methods[:2]]
    last = learned[-1].key.split("/")[0]
    mine = [m for m in learned if m.key.startswith(last + "/")]
    a = min(mine, key=lambda m: (m.R, -m.tau))
    return [a.key, f"{last}/pca-R{a.R}"]


def frontier_data(comparison, methods):
    """The seeds comparison's points, fronts and styles for the page's frontier."""
    from ndir import comparison as pareto
    from ndir.figures import frontier_styles
    from ndir.stages.seeds import FRONTIER_COSTS

    frame = read_result(comparison, pd.read_csv)
    fronts = {cost: pareto.pareto_front(frame[cost], frame["test_map"]) for cost in FRONTIER_COSTS}
    return browser.frontier_points(frame, fronts, FRONTIER_COSTS, frontier_styles(frame), methods)


def browse(
    images,
    data_report,
    signatures,
    projectors,
    histories,
    table1,
    table2,
    page,
    data,
    thumbs,
    signature_names,
    table1_dims,
    renormalize,
    k,
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
    comparison=None,
):
    """Write the run's retrieval browser: ``page`` (index.html), ``data`` (data.js) and
    ``thumbs`` (a folder, one thumbnail per test image) in one folder.

    Inputs as :func:`ndir.stages.readings.readings` takes them (``signatures`` named
    ``signature_names``, Table II's ``projectors`` and their training ``histories``, whose
    first test mAP checks the thresholded-PCA start, ``table1_dims``, ``renormalize``;
    the seeds' and JCF's optional files), with the seeds comparison's records
    (``comparison``, its CSV) for the frontier; ``k`` results per query.
    """
    folder = Path(page).parent
    if Path(data) != folder / browser.DATA_FILE or Path(thumbs) != folder / browser.THUMBS_FOLDER:
        raise ValueError(f"{page}, {data} and {thumbs} must be index.html, data.js and thumbs/ of one folder")
    run = findings.Run(table1_dims=tuple(int(R) for R in table1_dims))
    checks = Checks()
    methods, (_, groups, is_query) = projector_methods(
        images, signatures, signature_names, projectors, table1_dims, renormalize, int(k), run
    )
    check_tables(run, table1, table2, checks)
    for path in histories:
        name, R, tau, curve = read_history(path)
        initial = curve["test_map_l2"].dropna()
        key = (name, tau, R)
        if len(initial) and key in run.start:
            checks.add(f"start {key[0]} R={key[2]} τ={key[1]:g}", run.start[key], 100 * initial.iloc[0])
    if counts:
        methods += seed_methods(images, counts, tfidf_record, similarity_matrix, similarity_record, soml_models,
                                soml_records, soml_variants, int(k), checks)  # fmt: skip
    if jcf_features:
        methods += jcf_methods(images, jcf_features, jcf_codebooks, jcf_codebook_sizes, pooling_records,
                               pooling_similarities, jcf_models, jcf_records, jcf_runs, int(k), checks)  # fmt: skip
    if checks.mismatches:
        raise ResultFileError(
            f"recomputed rankings disagree with the run's tables or records in {checks.mismatches}; "
            "rerun the rules that wrote them"
        )
    table = read_image_table(images)
    test = table[table["split"] == "test"].reset_index(drop=True)
    report = _read_json(data_report)
    names = [Path(path).name for path in test["path"]]
    n_queries = int(np.count_nonzero(is_query))
    content = browser.page_data(
        title=f"ndir retrieval browser: {report.get('kind', 'data')}, test split",
        subtitle=(
            f"{n_queries} test queries ranking the {len(test)} test images under {len(methods)} methods "
            f"(top {min(int(k), len(test) - 1)}), recomputed from the run's files"
        ),
        names=names,
        thumbs=browser.thumbnail_names(len(test)),
        groups=test["group"].tolist(),
        queries=np.flatnonzero(is_query),
        methods=methods,
        k=k,
        compare=default_pair(methods),
        notes=[
            "Per-query APs recomputed from the run's files and ranks;" + checks.sentence(),
            "Not here: random sparse and Gaussian projections and PQ (the tables give their means over seeds), "
            "whitened PCA and SOML on signatures; they are on the frontier, faded.",
        ],
        frontier=frontier_data(comparison, methods) if comparison else None,
    )
    browser.write_browser(folder, content, test["path"].tolist())
    logger.info(
        "browser: %d methods, %d queries; %s: %.1f MB (%s)",
        len(methods),
        n_queries,
        folder,
        browser.folder_bytes(folder) / 1e6,
        checks.sentence().strip(),
    )
