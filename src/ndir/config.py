"""Checks of the workflow configuration that a JSON schema cannot express.

The schema (``workflow/schemas/config.schema.yaml``) validates types, ranges and
enumerations; :func:`schema_errors` words its violations one line per key (an
unknown key with the nearest known ones), and :func:`check_config` adds the checks
that relate several keys.
"""

import difflib
from pathlib import Path

import yaml
from jsonschema.validators import validator_for

from ndir import names
from ndir.errors import ConfigError

#: Dimensions kept per codebook entry (VLAD) and per Gaussian and gradient (FV).
#: The signature of ``encoding`` with K entries has ``K * pca_dims * FACTOR`` dims.
SIGNATURE_FACTOR = {"vlad": 1, "fv": 2}


def signature_dim(encoding, n_clusters, pca_dims):
    """Dimension D of a VLAD-K (K * d) or FV-K (2 * K * d) signature."""
    return SIGNATURE_FACTOR[encoding] * n_clusters * pca_dims


def require_every_key(schema):
    """``schema`` with every object's properties required, recursively, in place.

    The values of every key live in config.yaml alone (a user's ``--configfile`` and
    ``--config`` override them key by key), so a key missing after the merge is an
    error to name, not a default to fill in. Returns ``schema``.
    """
    if isinstance(schema, dict):
        if "properties" in schema:
            schema["required"] = list(schema["properties"])
        for value in schema.values():
            require_every_key(value)
    elif isinstance(schema, list):
        for value in schema:
            require_every_key(value)
    return schema


def merged(base, *overrides):
    """``base`` updated key by key with each of ``overrides`` in turn (nested dicts
    merged, other values replaced), as Snakemake merges ``--configfile`` and
    ``--config`` over config.yaml; the inputs are left as they were."""
    result = {key: merged(value) if isinstance(value, dict) else value for key, value in base.items()}
    for override in overrides:
        for key, value in override.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merged(result[key], value)
            else:
                result[key] = value
    return result


def coerce_config_strings(config, schema):
    """Turn strings into the numbers, booleans or nulls the schema asks for, in place.

    ``snakemake --config 'dataset={"kind": "holidays", "train_fraction": 0.5}'``
    reads the nested values with YAML's base loader, so ``0.5`` arrives as the string
    ``'0.5'`` and fails validation. Each string whose schema type does not allow a
    string is read as an int, a float or YAML (``0.5``, ``1e-2``, ``true``, ``null``)
    and replaced by the first reading of an allowed type; anything else is left for
    the schema to reject.

    Parameters
    ----------
    config : dict
        The merged configuration, before validation.
    schema : dict
        The JSON schema (``workflow/schemas/config.schema.yaml``), loaded.
    """
    _coerce(config, schema)
    return config


_JSON_TYPES = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _coerce(value, schema):
    """``value`` with its strings read as the types ``schema`` allows (recursively)."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                value[key] = _coerce(item, properties[key])
        return value
    if isinstance(value, list):
        return [_coerce(item, schema.get("items", {})) for item in value]
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if not isinstance(value, str) or "string" in types or not types:
        return value
    for parse in (int, float, yaml.safe_load):  # float reads 1e-2, which YAML 1.1 does not
        try:
            parsed = parse(value)
        except (ValueError, yaml.YAMLError):
            continue
        allowed = tuple(t for name in types for t in _JSON_TYPES.get(name, ()))
        # bool is an int in Python: "true" must not pass for an integer.
        if isinstance(parsed, allowed) and not (isinstance(parsed, bool) and "boolean" not in types):
            return parsed
    return value


def schema_errors(config, schema):
    """The schema's objections to ``config``, one line each, naming the key.

    Snakemake's ``validate`` reports only the first violation and prints the whole
    schema after it (1,700 lines for a misspelled top-level key); these lines say
    which key is wrong and why, and for an unknown key which known keys are closest.

    Parameters
    ----------
    config : dict
        The merged configuration.
    schema : dict
        The JSON schema (``workflow/schemas/config.schema.yaml``), loaded.

    Returns
    -------
    list of str, such as ``"sparse.max_iters: unknown key; did you mean
    sparse.max_iter?"`` or ``"sparse.max_iter: 'lots' is not of type 'integer'"``;
    sorted by key; empty when the config is valid.
    """
    validator = validator_for(schema)(schema)
    lines = []
    for error in validator.iter_errors(config):
        where = _key_path(error.absolute_path)
        prefix = f"{where}." if where else ""
        if error.validator != "additionalProperties":
            lines.append(f"{where or 'the config'}: {error.message}")
            continue
        known = sorted(error.schema.get("properties", {}))
        for key in sorted(set(error.instance) - set(known)):
            close = difflib.get_close_matches(key, known, n=2)
            hint = (
                "did you mean " + " or ".join(prefix + name for name in close) + "?"
                if close
                else "the keys here are " + ", ".join(prefix + name for name in known)
            )
            lines.append(f"{prefix}{key}: unknown key; {hint}")
    return sorted(lines)


def _key_path(parts):
    """``sparse.dims[1]`` for the path ``["sparse", "dims", 1]`` of a value in the config."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def raise_schema_errors(config, schema):
    """Raise :class:`ConfigError` listing :func:`schema_errors`, if there are any."""
    errors = schema_errors(config, schema)
    if errors:
        raise ConfigError(
            "the config (config.yaml with any --configfile and --config) does not match "
            "workflow/schemas/config.schema.yaml, which describes every key:\n  " + "\n  ".join(errors)
        )


def check_config(config):
    """Raise :class:`ConfigError` naming the key when values contradict each other.

    Parameters
    ----------
    config : dict
        The configuration after schema validation, which fills in the defaults.
    """
    dataset = config["dataset"]
    if dataset["kind"] == "embedded" and dataset.get("path"):
        raise ConfigError(
            f"dataset.path: {dataset['path']!r} is not read when dataset.kind is 'embedded' "
            "(the set built from the photos shipped with ndir); set dataset.kind to "
            "holidays, ukbench or folders to use these images, or drop dataset.path"
        )
    if dataset["kind"] == "folders" and not dataset.get("path"):
        raise ConfigError(
            "dataset.path: required when dataset.kind is 'folders'; set it to the folder holding "
            "one sub-folder per group"
        )
    if dataset["kind"] != "embedded" and dataset.get("path"):
        if not Path(dataset["path"]).is_dir():
            raise ConfigError(
                f"dataset.path: {dataset['path']!r} is not a folder; point it at the data set's image folder"
            )

    pca_dims = config["codebooks"]["pca_dims"]
    smallest = min(
        signature_dim(encoding, K, pca_dims)
        for encoding in config["signatures"]["encodings"]
        for K in config["signatures"]["codebook_sizes"]
    )
    dims = {
        "baseline.dims": config["baseline"]["dims"],
        "sparse.dims": config["sparse"]["dims"],
        "sparse.convergence_dim": [config["sparse"]["convergence_dim"]],
    }
    for key, values in dims.items():
        too_large = [R for R in values if R >= smallest]
        if too_large:
            raise ConfigError(
                f"{key}: {too_large} not below the smallest signature dimension "
                f"({smallest}); use smaller output dimensions or larger codebooks"
            )
    pq = config["baseline"]["pq"]
    uneven = [b for b in pq["bytes"] if 8 * b % pq["nbits"]]
    if uneven:
        raise ConfigError(
            f"baseline.pq.bytes: {uneven} bytes are no whole number of {pq['nbits']}-bit sub-quantiser "
            "indices (8 x bytes must be a multiple of baseline.pq.nbits); change either"
        )

    seeds = config["seeds"]
    if seeds["enabled"]:
        grid = {
            names.signature_name(encoding, K)
            for encoding in config["signatures"]["encodings"]
            for K in config["signatures"]["codebook_sizes"]
        }
        wanted = {
            "seeds.soml.signatures": [s for s in seeds["soml"]["signatures"] if s != names.TFIDF],
            "seeds.comparison_signatures": seeds["comparison_signatures"],
        }
        for key, listed in wanted.items():
            missing = sorted(set(listed) - grid)
            if missing:
                raise ConfigError(
                    f"{key}: {missing} not among the signatures the workflow computes "
                    f"({sorted(grid)}); pick from those or extend signatures.encodings/codebook_sizes"
                )
        if seeds["jcf"]["enabled"]:
            _check_jcf(seeds["jcf"], grid, pca_dims)


def _check_jcf(jcf, grid, pca_dims):
    """Checks of ``seeds.jcf`` against the signature grid and the descriptor PCA."""
    missing = [K for K in jcf["codebook_sizes"] if names.signature_name("fv", K) not in grid]
    if missing:
        raise ConfigError(
            f"seeds.jcf.codebook_sizes: {missing} without a Fisher codebook among the signatures the workflow "
            f"computes ({sorted(grid)}); JCF's h(x) are the GMM posteriors of fv-K: pick K from "
            "signatures.codebook_sizes with fv in signatures.encodings"
        )
    largest, smallest = max(jcf["codebook_sizes"]), min(jcf["codebook_sizes"])
    if jcf["descriptors_per_image"] < largest:
        raise ConfigError(
            f"seeds.jcf.descriptors_per_image: {jcf['descriptors_per_image']} local features per image "
            f"for the largest codebook's K = {largest} codewords; keep at least K"
        )
    too_wide = [k for k in jcf["shared_ranks"] if k > smallest]
    if too_wide:
        raise ConfigError(
            f"seeds.jcf.shared_ranks: {too_wide} above the codebook's K = {smallest} "
            "(the smallest of seeds.jcf.codebook_sizes); the shared projectors A, B are K x k with k <= K"
        )
    budget = pca_dims * (pca_dims + 1) // 2
    too_many = [R for R in jcf["dims"] if R > budget]
    if too_many:
        raise ConfigError(
            f"seeds.jcf.dims: {too_many} above d (d+1) / 2 = {budget} (d = codebooks.pca_dims = {pca_dims}), "
            "the dimension of the second-order pooling the factorisation compresses; use smaller R"
        )
    if not (jcf["full_codebook"] or jcf["without_codebook"] or jcf["shared_ranks"]):
        raise ConfigError(
            "seeds.jcf: no model to learn (full_codebook and without_codebook false, shared_ranks empty); "
            "enable one or set seeds.jcf.enabled: false"
        )
