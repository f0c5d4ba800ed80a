"""Stages of ``workflow/rules/baseline.smk``: full signatures and their PCA reductions (Table I)."""

import logging
from pathlib import Path

import pandas as pd

from .. import report
from ..evaluation import holidays_map
from ..projection import PCAProjection
from .common import is_inria_holidays, signature_name, split_signatures, table_caption, write_csv

logger = logging.getLogger(__name__)


def evaluate_pca_baseline(images, signatures, results, dims):
    """Test-split mAP of full signatures and of PCA-R reductions fitted on train.

    Writes a CSV with columns ``signature, encoding, K, dim, R, map`` (R = 0 for
    the full signature, mAP in [0, 1]) — the rows of the paper's Table I.
    """
    name = signature_name(signatures)
    encoding_name, K = name.split("-")
    splits = split_signatures(images, signatures)
    X_train, _, _ = splits["train"]
    X_test, groups, is_query = splits["test"]
    rows = [{"R": 0, "map": holidays_map(X_test, groups, is_query)}]
    for R in dims:
        projection = PCAProjection(n_components=R).fit(X_train)
        rows.append({"R": R, "map": holidays_map(projection.transform(X_test), groups, is_query)})
    out = pd.DataFrame(rows)
    out.insert(0, "dim", X_test.shape[1])
    out.insert(0, "K", int(K))
    out.insert(0, "encoding", encoding_name)
    out.insert(0, "signature", name)
    write_csv(out, results)
    logger.info("%s: %s", name, out.to_dict("records"))


def table1(results, data_report, table):
    """Assemble Table I (mAP in % on the test split) in CSV, Markdown and LaTeX, with
    the paper's values beside ours on INRIA Holidays (:func:`is_inria_holidays`)."""
    rows = pd.concat([pd.read_csv(path) for path in results], ignore_index=True)
    paper = report.load_paper_table1() if is_inria_holidays(data_report) else None
    frame = report.table1(rows, paper=paper)
    title = "Table I: mAP (%) of VLAD and FV signatures and of their PCA reductions to R dims"
    caption = table_caption(title, data_report)
    report.write_table(frame, Path(table[0]).with_suffix(""), caption=caption)
