"""The run's final tables and figures are listed once, by ``final_outputs()`` in
workflow/rules/common.smk: rule all and write_run_info ask for that list, and a table or
figure a rule puts in the report without being on it fails here."""

from collections import Counter
from contextlib import contextmanager

import pytest
from snakemake.api import SnakemakeApi
from snakemake.io import is_flagged
from snakemake.settings.types import ConfigSettings, OutputSettings, Quietness, ResourceSettings

from .conftest import REPO

#: write_run_info's own files: the run's provenance, in the report beside the results.
PROVENANCE = {"results/run_info.json", "results/hardware.html"}


@contextmanager
def parsed_workflow(config, workdir):
    """The workflow's rules and globals, parsed (no DAG built, nothing run) with ``config``."""
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[REPO / config]),
            snakefile=REPO / "Snakefile",
            workdir=workdir,
        )
        yield workflow_api._workflow  # snakemake's API gives the rules no public door


@pytest.mark.parametrize("config", ["config.yaml", "tests/configs/tiny.yaml"])
def test_all_and_write_run_info_ask_for_the_final_outputs_and_the_report_holds_no_other(config, tmp_path):
    with parsed_workflow(config, tmp_path) as workflow:
        final = workflow.globals["final_outputs"]()
        rules = {rule.name: rule for rule in workflow.rules}
    assert len(final) == len(set(final)) > 0
    assert set(map(str, rules["all"].input)) == set(final) | {"results/run_info.json"}
    assert set(final) <= set(map(str, rules["write_run_info"].input))
    # Each final output is written by one rule, and every file a rule puts in the
    # report (seeds and JCF included: both configs enable them) is a final output.
    writers = Counter(str(path) for rule in workflow.rules for path in rule.output)
    assert all(writers[path] == 1 for path in final), [path for path in final if writers[path] != 1]
    reported = {str(path) for rule in workflow.rules for path in rule.output if is_flagged(path, "report")}
    assert reported - PROVENANCE <= set(final), sorted(reported - PROVENANCE - set(final))


@pytest.mark.parametrize("config", ["config.yaml", "tests/configs/tiny.yaml"])
def test_the_readings_are_a_final_output_and_read_what_they_check(config, tmp_path):
    """The readings table is on the list, and its rule reads the tables whose cells it
    checks and every file it recomputes per-query APs from: the Table II projectors and
    their histories, Figures 2-3's histories, the seeds' and JCF's models and records."""
    with parsed_workflow(config, tmp_path) as workflow:
        final = workflow.globals["final_outputs"]()
        tables = workflow.globals["table_files"]("readings")
        rules = {rule.name: rule for rule in workflow.rules}
    assert set(tables) <= set(final)
    assert set(map(str, rules["readings"].output)) == set(tables)
    inputs = set(map(str, rules["readings"].input))
    assert {f"results/tables/{name}.csv" for name in ("table1", "table2", "costs")} <= inputs
    histories = {str(path) for path in rules["table2"].input if str(path).startswith("results/sparse/")}
    assert histories | {path.removesuffix(".csv") + ".npz" for path in histories} <= inputs
    assert {str(path) for path in rules["convergence_figures"].input} <= inputs
    seeds = {str(path) for path in rules["seeds_comparison"].input if "tfidf" in str(path) or "similarity" in str(path)}
    assert seeds and seeds <= inputs
    assert {path.removesuffix(".json") + ".npz" for path in seeds if path != "results/seeds/tfidf.json"} <= inputs
    jcf = {str(path) for path in rules["jcf_report"].input if "/jcf/" in str(path) and "random" not in str(path)}
    assert jcf and jcf <= inputs
    assert {path.removesuffix(".json") + ".npz" for path in jcf if "pooling" not in path} <= inputs
