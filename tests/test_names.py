"""The run names of ndir.names: the spellings the workflow's files have, and the
wildcard patterns the rules match them with."""

import re

import pytest

from ndir import names


def pattern_regex(pattern):
    """The regular expression Snakemake makes of a file pattern under the workflow's
    wildcard constraints: each ``{name}`` a named group of :data:`names.WILDCARD_CONSTRAINTS`."""
    parts = re.split(r"\{(\w+)\}", pattern)
    regex = "".join(
        f"(?P<{part}>{names.WILDCARD_CONSTRAINTS[part]})" if i % 2 else re.escape(part) for i, part in enumerate(parts)
    )
    return re.compile(regex)


def test_names_are_spelled_as_the_workflow_files_are():
    assert names.signature_name("fv", 64) == "fv-64"
    assert names.signature_name("vlad", 512) == "vlad-512"
    assert names.projector_name(32, 0.99) == "R32-tau0.99"
    # tau 0 (dense) and 0.5 are written without trailing zeros, whatever their type.
    assert names.projector_name(64, 0.0) == names.projector_name(64, 0) == "R64-tau0"
    assert names.projector_name(64, 0.50) == "R64-tau0.5"
    assert names.sparse_run("fv-512", 32, 0.9) == "results/sparse/fv-512/R32-tau0.9"
    assert names.jcf_run_name(64, 32) == "K64-R32"
    assert names.jcf_run_name(64, 32, 8) == "K64-R32-k8"
    assert names.jcf_run_name(1, 16) == "K1-R16"
    assert names.PROJECTOR_FILE_HINT == "results/sparse/<signature>/R<R>-tau<tau>.npz"
    assert names.CODEBOOK_FILE_HINT == "results/codebooks/<vlad|fv>-<K>.npz"


@pytest.mark.parametrize("encoding", names.ENCODINGS)
@pytest.mark.parametrize("K", [1, 64, 512])
@pytest.mark.parametrize(("R", "tau"), [(16, 0.0), (32, 0.5), (256, 0.9), (64, 0.99), (8, 0.999)])
def test_a_built_name_matches_its_rule_pattern_giving_back_its_values(encoding, K, R, tau):
    """What common.smk builds (a projector's path) is what the training rule's pattern
    matches, and the wildcards Snakemake reads from it are the values it was built from."""
    signature = names.signature_name(encoding, K)
    rule_pattern = f"results/sparse/{{signature}}/{names.PROJECTOR}.npz"
    match = pattern_regex(rule_pattern).fullmatch(names.sparse_run(signature, R, tau) + ".npz")
    assert match is not None
    assert (match["signature"], int(match["R"]), float(match["tau"])) == (signature, R, tau)
    # The signature's own pattern (the signature and baseline rules) gives encoding and K.
    match = pattern_regex(names.SIGNATURE).fullmatch(signature)
    assert (match["encoding"], int(match["K"])) == (encoding, K)
    assert pattern_regex("{soml_input}").fullmatch(signature)


@pytest.mark.parametrize(("K", "R", "k"), [(64, 32, None), (64, 32, 8), (1, 16, None), (256, 128, 16)])
def test_a_jcf_run_name_is_a_jcf_run_wildcard_and_no_other_jcf_file_is(K, R, k):
    """train_jcf's ``{jcf_run}`` matches every run name, and not the second-order
    pooling records or a run's random record, which other rules or outputs write."""
    run = pattern_regex("{jcf_run}")
    name = names.jcf_run_name(K, R, k)
    assert run.fullmatch(name)
    assert not run.fullmatch(f"{name}-random")
    assert not run.fullmatch(f"second_order_pooling-K{K}")


def test_the_tfidf_input_is_a_learners_input_and_no_signature():
    assert pattern_regex("{soml_input}").fullmatch(names.TFIDF)
    assert not pattern_regex("{signature}").fullmatch(names.TFIDF)
