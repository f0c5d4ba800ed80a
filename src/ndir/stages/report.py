"""Stage of ``workflow/rules/report.smk``: the run's provenance, written last."""

import json

from ..provenance import run_info as gather_run_info
from .common import write_json


def write_run_info(data_report, outputs, run_info, config, benchmarks, repo):
    """Write ``results/run_info.json`` once every table and figure exists.

    ``outputs`` (the final tables and figures) are inputs only so that this runs
    last, when every job's benchmark file is there to be summarised.
    """
    with open(data_report) as f:
        summary = json.load(f)
    write_json(gather_run_info(config, summary, benchmarks, repo), run_info)
