"""What a workflow job imports: the start-up every job pays before its work."""

import subprocess
import sys

import pytest

import ndir.projection

# The stage modules of the encoding jobs (encode_shard, gather_signatures, the codebooks),
# of the run's provenance and of JCF's features and baselines: they need no learned
# estimator (train_jcf imports its own).
WITHOUT_ESTIMATORS = [
    "ndir.stages.signatures",
    "ndir.stages.codebooks",
    "ndir.stages.report",
    "ndir.stages.data",
    "ndir.stages.jcf",
]


@pytest.mark.parametrize("module", WITHOUT_ESTIMATORS)
def test_jobs_without_estimators_do_not_import_scikit_learn(module):
    """scikit-learn (with scipy.stats, which it imports) is 0.7 s of a job's start."""
    code = f"import sys, {module}; print(sorted(m for m in ('sklearn', 'scipy.stats') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_projection_package_gives_each_name_of_its_modules():
    from ndir.projection import cost, pca, sparse_rank, storage

    modules = {"pca": pca, "sparse_rank": sparse_rank, "storage": storage, "cost": cost}
    for name in ndir.projection.__all__:
        assert getattr(ndir.projection, name) is getattr(modules[ndir.projection._MODULE_OF[name]], name)
    assert set(ndir.projection.__all__) <= set(dir(ndir.projection))
    with pytest.raises(AttributeError, match="no_such_name"):
        ndir.projection.no_such_name  # noqa: B018


def test_the_jcf_package_gives_its_estimator_on_first_use():
    import ndir.jcf
    from ndir.jcf import _estimator

    assert ndir.jcf.JCF is _estimator.JCF
    assert "JCF" in ndir.jcf.__all__
    with pytest.raises(AttributeError, match="no_such_name"):
        ndir.jcf.no_such_name  # noqa: B018
