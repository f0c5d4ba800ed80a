"""ndir.errors: the parts every message shares, the rebuild advice and the system's reason."""

import errno

import pytest

from ndir.errors import ImageReadError, NdirInputError, os_reason, rebuild_advice


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/home/me/run/results/codebooks/fv-64.npz", "results/codebooks/fv-64.npz"),
        ("/data/results/old/results/sparse/fv-64/R32-tau0.9.npz", "results/sparse/fv-64/R32-tau0.9.npz"),
    ],
)
def test_the_rebuild_advice_names_the_path_from_its_last_results_folder(path, target):
    assert rebuild_advice(path) == (
        f"delete it and run `snakemake {target} --cores all` in the workflow's folder, with the --configfile/--config "
        "options of your run, to write it anew; then your usual snakemake command brings what depends on it up to date"
    )


@pytest.mark.parametrize("path", ["/tmp/models/cb.npz", "model.npz", "samples/descriptors.npy"])
def test_a_file_outside_results_is_not_sent_to_snakemake(path):
    # `snakemake /tmp/models/cb.npz` is a MissingRuleException: no rule writes there.
    advice = rebuild_advice(path)
    assert "copy it again from the results/ of the run that wrote it" in advice
    assert f"snakemake {path}" not in advice


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        (
            RuntimeError(
                "Error in faiss::FileIOWriter::FileIOWriter(const char*) at /project/faiss/impl/io.cpp:101:\n"
                "Error: 'f' failed: could not open /ro/index.faiss for writing: (Read-only file system)"
            ),
            "Read-only file system",
        ),
        (RuntimeError("a (first) and a (second reason)"), "second reason"),
        (RuntimeError("no   parenthesis\nhere"), "no parenthesis here"),
        (OSError("no strerror"), "no strerror"),
    ],
)
def test_os_reason_is_the_strerror_or_the_last_parenthesised_part(error, reason):
    assert os_reason(error) == reason


def test_an_image_read_error_carries_its_path_and_reason():
    error = ImageReadError("/images/a.jpg", "not a JPEG")
    assert isinstance(error, NdirInputError) and isinstance(error, ValueError)
    assert (error.path, error.reason, str(error)) == ("/images/a.jpg", "not a JPEG", "/images/a.jpg: not a JPEG")
