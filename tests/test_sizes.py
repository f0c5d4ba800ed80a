"""The limits a data set's size puts on the settings (:mod:`ndir.sizes`), checked before
any job: each names its key and the largest value that fits, and that value passes."""

import shutil
import time
from pathlib import Path

import pytest
import yaml

from ndir.data import build_embedded_dataset
from ndir.errors import ConfigError
from ndir.sizes import SplitCounts, check_sizes, precheck_dataset, size_limits, size_problems

from .conftest import REPO, run_snakemake


def default_config(**overrides):
    """config.yaml with ``overrides`` (``{"baseline.pq.nbits": 4}``) applied."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in overrides.items():
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[last] = value
    return config


def counts(n_train_images=60, n_train_groups=19, n_test_groups=12, per_image=400):
    return SplitCounts(n_train_images, n_train_groups, n_test_groups, n_train_images * per_image)


def test_a_default_config_on_sixty_training_images_names_every_key_with_what_fits():
    problems = size_problems(size_limits(default_config()), counts(60))
    assert [p.split(":")[0] for p in problems] == [
        "baseline.dims",
        "sparse.dims",
        "sparse.convergence_dim",
        "baseline.pq.nbits",
    ]
    assert problems[0].startswith("baseline.dims: [64, 128, 256] too large for PCA on 60 training images")
    assert problems[2].startswith("sparse.convergence_dim: 64 too large")
    assert "use at most 58," in problems[0]
    # 2^5 = 32 <= 60 < 64, but 5 bits divide no 8 x 8 = 64-bit code: 4 is the largest that fits every size.
    assert problems[3].endswith("use at most 4 (a divisor of 8 x every baseline.pq.bytes)")


def _advised(problems, key):
    """The "use at most X" of ``key``'s message, or None without one."""
    line = next((p for p in problems if p.startswith(key + ":")), None)
    return None if line is None else int(line.split("use at most ")[1].split(",")[0].split(" ")[0])


@pytest.mark.parametrize("n_train", [9, 16, 60, 256, 300, 1000])
def test_the_advised_values_pass(n_train):
    """Following each message's "use at most X" clears that message (advice is a promise)."""
    config = default_config()
    problems = size_problems(size_limits(config), counts(n_train))
    for section, name in (("baseline", "dims"), ("sparse", "dims")):
        largest = _advised(problems, f"{section}.{name}")
        if largest is not None:
            assert largest == n_train - 2
            config[section][name] = [R for R in config[section][name] if R <= largest] or [largest]
    largest = _advised(problems, "sparse.convergence_dim")
    if largest is not None:
        config["sparse"]["convergence_dim"] = largest
    largest = _advised(problems, "baseline.pq.nbits")
    if largest is not None:
        config["baseline"]["pq"]["nbits"] = largest
    assert size_problems(size_limits(config), counts(n_train)) == []


def test_the_pca_boundary_is_r_at_most_n_minus_two():
    limits = size_limits(default_config(**{"baseline.dims": [32], "sparse.dims": [32], "sparse.convergence_dim": 32}))
    limits["pq_nbits"] = 4
    assert size_problems(limits, counts(34)) == []
    assert [p.split(":")[0] for p in size_problems(limits, counts(33))] == [
        "baseline.dims",
        "sparse.dims",
        "sparse.convergence_dim",
    ]


def test_pq_needs_two_to_the_nbits_training_images():
    limits = size_limits(default_config(**{"baseline.dims": [8], "sparse.dims": [8], "sparse.convergence_dim": 8}))
    assert size_problems(limits, counts(256)) == []
    [problem] = size_problems(limits, counts(255))
    assert problem.startswith("baseline.pq.nbits: 8 asks for 2^8 = 256 training images")
    assert "use at most 4" in problem  # 7, 6, 5 bits divide no 64-bit code


def test_codewords_beyond_the_descriptor_sample_and_lonely_sides_are_refused():
    limits = size_limits(
        default_config(
            **{"baseline.dims": [4], "sparse.dims": [4], "sparse.convergence_dim": 4, "baseline.pq.nbits": 2}
        )
    )
    [problem] = size_problems(limits, counts(20, per_image=10))
    assert problem.startswith("signatures.codebook_sizes: [256] codewords for a sample of 200 descriptors")
    assert "use at most 200, or raise codebooks.descriptors_per_image" in problem
    [problem] = size_problems(limits, SplitCounts(20, 1, 5, 8000))
    assert problem.startswith("dataset.train_fraction: the split holds 1 training and 5 test groups")
    assert size_problems(limits, SplitCounts(20, 2, 2, 8000)) == []
    with pytest.raises(ConfigError, match=r"^where: 20 training images in 1 groups, 5 test groups, too few"):
        check_sizes(limits, SplitCounts(20, 1, 5, 8000), "where")


def _folders(root, n_groups, seed=1):
    """A folders set cut from the shipped photos by the embedded set's recipe, one
    sub-folder per scene (as a user's own near-duplicate photos)."""
    flat = root.with_name(root.name + "-flat")
    table = build_embedded_dataset(flat, n_groups=n_groups, seed=seed, view_size=96)
    for path, group in zip(table["path"], table["group"]):
        scene = root / f"scene{int(group) % 1000:03d}"  # Holidays' groups: 1000, 1001, ...
        scene.mkdir(parents=True, exist_ok=True)
        shutil.move(flat / Path(path).name, scene / Path(path).name)
    return root


def test_a_folders_set_on_disk_is_checked_as_the_config_is_read(tmp_path):
    root = _folders(tmp_path / "photos", n_groups=10)
    (root / "lonely").mkdir()
    shutil.copy(next((root / "scene000").iterdir()), root / "lonely" / "only.jpg")  # a group of one is dropped
    config = default_config(**{"dataset.kind": "folders", "dataset.path": str(root)})
    with pytest.raises(ConfigError) as refused:
        precheck_dataset(config)
    message = str(refused.value)
    assert message.startswith(f"dataset.path: {root}: ") and "training images in 6 groups, 4 test groups" in message
    assert "baseline.pq.nbits: 8" in message and "configs/small.yaml" in message
    # configs/small.yaml fits a set this small.
    small = yaml.safe_load((REPO / "configs" / "small.yaml").read_text())
    for section, values in small.items():
        config[section].update({k: v for k, v in values.items() if k not in ("kind", "path")})
    precheck_dataset(config)
    # The embedded set is checked when index_dataset has built and split it.
    precheck_dataset(default_config())


def test_a_run_on_too_small_a_set_stops_before_its_first_job(tmp_path):
    """The newcomer's case: the default config on ~100 photos of their own stops as
    Snakemake reads it, naming the keys, instead of failing minutes later."""
    root = _folders(tmp_path / "photos", n_groups=32, seed=2)
    started = time.monotonic()
    default = ["--configfile", str(REPO / "config.yaml")]
    run = run_snakemake(tmp_path, "-n", *default, "--config", f"dataset={{kind: folders, path: {root}}}", check=False)
    assert run.returncode != 0 and time.monotonic() - started < 60
    said = run.stdout + run.stderr
    assert "baseline.pq.nbits: 8 asks for 2^8 = 256 training images" in said, said[-3000:]
    small = run_snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(REPO / "configs/small.yaml"),
        "--config",
        f"dataset={{kind: folders, path: {root}}}",
    )
    assert "readings" in small.stdout
