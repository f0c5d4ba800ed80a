"""Stages of ``workflow/rules/report.smk``: the retrievals figure, and the run's
provenance, written last."""

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from ndir.atomic import atomic_output, write_json
from ndir.encoding import l2_normalise_rows
from ndir.errors import ResultFileError, rebuild_advice
from ndir.evaluation import misses_near_duplicates, top_k
from ndir.projection import load_projector
from ndir.provenance import hardware_table
from ndir.provenance import run_info as gather_run_info
from ndir.stages.common import read_image_table, split_signatures

logger = logging.getLogger(__name__)

#: ``results/hardware.html``: the table of :func:`ndir.provenance.hardware_table`.
HARDWARE_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Hardware of the run</title></head>
<body>
{table}
</body></html>
"""


def write_run_info(data_report, outputs, run_info, hardware, config, benchmarks, repo):
    """Write ``results/run_info.json`` once every table and figure exists, and its
    ``hardware`` part as an HTML table (``results/hardware.html``, in the HTML report).

    ``outputs`` (the final tables and figures) are inputs only so that this runs
    last, when every job's benchmark file is there to be summarised.
    """
    with open(data_report) as f:
        summary = json.load(f)
    info = gather_run_info(config, summary, benchmarks, repo)
    write_json(info, run_info)
    table = hardware_table(info["hardware"]).to_html(index=False, na_rep="unknown", border=0)
    with atomic_output(hardware) as tmp:
        Path(tmp).write_text(HARDWARE_PAGE.format(table=table))


# --------------------------------------------------------------------------- retrievals


def pick_queries(failed, n, seed):
    """``n`` query indices drawn at random with ``seed``, in increasing order; one of
    them is drawn among the ``failed`` queries when any failed.

    ``failed`` : (n_queries,) bool. Fewer than ``n`` queries: all of them.
    """
    failed = np.asarray(failed, dtype=bool)
    n = min(int(n), failed.size)
    rng = np.random.default_rng(seed)
    chosen = []
    if n > 0 and failed.any():
        chosen.append(int(rng.choice(np.flatnonzero(failed))))
    rest = np.setdiff1d(np.arange(failed.size), chosen)
    chosen += [int(i) for i in rng.choice(rest, size=n - len(chosen), replace=False)]
    return sorted(chosen)


def retrievals_figure(images, signatures, projector, figure, signature, n_queries, k, seed):
    """The retrievals figure: ``n_queries`` test queries (seeded choice, at least one
    whose top ``k`` misses near duplicates under some method, when one does) and their
    top ``k`` under the full signature, PCA to R (fitted on the training split, as in
    Table I) and the sparse projector (R and tau of ``projector``), reduced signatures
    L2-normalised as in Tables I and II; each method's AP for that query is printed.

    ``signature``: the name of the ``signatures``, which the projector must have been
    learned on. ``figure``: the files to write (PNG and PDF).
    """
    from ndir.figures import retrievals_figure as draw  # matplotlib, only for the stages that draw
    from ndir.projection import PCAProjection  # scikit-learn: not for the other stages of this module

    U, meta = load_projector(projector)
    if meta.get("signature", signature) != signature:
        raise ResultFileError(
            f"{projector}: projector for {meta['signature']}, not {signature}; {rebuild_advice(projector)}"
        )
    R, tau = U.shape[1], meta["sparsity"]
    table = read_image_table(images)
    test = table[table["split"] == "test"].reset_index(drop=True)
    splits = split_signatures(images, signatures)
    X_train = splits["train"][0]
    X_test, groups, is_query = splits["test"]
    query_rows = np.flatnonzero(is_query)
    k = min(int(k), len(test) - 1)
    # Reduced signatures are L2-normalised, as Tables I and II score them.
    methods = {
        f"{signature.upper()}\n(full, D = {X_test.shape[1]:,})": X_test,
        f"PCA\nR = {R}": PCAProjection(n_components=R).fit(X_train).transform(X_test),
        f"sparse rank\nR = {R}, τ = {tau:g}": l2_normalise_rows(X_test @ U.toarray()),
    }
    ranked = {method: top_k(Y, query_rows, groups, k) for method, Y in methods.items()}
    failed = np.any([misses_near_duplicates(top, query_rows, groups) for top, _ in ranked.values()], axis=0)
    chosen = pick_queries(failed, n_queries, seed)
    paths = test["path"].to_numpy(dtype=str)
    blocks = []
    for i in chosen:
        row = query_rows[i]
        n_positives = int((groups == groups[row]).sum() - 1)
        near_duplicates = f"{n_positives} near duplicate{'s' if n_positives > 1 else ''}"
        blocks.append(
            {
                "query": paths[row],
                "label": f"query {test['image_id'][row]}\n{near_duplicates}",
                "methods": [
                    {
                        "name": method,
                        "results": paths[top[i]].tolist(),
                        "relevant": (groups[top[i]] == groups[row]).tolist(),
                        "ap": float(ap[i]),
                    }
                    for method, (top, ap) in ranked.items()
                ],
            }
        )
        logger.info(
            "query %s (%s): AP %s%s",
            test["image_id"][row],
            near_duplicates,
            ", ".join(f"{m.replace(chr(10), ' ')} {100 * ap[i]:.1f} %" for m, (_, ap) in ranked.items()),
            f" (misses near duplicates in its top {k})" if failed[i] else "",
        )
    logger.info(
        "%d of %d test queries miss near duplicates in their top %d under some method", failed.sum(), failed.size, k
    )
    title = (
        f"{signature.upper()}, test split: {len(chosen)} queries (blue) and their top {k}; "
        "green: near duplicate, red: not; AP of the query under each method"
    )
    draw(blocks, list(figure), title=title)


def finished_run(table1, table2, tables, figures):
    """The console's lines at the end of a successful run: one headline of Tables I and
    II's test mAP (the range over their cells: ours alone, without the paper's columns
    of Holidays or UKBench's N-S scores), then where the tables, figures and report are.

    ``table1``, ``table2``: their CSV files (a run of other targets may have none);
    ``tables``, ``figures``: the folders that hold every table and figure.
    """
    ranges = []
    for path, parts in ((table1, {"Full": "full signatures", None: "PCA to R"}), (table2, {None: "learned sparse"})):
        if not Path(path).is_file():
            continue
        frame = pd.read_csv(path)
        ours = [
            c
            for c in frame.columns
            if c not in ("Sign.", "Dim.") and not c.endswith(("(paper)", "(Δ)")) and not c.startswith("N-S")
        ]
        for column, label in parts.items():
            columns = [column] if column else [c for c in ours if c not in parts]
            values = frame[columns].to_numpy(float)
            ranges.append(f"{label} {np.nanmin(values):.1f}–{np.nanmax(values):.1f} %")
    lines = []
    if ranges:
        lines.append(f"ndir: test mAP over the signatures: {', '.join(ranges)} ({table1}, {table2})")
    lines.append(
        f"ndir: every table in {tables}/ (csv, md, tex), the figures in {figures}/, provenance in "
        "results/run_info.json; one HTML page of them all: snakemake --report results/report.html"
    )
    return lines
