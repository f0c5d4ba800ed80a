"""Configuration checks that the JSON schema alone cannot do."""

import pytest
import yaml
from snakemake.utils import update_config, validate

from ndir.config import check_config, coerce_config_strings, schema_errors
from ndir.errors import ConfigError

from .conftest import REPO, run_snakemake

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


def test_nested_command_line_strings_become_the_schema_types():
    # What `--config 'dataset={"kind": "holidays", "train_fraction": 0.5}'` delivers:
    # YAML's base loader keeps every nested scalar a string.
    config = {
        "seed": "3",
        "dataset": {"kind": "holidays", "path": "/data/x", "train_fraction": "0.5", "keep_together": "null"},
        "sparse": {"margin": "1e-2", "renormalize": "false", "sparsity": ["0.9", "0.99"], "dims": ["32"]},
        "seeds": {"soml": {"variants": ["tg"], "signatures": ["tfidf"]}},
    }
    coerce_config_strings(config, SCHEMA)
    assert config["seed"] == 3 and config["dataset"]["train_fraction"] == 0.5
    assert config["dataset"]["keep_together"] is None and config["dataset"]["path"] == "/data/x"
    assert config["sparse"] == {"margin": 0.01, "renormalize": False, "sparsity": [0.9, 0.99], "dims": [32]}
    assert config["seeds"]["soml"]["signatures"] == ["tfidf"]  # strings stay strings


def test_strings_that_are_not_the_schema_type_are_left_for_validation():
    config = {"seed": "true", "dataset": {"train_fraction": "half", "kind": "123"}}
    coerce_config_strings(config, SCHEMA)
    # An integer key does not take a boolean; a string key keeps its text.
    assert config == {"seed": "true", "dataset": {"train_fraction": "half", "kind": "123"}}


@pytest.mark.workflow  # starts Snakemake (a dry run, 10 s)
@pytest.mark.parametrize(
    "value",
    [
        '{"kind": "holidays", "path": "HOLIDAYS", "train_fraction": 0.5}',  # JSON, as in the issue
        "{kind: holidays, path: HOLIDAYS, train_fraction: 0.5}",  # YAML flow, as configs/holidays.yaml says
    ],
)
def test_command_line_dataset_override_is_accepted(tmp_path, value):
    holidays = tmp_path / "holidays"
    holidays.mkdir()
    result = run_snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(REPO / "config.yaml"),
        "--config",
        "dataset=" + value.replace("HOLIDAYS", str(holidays)),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def default_config():
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, schema=str(REPO / "workflow/schemas/config.schema.yaml"))
    return config


def test_schema_errors_name_each_wrong_key_and_the_nearest_known_ones():
    config = default_config()
    assert schema_errors(config, SCHEMA) == []
    config["sede"] = 1
    config["sparse"]["max_iters"] = 100
    config["sparse"]["dims"] = [32, "x"]
    config["embedded"]["n_groups"] = 0
    config["seeds"]["soml"]["zzz"] = 1
    assert schema_errors(config, SCHEMA) == [
        "embedded.n_groups: 0 is less than the minimum of 4",
        "sede: unknown key; did you mean seed or seeds?",
        "seeds.soml.zzz: unknown key; the keys here are seeds.soml.da, seeds.soml.epochs, "
        "seeds.soml.negatives_per_pair, seeds.soml.signatures, seeds.soml.tg, seeds.soml.variants",
        "sparse.dims[1]: 'x' is not of type 'integer'",
        "sparse.max_iters: unknown key; did you mean sparse.max_iter?",
    ]


@pytest.mark.workflow  # starts Snakemake (a dry run, 10 s)
def test_a_misspelled_key_is_named_in_a_few_lines_by_the_workflow(tmp_path):
    (tmp_path / "typo.yaml").write_text("sparse: {max_iters: 100}\n")
    bad = run_snakemake(
        tmp_path, "-n", "--configfile", str(REPO / "config.yaml"), str(tmp_path / "typo.yaml"), check=False
    )
    output = bad.stdout + bad.stderr
    assert bad.returncode != 0
    assert "sparse.max_iters: unknown key; did you mean sparse.max_iter?" in output
    assert "config.schema.yaml" in output and len(output.splitlines()) < 30, output


def test_a_path_with_the_embedded_set_is_an_error_not_ignored():
    config = default_config()
    config["dataset"]["path"] = "/data/my_images"
    with pytest.raises(
        ConfigError, match="dataset.path: '/data/my_images' is not read when dataset.kind is 'embedded'"
    ):
        check_config(config)


@pytest.mark.workflow  # starts Snakemake (a dry run, 10 s)
@pytest.mark.parametrize("kind", ["holidays", "ukbench"])
def test_holidays_and_ukbench_without_a_path_are_fetched_first(tmp_path, kind):
    config = default_config()
    config["dataset"] = {**config["dataset"], "kind": kind, "path": None}
    check_config(config)
    plan = run_snakemake(tmp_path, "-n", "--configfile", str(REPO / f"configs/{kind}.yaml"), check=False)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "rule fetch_dataset:" in plan.stdout and f"data/{kind}/images" in plan.stdout


def test_folders_need_a_path():
    config = default_config()
    config["dataset"] = {**config["dataset"], "kind": "folders", "path": None}
    with pytest.raises(
        ConfigError, match="dataset.path: required when dataset.kind is 'folders'; set it to the folder"
    ):
        check_config(config)


@pytest.mark.workflow  # starts Snakemake (a dry run, 10 s)
def test_command_line_value_of_the_wrong_type_is_named(tmp_path):
    bad = run_snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(REPO / "config.yaml"),
        "--config",
        "dataset={train_fraction: half}",
        check=False,
    )
    assert bad.returncode != 0 and "'half' is not of type 'number'" in bad.stdout + bad.stderr


@pytest.mark.parametrize("name", sorted(path.name for path in (REPO / "configs").glob("*.yaml")))
def test_every_shipped_config_is_valid_on_top_of_the_default(tmp_path, name):
    # As `--configfile configs/X.yaml` layers it on config.yaml; the data sets on disk
    # elsewhere get an empty folder for their path, as a user's `--config dataset=...`.
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "configs" / name).read_text()))
    if config["dataset"]["kind"] != "embedded":
        config["dataset"]["path"] = str(tmp_path)
    validate(config, schema=str(REPO / "workflow/schemas/config.schema.yaml"))
    check_config(config)


@pytest.mark.parametrize("name", ["holidays.yaml", "ukbench.yaml"])
def test_the_paper_data_sets_keep_the_papers_half_split_over_the_embedded_default(name):
    # The embedded default trains on 60 % of its groups (docs/data.md); Holidays' protocol
    # trains on 250 of its 500 groups, and the shipped configs of the real sets must say so.
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert config["dataset"]["train_fraction"] == 0.6
    update_config(config, yaml.safe_load((REPO / "configs" / name).read_text()))
    assert config["dataset"]["train_fraction"] == 0.5


def test_inria_holidays_keeps_the_papers_stop_where_the_default_stops_on_a_flat_map():
    # The default run stops a training once its training mAP is flat (docs/method.md,
    # deviation 7); on INRIA Holidays itself the paper's stop: 2,000 steps or tol.
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert config["sparse"]["flat_map_evaluations"] == 4
    update_config(config, yaml.safe_load((REPO / "configs" / "holidays.yaml").read_text()))
    assert config["sparse"]["flat_map_evaluations"] is None and config["sparse"]["max_iter"] == 2000


def test_only_the_timing_grid_stops_at_a_perfect_training_map():
    # The default and INRIA Holidays train on; configs/holidays_scale.yaml, a timing
    # config, stops at a training mAP of 1 (docs/method.md, deviation 7).
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert config["sparse"]["stop_at_perfect_map"] is False
    for name, stops in [("holidays.yaml", False), ("holidays_scale.yaml", True)]:
        merged = yaml.safe_load((REPO / "config.yaml").read_text())
        update_config(merged, yaml.safe_load((REPO / "configs" / name).read_text()))
        assert merged["sparse"]["stop_at_perfect_map"] is stops, name


def test_pq_bytes_that_are_no_whole_number_of_indices_are_named():
    config = default_config()
    config["baseline"]["pq"] = {"bytes": [8, 3], "nbits": 16, "subvector_dims": 2}
    with pytest.raises(ConfigError, match=r"baseline.pq.bytes: \[3\] bytes are no whole number of 16-bit"):
        check_config(config)


# --------------------------------------------------------------------------- one home per default


def _schema_keys(schema, path=""):
    """Every key the schema describes, as dotted paths (objects inside lists left out)."""
    for key, sub in schema.get("properties", {}).items():
        dotted = f"{path}.{key}" if path else key
        yield dotted, sub
        yield from _schema_keys(sub, dotted)


def test_every_default_lives_in_config_yaml_alone():
    """The schema has types, ranges and descriptions but no default, and config.yaml
    gives every key the schema describes a value (a key added to one and not the other fails)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for dotted, sub in _schema_keys(SCHEMA):
        assert "default" not in sub, f"{dotted}: a default in the schema; its value belongs in config.yaml"
        parent, _, key = dotted.rpartition(".")
        node = config
        for part in parent.split(".") if parent else []:
            node = node[part]
            if node is None:  # a nullable object left null (dataset.keep_together)
                break
        else:
            assert key in node, f"{dotted}: described by the schema, but config.yaml gives it no value"


def test_a_key_missing_after_the_merge_is_named_not_filled_in():
    from ndir.config import merged, raise_schema_errors, require_every_key
    from ndir.errors import ConfigError

    schema = require_every_key(yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text()))
    config = merged(yaml.safe_load((REPO / "config.yaml").read_text()), {"sparse": {"dims": [16]}})
    raise_schema_errors(config, schema)
    assert config["sparse"]["dims"] == [16] and config["sparse"]["max_iter"] == 200  # merged key by key
    del config["sparse"]["max_iter"]
    with pytest.raises(ConfigError, match=r"sparse: 'max_iter' is a required property"):
        raise_schema_errors(config, schema)


def _rule_params():
    """``{rule: (param names, the stage function its shim runs)}`` of every script rule."""
    import ast
    import importlib
    import re

    found = {}
    for smk in sorted((REPO / "workflow/rules").glob("*.smk")):
        for rule in re.finditer(r"^rule (\w+):\n((?:    .*\n|\n)*)", smk.read_text(), re.M):
            body = rule.group(2)
            params = re.search(r"^    params:\n((?:        .*\n|\n)*)", body, re.M)
            script = re.search(r'script:\n\s+"\.\./scripts/(\w+)\.py"', body)
            if not (params and script):
                continue
            shim = ast.parse((REPO / "workflow/scripts" / f"{script.group(1)}.py").read_text())
            modules = {
                alias.name: node.module
                for node in shim.body
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }
            call = next(
                node
                for node in ast.walk(shim)
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "run_rule"
            )
            name = call.args[1].id
            stage = getattr(importlib.import_module(modules[name]), name)
            found[rule.group(1)] = (set(re.findall(r"^        (\w+)=", params.group(1), re.M)), stage)
    return found


def test_stage_functions_take_no_default_for_what_a_rule_passes():
    import inspect

    rules = _rule_params()
    assert {"train_sparse_projector", "train_jcf", "index_dataset", "readings"} <= set(rules)
    defaulted = [
        f"{rule}: {stage.__module__}.{stage.__name__}({parameter.name}={parameter.default!r})"
        for rule, (params, stage) in rules.items()
        for parameter in inspect.signature(stage).parameters.values()
        if parameter.name in params and parameter.default is not inspect.Parameter.empty
    ]
    assert not defaulted, "a second home for values config.yaml passes: " + "; ".join(defaulted)


def _sparse_tables():
    from ndir.projection import SparseRankProjector, sparse_rank
    from ndir.stages import sparse

    grid = {"n_components": 32, "sparsity": 0.9}
    return sparse_rank, SparseRankProjector, sparse_rank.projector_params, grid, sparse, set(sparse.MAP_STOP_KEYS)


def _jcf_tables():
    import ndir.jcf
    from ndir.stages import jcf

    return ndir.jcf, ndir.jcf.JCF, ndir.jcf.jcf_params, {"n_components": 32, "n_shared": 4}, jcf, set()


@pytest.mark.parametrize(("path", "tables"), [(("sparse",), _sparse_tables), (("seeds", "jcf"), _jcf_tables)])
def test_each_key_of_a_section_reaches_its_estimator_through_the_one_table(path, tables):
    """config.yaml's section and its estimator's CONFIG_PARAMETERS (ndir.projection.sparse_rank,
    ndir.jcf) agree: every key sets an estimator parameter (the table) or is one of
    CONFIG_OTHERS, never both; each parameter the table names is the estimator's, named
    once; the rule's ``settings`` (the stage's training_settings) are the table's keys but
    the grid, and the stage's own; and an estimator built from them holds each value
    under the table's name."""
    module, estimator, build, grid, stage, stage_keys = tables()
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    section = config
    for key in path:
        section = section[key]
    name = ".".join(path)
    unplaced = set(section) - set(module.CONFIG_PARAMETERS) - set(module.CONFIG_OTHERS)
    assert not unplaced, f"{name}.{', {name}.'.join(sorted(unplaced))}: in no table of {module.__name__}"
    assert not set(module.CONFIG_PARAMETERS) & set(module.CONFIG_OTHERS)
    stale = (set(module.CONFIG_PARAMETERS) | set(module.CONFIG_OTHERS)) - set(section)
    assert not stale, f"{sorted(stale)}: in {module.__name__}'s tables, not in config.yaml's {name} section"
    parameters = list(module.CONFIG_PARAMETERS.values())
    assert set(parameters) <= set(estimator(1).get_params()) and len(set(parameters)) == len(parameters)
    assert set(module.CONFIG_GRID) <= set(module.CONFIG_PARAMETERS)
    assert set(stage.TRAINING_KEYS) == (set(module.CONFIG_PARAMETERS) - set(module.CONFIG_GRID)) | stage_keys
    settings = stage.training_settings(section)
    assert set(settings) == set(stage.TRAINING_KEYS)
    built = estimator(**build(settings, *grid.values(), config["seed"])).get_params()
    for key, parameter in module.CONFIG_PARAMETERS.items():
        if key not in module.CONFIG_GRID:
            assert built[parameter] == section[key], key
    assert {**{key: built[key] for key in grid}, "random_state": built["random_state"]} == {
        **grid,
        "random_state": config["seed"],
    }
