"""Result tables in the paper's layout, written as CSV, Markdown and LaTeX.

Evaluation results arrive in a long format, one row per measured (signature, R)::

    encoding  K    dim    R    map
    vlad      64   5120   0    0.8623     # R = FULL_R (0): the full signature
    vlad      64   5120   32   0.7690
    ...

with ``map`` the mean average precision in [0, 1]. Tables report it in % with 2
decimals, like the paper. The paper's own values (Negrel et al. 2014, Tables I and II,
INRIA Holidays test half) ship with the package in ``ndir/reference/``.
"""

import itertools
import json
import math
import re
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import is_float_dtype, is_numeric_dtype

from ndir.atomic import atomic_output
from ndir.comparison import NS_KEY

#: Value of the ``R`` column marking the full (unreduced) signature.
FULL_R = 0

#: Table labels of the encodings, in table order (VLAD rows first, as in the paper).
ENCODING_LABELS = {"vlad": "VLAD", "fv": "FV"}

DECIMALS = 2

_LATEX_ESCAPES = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
        "Δ": r"$\Delta$",
    }
)


def load_paper_table1():
    """Table I of the paper: mAP (%) of full and PCA-reduced signatures.

    Returns
    -------
    DataFrame
        Columns ``signature`` (e.g. "VLAD-64"), ``dim`` (as printed, e.g. "5k"),
        ``full``, ``R32``, ``R64``, ``R128``, ``R256`` (mAP in %).
    """
    return _read_reference("paper_table1.csv")


def load_paper_table2():
    """Table II of the paper: mAP (%) of sparse rank projectors.

    Returns
    -------
    DataFrame
        Columns ``signature``, ``tau`` (sparsity rate, 0.90 or 0.99), ``R32``,
        ``R64``, ``R128``, ``R256`` (mAP in %).
    """
    return _read_reference("paper_table2.csv")


def _read_reference(name):
    with (files("ndir") / "reference" / name).open("r", encoding="utf-8") as handle:
        return pd.read_csv(handle, dtype={"signature": str, "dim": str})


def signature_label(encoding, K):
    """Row label of the paper's tables, e.g. ``signature_label("fv", 256) == "FV-256"``."""
    return f"{ENCODING_LABELS[encoding]}-{K}"


def format_dim(dim):
    """Signature size as printed in Table I: thousands rounded half up (5120 -> "5k",
    40960 -> "41k", 81920 -> "82k"); sizes below 1000 are printed in full."""
    if dim < 1000:
        return str(dim)
    return f"{math.floor(dim / 1000 + 0.5)}k"


def table1(results, paper=None):
    """Table I: mAP (%) of full and reduced signatures, one row per signature.

    Parameters
    ----------
    results : DataFrame
        Long format, one row per (encoding, K, R): ``encoding`` ("vlad" or "fv"),
        ``K`` (codebook size, int), ``dim`` (signature size, int), ``R`` (output
        dimension, int; ``FULL_R`` = 0 for the full signature), ``map`` (in [0, 1]).
    paper : DataFrame, optional
        The paper's table as returned by :func:`load_paper_table1`. When given, each
        mAP column ``c`` is followed by ``"c (paper)"`` and ``"c (Δ)"`` (ours − paper);
        signatures or R the paper does not report get NaN there.

    Returns
    -------
    DataFrame
        Columns ``Sign.``, ``Dim.``, ``Full``, then one column per reduced R in
        increasing order (``"32"``, ``"64"``, ...); rows VLAD then FV, K increasing.
        mAP in %, rounded to 2 decimals (so that Δ is exactly what the table shows);
        NaN where a cell was not measured.
    """
    results = _check_results(results)
    reduced = sorted(r for r in results["R"].unique() if r != FULL_R)
    map_columns = ["Full"] + [str(r) for r in reduced]

    rows = []
    encoding_order = list(ENCODING_LABELS)
    for (_, K), signature in results.groupby([results["encoding"].map(encoding_order.index), "K"], sort=True):
        cells = {str(r): m for r, m in zip(signature["R"], signature["map"])}
        cells["Full"] = cells.pop(str(FULL_R), np.nan)
        rows.append(
            {
                "Sign.": signature_label(signature["encoding"].iloc[0], K),
                "Dim.": format_dim(int(signature["dim"].iloc[0])),
                **{c: np.round(100.0 * cells.get(c, np.nan), DECIMALS) for c in map_columns},
            }
        )
    table = pd.DataFrame(rows, columns=["Sign.", "Dim."] + map_columns)
    if paper is None:
        return table

    reference = paper.set_index("signature")
    columns = ["Sign.", "Dim."]
    for column in map_columns:
        paper_column = "full" if column == "Full" else f"R{column}"
        if paper_column in reference.columns:
            values = reference[paper_column].reindex(table["Sign."]).to_numpy(float)
        else:
            values = np.full(len(table), np.nan)
        table[f"{column} (paper)"] = values
        table[f"{column} (Δ)"] = np.round(table[column] - values, DECIMALS)
        columns += [column, f"{column} (paper)", f"{column} (Δ)"]
    return table[columns]


def _percent(values):
    return np.round(100.0 * np.asarray(values, dtype=float), DECIMALS)


def _signature_order(maps):
    """(label, encoding, K) of the signatures in ``maps``: VLAD then FV, K increasing."""
    keys = maps[["encoding", "K"]].drop_duplicates()
    keys = keys.assign(order=keys["encoding"].map(list(ENCODING_LABELS).index))
    keys = keys.sort_values(["order", "K"])
    return [(signature_label(e, k), e, k) for e, k in zip(keys["encoding"], keys["K"])]


def sparsity_label(tau):
    """Column group label of a sparsity rate, as in Table II: 0.99 -> "99%"."""
    return f"{100 * tau:g}%"


def with_ns_columns(table, scores):
    """A table of our mAP (:func:`table1`, :func:`table2`) with UKBench's N-S score
    beside each of its mAP columns: ``"N-S Full"`` after ``"Full"``, ``"N-S 32"`` after
    ``"32"``...

    ``scores`` is the same table built from the N-S scores divided by 100 (so that
    its percent are the scores, out of 4, rounded to 2 decimals as the mAP).
    """
    columns = []
    for column in table.columns:
        columns.append(column)
        if column in scores.columns and column not in ("Sign.", "Dim."):
            table = table.assign(**{f"N-S {column}": scores[column].to_numpy()})
            columns.append(f"N-S {column}")
    return table[columns]


def table2(maps, paper=None):
    """Table II: test mAP (%) of sparse rank projectors, one row per signature.

    Parameters
    ----------
    maps : DataFrame
        One row per training run: ``encoding``, ``K``, ``R``, ``tau`` and ``final``
        (mAP in [0, 1] of the learned projector).
    paper : DataFrame, optional
        :func:`load_paper_table2`; adds ``"<col> (paper)"`` and ``"<col> (Δ)"`` after
        each mAP column, NaN where the paper has no value.

    Returns
    -------
    DataFrame
        ``Sign.``, then one column ``"<tau>% R<R>"`` per (tau, R), tau then R increasing.
    """
    cells = maps.set_index(["encoding", "K", "tau", "R"])["final"]
    runs = sorted({(t, r) for t, r in zip(maps["tau"], maps["R"])})
    rows = []
    for label, encoding, K in _signature_order(maps):
        row = {"Sign.": label}
        for tau, R in runs:
            column = f"{sparsity_label(tau)} R{R}"
            row[column] = _percent(cells.get((encoding, K, tau, R), np.nan))
            if paper is not None:
                match = paper[(paper["signature"] == label) & np.isclose(paper["tau"], tau)]
                value = match[f"R{R}"].iloc[0] if f"R{R}" in match and len(match) else np.nan
                row[f"{column} (paper)"] = value
                row[f"{column} (Δ)"] = np.round(row[column] - value, DECIMALS)
        rows.append(row)
    return pd.DataFrame(rows)


def table2_ablation(test_l2, test_dot, train_dot, baselines=None):
    """Learned sparse projectors against PCA hard-thresholded to the same tau, and
    against the reductions a user would pick instead.

    Parameters
    ----------
    test_l2, test_dot, train_dot : DataFrame
        As for :func:`table2`, one row per training run, with ``initial`` (the mAP of
        the PCA projectors after the l0 projection, before any learning step) and
        ``final``: test mAP of the L2-normalised reductions (the tables' scoring),
        test and training mAP of the raw reductions (the loss's similarity).
    baselines : DataFrame, optional
        :func:`ndir.baselines.mean_over_seeds` of the runs' baseline records
        (``signature``, ``family``, ``R``, ``test_map``, ``test_map_std``).

    Returns
    -------
    DataFrame
        One row per (signature, tau, R): thresholded PCA, learned and the gain, in %,
        scored L2-normalised; with ``baselines``, then the random sparse projection of
        the same density (mean and s.d. over its seeds), the learned projector's gain
        over it, whitened PCA and the Gaussian random projection (mean) at the same R,
        scored alike; then the three scored by dot product, and the training mAP (dot)
        at the start and the end of training.
    """
    keys = ["signature", "R", "tau"]
    merged = test_l2.merge(test_dot[keys + ["initial", "final"]], on=keys, suffixes=("", "_dot"))
    merged = merged.merge(train_dot[keys + ["initial", "final"]], on=keys, suffixes=("", "_train"))
    rows = []
    for label, encoding, K in _signature_order(merged):
        runs = merged[(merged["encoding"] == encoding) & (merged["K"] == K)]
        for run in runs.sort_values(["tau", "R"]).itertuples():
            row = {"Sign.": label, "τ": sparsity_label(run.tau), "R": int(run.R)}
            for suffix, initial, final in [
                ("", run.initial, run.final),
                (" (dot)", run.initial_dot, run.final_dot),
            ]:
                initial, final = _percent(initial), _percent(final)
                row[f"Thresholded PCA{suffix}"] = initial
                row[f"Learned{suffix}"] = final
                row[f"Gain{suffix}"] = np.round(final - initial, DECIMALS)
                if baselines is not None and not suffix:
                    row.update(_ablation_baselines(baselines, run, final))
            row["Train start (dot)"] = _percent(run.initial_train)
            row["Train end (dot)"] = _percent(run.final_train)
            rows.append(row)
    return pd.DataFrame(rows)


def _ablation_baselines(baselines, run, learned):
    """The baseline cells of one row of :func:`table2_ablation` (mAP in %, NaN where absent)."""
    at = baselines[(baselines["signature"] == run.signature) & (baselines["R"] == run.R)]
    cell = at.set_index("family")
    random = f"random sparse τ={run.tau:g}"

    def value(family, column="test_map"):
        return _percent(cell.at[family, column]) if family in cell.index else np.nan

    return {
        "Random sparse": value(random),
        "Random sparse s.d.": value(random, "test_map_std"),
        "Learned − random sparse": np.round(learned - value(random), DECIMALS),
        "Whitened PCA": value("whitened PCA"),
        "Gaussian RP": value("Gaussian RP"),
    }


def frontier_summary(records, cost, unit):
    """Who is on the Pareto front of test mAP against ``cost``, from the cheapest up.

    ``records``: comparison records (:mod:`ndir.comparison`) with a boolean ``front``
    column for this cost. Methods tied at one point are joined by ``" = "``;
    consecutive front points of one family and input are told together, e.g.
    ``"PQ (FV-256) from 12 to 34 bytes (mAP 61.2 to 70.3 %)"``; the parts are joined
    by ``"; then "``.
    """
    front = records[records["front"]]
    labels = front["method"].map(method_family) + " (" + front["signature"].map(input_label) + ")"
    points = (
        front.assign(label=labels)
        .groupby([cost, "test_map"], sort=True)["label"]
        .agg(lambda names: " = ".join(dict.fromkeys(sorted(names))))
        .reset_index()
    )
    parts = []
    for _, chunk in itertools.groupby(points.itertuples(index=False), key=lambda point: point.label):
        chunk = list(chunk)
        low, high = getattr(chunk[0], cost), getattr(chunk[-1], cost)
        where = f"at {low:.3g}" if len(chunk) == 1 else f"from {low:.3g} to {high:.3g}"
        maps = f"{100 * chunk[0].test_map:.1f}" + ("" if len(chunk) == 1 else f" to {100 * chunk[-1].test_map:.1f}")
        parts.append(f"{chunk[0].label} {where} {unit} (mAP {maps} %)")
    return "; then ".join(parts)


def frontier_table(records, fronts, costs):
    """The points on the accuracy-cost fronts, cheapest first.

    Parameters
    ----------
    records : DataFrame
        Comparison records (:mod:`ndir.comparison`).
    fronts : dict
        ``{cost column: boolean mask of the front}`` (:func:`ndir.comparison.pareto_front`).
    costs : dict
        ``{cost column: its unit in words}``.

    Returns
    -------
    DataFrame
        Front by (the unit), method, input, multiply-adds per query, bytes per
        database image and test mAP (%).
    """
    parts = []
    for cost, unit in costs.items():
        on = records[fronts[cost]].sort_values([cost, "test_map"])
        parts.append(
            pd.DataFrame(
                {
                    "Front by": unit,
                    "Method": on["method"],
                    "Input": on["signature"].map(input_label),
                    "Madds per query": on["madds_per_query"].round().astype(np.int64),
                    "Bytes per db image": on["db_bytes_per_image"].round().astype(np.int64),
                    "Test mAP": _percent(on["test_map"]),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def cost_table(costs, signature):
    """Storage and projection cost per (R, tau), in readable units.

    Parameters
    ----------
    costs : DataFrame
        One row per projector, with the keys of
        :func:`ndir.projection.projection_cost` and
        :func:`ndir.projection.projection_latency`, plus ``R``, ``tau`` and
        ``test_map`` in [0, 1].
    signature : str
        The signature projected, e.g. ``"fv-256"``.

    Returns
    -------
    DataFrame
        Non-zeros, KiB stored dense (float32) and sparse (CSC), storage ratio,
        multiply-adds per image, equivalent full projectors (nnz / D), the measured
        time of one signature and of the whole test split dense and sparse (µs) with
        their ratios, and the test mAP (%).
    """
    costs = costs.sort_values(["tau", "R"])
    return pd.DataFrame(
        {
            "Signature": signature,
            "R": costs["R"].astype(int),
            "τ": costs["tau"].map(sparsity_label),
            "Non-zeros": costs["nnz"].astype(int),
            "Dense KiB": costs["bytes_dense"] / 1024.0,
            "CSC KiB": costs["bytes_sparse"] / 1024.0,
            "Storage ratio": costs["storage_ratio"],
            "Madds dense": costs["madds_dense"].astype(int),
            "Madds sparse": costs["madds_sparse"].astype(int),
            "Full projectors eq.": costs["equivalent_full_projectors"],
            "One image dense µs": 1e6 * costs["single_dense_s"],
            "One image sparse µs": 1e6 * costs["single_sparse_s"],
            "One image speed-up": costs["single_speedup"],
            "Batch dense µs": 1e6 * costs["batch_dense_s"],
            "Batch sparse µs": 1e6 * costs["batch_sparse_s"],
            "Batch speed-up": costs["batch_speedup"],
            "Test mAP": _percent(costs["test_map"]),
        }
    ).reset_index(drop=True)


def method_family(method):
    """The family of a comparison row's method: ``"PCA R=64"`` -> ``"PCA"``,
    ``"sparse rank R=64 τ=0.99"`` -> ``"sparse rank τ=0.99"`` (the same for whitened
    and thresholded PCA, random projections), ``"PQ 16 B (PCA-32)"`` -> ``"PQ"``, ``"JCF-64-8 (K=64)"``
    -> ``"JCF-R-8 (K=64)"``, ``"factorised R=64 (K=1)"`` -> ``"factorised (K=1)"``."""
    if method.startswith("PQ"):
        return "PQ"
    projection = re.fullmatch(r"(.+) R=\d+( τ=\S+)?", method)
    if projection:
        return projection.group(1) + (projection.group(2) or "")
    jcf = re.fullmatch(r"JCF-\d+(-\d+)? (\(K=\d+\))(.*)", method)
    if jcf:
        return f"JCF-R{jcf.group(1) or ''} {jcf.group(2)}{jcf.group(3)}"
    factorised = re.fullmatch(r"factorised R=\d+ (.*)", method)
    if factorised:
        return f"factorised {factorised.group(1)}"
    return method


def input_label(signature):
    """How the tables print a record's input: ``"tfidf"`` -> ``"tf-idf"``, ``"fv-256"``
    -> ``"FV-256"``, ``"local-fv-64"`` (JCF's local features, seen through the FV-64
    codebook's PCA and GMM) -> ``"local (FV-64)"``."""
    if signature == "tfidf":
        return "tf-idf"
    if signature.startswith("local-"):
        return f"local ({signature.removeprefix('local-').upper()})"
    return signature.upper()


def seeds_comparison_table(records):
    """The comparison of sparse similarity learners, in readable units.

    Parameters
    ----------
    records : DataFrame
        One row per learned model, with the keys of
        :data:`ndir.comparison.RECORD_KEYS` (``test_map`` in [0, 1]) and, on UKBench,
        ``test_ns`` (:data:`ndir.comparison.NS_KEY`, out of 4).

    Returns
    -------
    DataFrame
        Method, input signature, query dimensions (or mean non-zeros), KiB stored for
        the model, bytes stored per database image, multiply-adds per query (mapping it,
        then scoring the test database), test mAP (%), the N-S score (``"N-S"``, 2
        decimals; only when the records have ``test_ns``), Recall@1 (%) and training
        seconds; rows by input (tf-idf first), then model size.
    """
    order = records.assign(
        input_order=records["signature"].map(lambda s: (s != "tfidf", s)),
    ).sort_values(["input_order", "model_bytes", "method"], kind="stable")
    ns = {"N-S": np.round(order[NS_KEY].astype(float), DECIMALS)} if NS_KEY in order else {}
    return pd.DataFrame(
        {
            "Method": order["method"],
            "Input": order["signature"].map(input_label),
            "Query dims": order["query_dims"].astype(float),
            "Model KiB": order["model_bytes"].astype(float) / 1024.0,
            "Bytes per db image": order["db_bytes_per_image"].round().astype(np.int64),
            "Madds per query": order["madds_per_query"].round().astype(np.int64),
            "Test mAP": _percent(order["test_map"]),
            **ns,
            "Recall@1": _percent(order["recall_at_1"]),
            "Train s": order["train_s"].astype(float),
        }
    ).reset_index(drop=True)


#: The ``family`` of the JCF records (:mod:`ndir.stages.jcf`), in the JCF table's order.
JCF_FAMILY_ORDER = ("second-order pooling", "codebook second-order pooling", "factorised", "JCF", "JCF shared")


def jcf_table(records):
    """The JCF table: second-order pooling, its codebook form and the factorisations.

    Parameters
    ----------
    records : DataFrame
        One row per evaluated representation (:mod:`ndir.stages.jcf`): ``method``,
        ``family``, ``K``, ``R`` and ``k`` (None where they do not apply),
        ``n_parameters``, ``dims``, ``initialisation`` (``none``, ``random`` or
        ``learned``), ``db_bytes_per_image``, ``test_map``, ``recall_at_1`` (in [0, 1]),
        ``train_s`` and, for the learned models, ``best_epoch``.

    Returns
    -------
    DataFrame
        Method, K, R, k (empty where they do not apply), parameters learned,
        dimensions, bytes per database image, test mAP (%), Recall@1 (%), best epoch
        and training seconds; the baselines first, then by family, R, k, each random
        initialisation just before its learned model.
    """
    order = records.assign(
        _family=records["family"].map(JCF_FAMILY_ORDER.index),
        _R=records["R"].fillna(0),
        _k=records["k"].fillna(0),
        _init=records["initialisation"].map({"none": 0, "random": 1, "learned": 2}),
    ).sort_values(["_family", "K", "_R", "_k", "_init"], kind="stable")
    learned = order["initialisation"] == "learned"
    best_epoch = order["best_epoch"] if "best_epoch" in order else pd.Series(np.nan, index=order.index)
    return pd.DataFrame(
        {
            "Method": order["method"],
            "K": order["K"].astype(int),
            "R": order["R"].astype("Int64"),
            "k": order["k"].astype("Int64"),
            "Parameters": order["n_parameters"].astype(np.int64),
            "Dims": order["dims"].astype(np.int64),
            "Bytes per db image": order["db_bytes_per_image"].round().astype(np.int64),
            "Test mAP": _percent(order["test_map"]),
            "Recall@1": _percent(order["recall_at_1"]),
            "Best epoch": best_epoch.where(learned).astype("Int64"),
            "Train s": order["train_s"].astype(float),
        }
    ).reset_index(drop=True)


def _check_results(results):
    """Validate the long results frame; return it with integer K, dim and R."""
    required = ["encoding", "K", "dim", "R", "map"]
    missing = [c for c in required if c not in results.columns]
    if missing:
        raise ValueError(f"results lack the columns {missing}; expected {required}")
    unknown = sorted(set(results["encoding"]) - set(ENCODING_LABELS))
    if unknown:
        raise ValueError(f"unknown encodings {unknown}; expected {list(ENCODING_LABELS)}")
    results = results.astype({"K": int, "dim": int, "R": int, "map": float})
    if not results["map"].between(0.0, 1.0).all():
        raise ValueError("results 'map' must lie in [0, 1] (a fraction, not a percentage)")
    duplicated = results.duplicated(["encoding", "K", "R"], keep=False)
    if duplicated.any():
        first = results.loc[duplicated, ["encoding", "K", "R"]].iloc[0].tolist()
        raise ValueError(f"results hold several rows for (encoding, K, R) = {first}")
    if (results.groupby(["encoding", "K"])["dim"].nunique() > 1).any():
        raise ValueError("results give several 'dim' values for one (encoding, K)")
    return results


# --------------------------------------------------------------------------- captions


#: INRIA Holidays as the paper used it: images and near-duplicate groups.
HOLIDAYS_IMAGES, HOLIDAYS_GROUPS = 1491, 500


def table_stem(files):
    """The stem ``results/tables/<name>`` of a table's three outputs, as the rule declares
    them (``report_table`` in workflow/rules/common.smk): ``<stem>.csv``, ``.md`` and
    ``.tex``, which :func:`ndir.report.write_table` writes. Refuses other files, which it
    would not write."""
    stem = Path(files[0]).with_suffix("")
    expected = [stem.with_suffix(suffix) for suffix in (".csv", ".md", ".tex")]
    if sorted(map(Path, files)) != sorted(expected):
        raise ValueError(f"a table's outputs are {[str(p) for p in expected]}, not {[str(p) for p in files]}")
    return stem


#: What a table's N-S columns count (on UKBench).
NS_NOTE = " N-S: UKBench's score, the query's group mates among its first 4 results, itself counted (out of 4)."


def is_inria_holidays(data_report):
    """Whether the data set of ``data_report`` (the JSON summary written by
    :func:`ndir.stages.data.index_dataset`) is INRIA Holidays itself: the
    ``holidays`` layout with its 1,491 images in 500 groups, not merely a folder in
    Holidays naming. Only then do the tables show the paper's values beside ours."""
    summary = _read_json(data_report)
    return (
        summary["kind"] == "holidays"
        and summary["n_images_found"] == HOLIDAYS_IMAGES
        and summary["n_groups"] == HOLIDAYS_GROUPS
    )


def table_caption(title, data_report, paper_table=True):
    """``title``, the data set and test split it was measured on, and, for a table the
    paper also has (``paper_table``), whether its values are shown
    (:func:`is_inria_holidays`) and why."""
    summary = _read_json(data_report)
    test = summary["splits"].get("test", {})
    caption = (
        f"{title}, {summary['kind']} data, test split "
        f"({test.get('n_groups', 0)} groups, {test.get('n_images', 0)} images)."
    )
    if not paper_table:
        return caption
    if is_inria_holidays(data_report):
        return (
            caption
            + " INRIA Holidays (1,491 images, 500 groups): the paper's values and ours minus them beside each column."
        )
    if summary["kind"] == "holidays":
        return caption + (
            f" Holidays naming, but not INRIA Holidays ({summary['n_images_found']:,} images, "
            f"{summary['n_groups']:,} groups, not 1,491 and 500): the paper's values are not shown."
        )
    return caption + " The paper's values (INRIA Holidays) are shown only on INRIA Holidays."


def n_test_queries(data_report):
    """Number of test queries of the data set of ``data_report``: one per test group,
    every test image on UKBench (a report written before it counted queries has only
    the groups)."""
    test = _read_json(data_report)["splits"]["test"]
    return test.get("n_queries", test["n_groups"])


def interval_note(n_queries):
    """Caption sentence for the bootstrap intervals printed beside each mAP."""
    return (
        f" Only {n_queries} test queries: each mAP is followed by its 95 % bootstrap interval over"
        " queries [low, high] (Markdown table)."
    )


def _read_json(path):
    with open(path) as f:
        return json.load(f)


# --------------------------------------------------------------------------- writing


def write_table(df, stem, caption=None, intervals=None):
    """Write ``df`` as ``stem.csv``, ``stem.md`` and ``stem.tex``.

    Float cells are printed with 2 decimals (``-0.00`` printed as ``0.00``), integers
    and strings as they are; missing values are empty in CSV and Markdown and ``--`` in
    LaTeX. The index is not written. The output is a function of the frame only, so
    the same frame gives byte-identical files. Each file is written to a temporary
    file beside it and then renamed, so a crash never leaves a half-written table.

    Parameters
    ----------
    df : DataFrame
        The table, e.g. from :func:`table1`.
    stem : str or Path
        Output path without suffix; its folder is created if needed.
    caption : str, optional
        Printed above the Markdown table and as the LaTeX ``\\caption``.
    intervals : (DataFrame, DataFrame), optional
        Lower and upper bounds laid out like ``df`` (e.g. :func:`table1` of the
        bounds); the Markdown file prints ``value [low, high]`` (1 decimal) in the
        cells where both are given. CSV and LaTeX keep the values alone.

    Returns
    -------
    list of Path
        The three files written (csv, md, tex).
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    cells = df.apply(_format_column).reset_index(drop=True)
    numeric = [is_numeric_dtype(df[c]) for c in df.columns]

    csv = cells.to_csv(index=False, lineterminator="\n")
    markdown = _with_intervals(cells, df, intervals).to_markdown(
        index=False,
        disable_numparse=True,
        colalign=["right" if n else "left" for n in numeric],
    )
    if caption:
        markdown = f"{caption}\n\n{markdown}"
    latex = _latex(cells, numeric, caption)

    paths = [stem.with_name(f"{stem.name}.{ext}") for ext in ("csv", "md", "tex")]
    for path, text in zip(paths, (csv, markdown + "\n", latex)):
        with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return paths


def _with_intervals(cells, df, intervals):
    """String cells with `` [low, high]`` appended where ``intervals`` bound them."""
    if intervals is None:
        return cells
    low, high = (bound.reset_index(drop=True) for bound in intervals)
    cells = cells.copy()
    for column in df.columns:
        if column not in low.columns or not is_float_dtype(df[column]):
            continue
        known = low[column].notna() & high[column].notna() & df[column].reset_index(drop=True).notna()
        cells.loc[known, column] = [
            f"{cell} [{a:.1f}, {b:.1f}]"
            for cell, a, b in zip(cells.loc[known, column], low.loc[known, column], high.loc[known, column])
        ]
    return cells


def _format_column(column):
    """Cells of one column as strings (see :func:`write_table`)."""
    if is_float_dtype(column):
        # Adding 0.0 turns a rounded -0.0 into 0.0.
        return column.map(lambda v: "" if np.isnan(v) else f"{np.round(v, DECIMALS) + 0.0:.{DECIMALS}f}")
    return column.map(lambda v: "" if pd.isna(v) else str(v))


def _latex(cells, numeric, caption):
    """A booktabs tabular of string cells, inside a table environment when captioned."""

    def line(values):
        return " & ".join(values) + r" \\"

    body = [
        r"\begin{tabular}{" + "".join("r" if n else "l" for n in numeric) + "}",
        r"\toprule",
        line(str(c).translate(_LATEX_ESCAPES) for c in cells.columns),
        r"\midrule",
        *(line(v.translate(_LATEX_ESCAPES) or "--" for v in row) for row in cells.itertuples(index=False)),
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if caption:
        body = [
            r"\begin{table}[htbp]",
            r"\centering",
            r"\caption{" + caption.translate(_LATEX_ESCAPES) + "}",
            *body,
            r"\end{table}",
        ]
    return "\n".join(body) + "\n"
