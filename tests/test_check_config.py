"""Each rule of :func:`ndir.config.check_config`, on both sides of its boundary, from
the default config (which passes) with one value changed: the error names the key."""

import copy

import pytest
import yaml
from snakemake.utils import validate

from ndir.config import check_config, raise_schema_errors, signature_dim
from ndir.errors import ConfigError

from .conftest import REPO

DEFAULTS = yaml.safe_load((REPO / "config.yaml").read_text())
SCHEMA = str(REPO / "workflow/schemas/config.schema.yaml")


def config_with(**changes):
    """The default config with ``changes`` (dotted keys, ``"seeds.jcf.dims"``), validated
    by the schema as the workflow does."""
    config = copy.deepcopy(DEFAULTS)
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[last] = value
    validate(config, SCHEMA)
    return config


def refused(key, says, **changes):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("[", r"\[")) as error:
        check_config(config_with(**changes))
    assert says in str(error.value), str(error.value)


def test_the_default_config_passes():
    check_config(config_with())


def test_signature_dim_is_k_d_for_vlad_and_2_k_d_for_fv():
    assert signature_dim("vlad", 64, 80) == 5120 and signature_dim("fv", 64, 80) == 10240


# --------------------------------------------------------------------------- dataset


def test_a_path_for_the_embedded_set_is_refused(tmp_path):
    refused("dataset.path", "is not read when dataset.kind is 'embedded'", **{"dataset.path": str(tmp_path)})


def test_folders_require_a_path_holidays_and_ukbench_are_fetched_without_one():
    refused("dataset.path", "required when dataset.kind is 'folders'", **{"dataset.kind": "folders"})
    refused("dataset.path", "required", **{"dataset.kind": "folders", "dataset.path": ""})
    for kind in ("holidays", "ukbench"):
        check_config(config_with(**{"dataset.kind": kind}))  # downloaded by rule fetch_dataset


def test_the_path_must_be_a_folder(tmp_path):
    afile = tmp_path / "images.zip"
    afile.write_text("")
    for kind in ("holidays", "folders"):
        for path in (afile, tmp_path / "missing"):
            refused("dataset.path", "is not a folder", **{"dataset.kind": kind, "dataset.path": str(path)})
        check_config(config_with(**{"dataset.kind": kind, "dataset.path": str(tmp_path)}))


# --------------------------------------------------------------------------- output dimensions

#: The smallest signature of the default grid: VLAD-64 on PCA-80, 5120 dimensions.
SMALLEST = 64 * 80


@pytest.mark.parametrize("key", ["baseline.dims", "sparse.dims"])
def test_output_dimensions_stay_below_the_smallest_signature(key):
    check_config(config_with(**{key: [32, SMALLEST - 1]}))
    refused(key, f"[{SMALLEST}] not below the smallest signature dimension ({SMALLEST})", **{key: [32, SMALLEST]})
    refused(key, f"[{SMALLEST + 1}]", **{key: [SMALLEST + 1, 16]})


def test_the_convergence_dimension_stays_below_the_smallest_signature():
    check_config(config_with(**{"sparse.convergence_dim": SMALLEST - 1}))
    refused("sparse.convergence_dim", f"[{SMALLEST}] not below", **{"sparse.convergence_dim": SMALLEST})


def test_the_smallest_signature_is_over_every_encoding_and_size():
    # FV only: the smallest is FV-64, 2 * 64 * 80; VLAD only with K >= 128: 128 * 80.
    fv_only = {"signatures.encodings": ["fv"], "seeds.enabled": False}
    check_config(config_with(**fv_only, **{"sparse.dims": [2 * SMALLEST - 1]}))
    refused("sparse.dims", f"({2 * SMALLEST})", **fv_only, **{"sparse.dims": [2 * SMALLEST]})
    large = {"signatures.codebook_sizes": [256, 128], "seeds.enabled": False}
    refused("baseline.dims", f"({2 * SMALLEST})", **large, **{"baseline.dims": [2 * SMALLEST]})
    check_config(config_with(**large, **{"baseline.dims": [2 * SMALLEST - 1]}))
    # The PCA's dimension enters: pca_dims 40 halves it.
    refused("baseline.dims", f"({SMALLEST // 2})", **{"codebooks.pca_dims": 40, "baseline.dims": [SMALLEST // 2]})


# --------------------------------------------------------------------------- seeds


@pytest.mark.parametrize("key", ["seeds.soml.signatures", "seeds.comparison_signatures"])
def test_seed_signatures_must_be_computed_by_the_grid(key):
    refused(key, "['fv-512'] not among the signatures the workflow computes", **{key: ["fv-256", "fv-512"]})
    refused(key, "['vlad-32']", **{key: ["vlad-32"]})
    check_config(config_with(**{key: ["vlad-64", "fv-128"]}))
    # Disabled seeds are not checked.
    check_config(config_with(**{key: ["fv-512"], "seeds.enabled": False}))


def test_tfidf_needs_no_signature_of_the_grid():
    check_config(config_with(**{"seeds.soml.signatures": ["tfidf"]}))


def test_jcf_sizes_need_a_fisher_codebook_of_the_grid():
    refused("seeds.jcf.codebook_sizes", "[512] without a Fisher codebook", **{"seeds.jcf.codebook_sizes": [64, 512]})
    vlad_only = {"signatures.encodings": ["vlad"], "seeds.soml.signatures": ["tfidf"]}
    vlad_only["seeds.comparison_signatures"] = ["vlad-256"]
    refused("seeds.jcf.codebook_sizes", "[64] without a Fisher codebook", **vlad_only)
    check_config(config_with(**vlad_only, **{"seeds.jcf.enabled": False}))
    check_config(config_with(**{"seeds.jcf.codebook_sizes": [64, 256], "seeds.jcf.descriptors_per_image": 256}))


def test_jcf_keeps_at_least_k_descriptors_per_image():
    sizes = {"seeds.jcf.codebook_sizes": [128, 64]}
    check_config(config_with(**sizes, **{"seeds.jcf.descriptors_per_image": 128}))
    refused("seeds.jcf.descriptors_per_image", "127 local features per image for the largest codebook's K = 128",
            **sizes, **{"seeds.jcf.descriptors_per_image": 127})  # fmt: skip


def test_jcf_shared_ranks_are_at_most_the_smallest_k():
    sizes = {"seeds.jcf.codebook_sizes": [128, 64], "seeds.jcf.descriptors_per_image": 128}
    check_config(config_with(**sizes, **{"seeds.jcf.shared_ranks": [8, 64]}))
    refused("seeds.jcf.shared_ranks", "[65] above the codebook's K = 64", **sizes, **{"seeds.jcf.shared_ranks": [65]})


def test_jcf_dims_are_at_most_the_second_order_dimension():
    budget = 80 * 81 // 2  # 3240
    check_config(config_with(**{"seeds.jcf.dims": [64, budget]}))
    refused("seeds.jcf.dims", f"[{budget + 1}] above d (d+1) / 2 = {budget}", **{"seeds.jcf.dims": [budget + 1]})
    refused("seeds.jcf.dims", "above d (d+1) / 2 = 210 (d = codebooks.pca_dims = 20)",
            **{"codebooks.pca_dims": 20, "seeds.jcf.dims": [211]})  # fmt: skip


@pytest.mark.parametrize(
    "models",
    [
        {"full_codebook": True, "without_codebook": False, "shared_ranks": []},
        {"full_codebook": False, "without_codebook": True, "shared_ranks": []},
        {"full_codebook": False, "without_codebook": False, "shared_ranks": [4]},
    ],
)
def test_jcf_learns_at_least_one_model(models):
    check_config(config_with(**{f"seeds.jcf.{key}": value for key, value in models.items()}))
    none = {"full_codebook": False, "without_codebook": False, "shared_ranks": []}
    refused("seeds.jcf", "no model to learn", **{f"seeds.jcf.{key}": value for key, value in none.items()})


def test_disabled_jcf_is_not_checked():
    check_config(config_with(**{"seeds.jcf.enabled": False, "seeds.jcf.codebook_sizes": [512]}))


def test_schema_errors_are_raised_as_one_config_error_listing_each():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    config = copy.deepcopy(DEFAULTS)
    config["sparse"]["max_iters"] = 100
    config["seed"] = "zero"
    with pytest.raises(ConfigError) as error:
        raise_schema_errors(config, schema)
    lines = str(error.value).splitlines()
    assert "does not match workflow/schemas/config.schema.yaml" in lines[0]
    assert lines[1:] == [
        "  seed: 'zero' is not of type 'integer'",
        "  sparse.max_iters: unknown key; did you mean sparse.max_iter?",
    ]
    raise_schema_errors(copy.deepcopy(DEFAULTS), schema)
