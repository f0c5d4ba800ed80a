"""The settings that a data set's size limits, checked before any model is fitted.

A small data set (a user's 30 photos) cannot support every setting of the paper's
Holidays-sized grid: PCA to R needs more than R + 1 training images, PQ's k-means
2^nbits training images per sub-quantiser, k-means and EM K codewords no more than
the descriptor sample, a triplet learner two training groups. :func:`size_problems`
lists every such limit a config breaks for a split, each naming its key and the
largest value that fits; :func:`check_sizes` raises them as one :class:`ConfigError`.
The workflow calls it when it indexes the data set, the first job of a run, and,
for a data set already on disk, when Snakemake reads the config
(:func:`precheck_dataset`), before the first job.

Limits that the workflow adapts to instead, with one logged line each (they keep the
comparison honest: every method still sees the same data and reports what it fitted):
the bag-of-words vocabulary is capped at the sample's size
(:func:`ndir.bovw.fit_visual_vocabulary`), PQ sizes with more sub-quantisers than the
PCA has dimensions are left out (:func:`ndir.baselines.pq_settings`), a learner's
hold-out is dropped when it would leave fewer than two groups on a side
(:func:`ndir.data.holdout_mask`), and Algorithm 1 uses every training query at each
step when there are no more than ``sparse.queries_per_step``.
"""

import logging
import math
from dataclasses import dataclass

from ndir.errors import ConfigError, DatasetError

logger = logging.getLogger(__name__)

#: Groups needed on each side of the split: a triplet or ranking learner needs a
#: negative group (training), a bootstrap interval more than one query (test).
MIN_GROUPS = 2


@dataclass(frozen=True)
class SplitCounts:
    """What a split holds, for :func:`size_problems`.

    Attributes
    ----------
    n_train_images, n_train_groups, n_test_groups : int
    n_descriptors : int, the codebooks' descriptor sample (at most
        ``codebooks.descriptors_per_image`` per training image).
    """

    n_train_images: int
    n_train_groups: int
    n_test_groups: int
    n_descriptors: int

    @classmethod
    def of(cls, split, descriptors_per_image):
        """The counts of an image table with ``split`` (train/test) and ``group`` columns."""
        train = split[split["split"] == "train"]
        test = split[split["split"] == "test"]
        return cls(
            n_train_images=len(train),
            n_train_groups=int(train["group"].nunique()),
            n_test_groups=int(test["group"].nunique()),
            n_descriptors=len(train) * descriptors_per_image,
        )

    def describe(self):
        return (
            f"{self.n_train_images} training images in {self.n_train_groups} groups, {self.n_test_groups} test groups"
        )


def size_limits(config):
    """The config values :func:`size_problems` checks, as a plain dict (a rule's param)."""
    return {
        "dims": {
            "baseline.dims": list(config["baseline"]["dims"]),
            "sparse.dims": list(config["sparse"]["dims"]),
            "sparse.convergence_dim": config["sparse"]["convergence_dim"],
        },
        "pq_nbits": config["baseline"]["pq"]["nbits"],
        "pq_bytes": list(config["baseline"]["pq"]["bytes"]),
        "codebook_sizes": list(config["signatures"]["codebook_sizes"]),
        "descriptors_per_image": config["codebooks"]["descriptors_per_image"],
    }


def _largest_nbits(n_train_images, pq_bytes):
    """The largest nbits with 2^nbits <= n_train_images that divides 8 b for every PQ size b."""
    fits = [
        nbits
        for nbits in range(1, int(math.log2(max(n_train_images, 1))) + 1)
        if all(8 * b % nbits == 0 for b in pq_bytes)
    ]
    return max(fits, default=None)


def size_problems(limits, counts):
    """Every setting of ``limits`` (:func:`size_limits`) the split ``counts`` cannot support.

    Returns
    -------
    list of str, one per key: ``"baseline.pq.nbits: 8 asks for 2^8 = 256 training
    images per sub-quantiser's k-means; at most 5 fits the 60 training images"``;
    empty when every setting fits.
    """
    problems = []
    if counts.n_train_groups < MIN_GROUPS or counts.n_test_groups < MIN_GROUPS:
        problems.append(
            f"dataset.train_fraction: the split holds {counts.n_train_groups} training and {counts.n_test_groups} "
            f"test groups; each side needs {MIN_GROUPS} at least (a learner's negatives, more than one test "
            "query): use a data set of 4 groups or more and a train_fraction that leaves 2 on each side"
        )
    n_train = counts.n_train_images
    # The centred training matrix has rank N - 1 at most (less with duplicate images),
    # so PCA to R needs R < N - 1 to keep a margin.
    largest_dim = n_train - 2
    for key, values in limits["dims"].items():
        listed = values if isinstance(values, list) else [values]
        too_large = sorted(R for R in listed if R > largest_dim)
        if too_large:
            shown = too_large if isinstance(values, list) else values
            problems.append(
                f"{key}: {shown} too large for PCA on {n_train} training images (R <= N - 2 = "
                f"{largest_dim}: the centred training matrix has rank N - 1 at most); use at most "
                f"{largest_dim}, or a larger data set"
            )
    nbits = limits["pq_nbits"]
    if 2**nbits > n_train:
        largest = _largest_nbits(n_train, limits["pq_bytes"])
        problems.append(
            f"baseline.pq.nbits: {nbits} asks for 2^{nbits} = {2**nbits} training images for each "
            f"sub-quantiser's k-means, but the training split holds {n_train}; "
            + (
                f"use at most {largest} (a divisor of 8 x every baseline.pq.bytes)"
                if largest
                else "use a larger data set"
            )
        )
    too_many = sorted(K for K in limits["codebook_sizes"] if K > counts.n_descriptors)
    if too_many:
        problems.append(
            f"signatures.codebook_sizes: {too_many} codewords for a sample of {counts.n_descriptors} descriptors "
            f"({n_train} training images x codebooks.descriptors_per_image = {limits['descriptors_per_image']}); "
            f"use at most {counts.n_descriptors}, or raise codebooks.descriptors_per_image"
        )
    return problems


def check_sizes(limits, counts, where):
    """Raise :class:`ConfigError` listing :func:`size_problems`, if there are any;
    ``where`` names the data (``dataset.path: /photos``)."""
    problems = size_problems(limits, counts)
    if problems:
        raise ConfigError(
            f"{where}: {counts.describe()}, too few for these settings (configs/small.yaml is made for "
            "sets of 30-300 images):\n  " + "\n  ".join(problems)
        )


def precheck_dataset(config):
    """:func:`check_sizes` on a data set already on disk, as Snakemake reads the config.

    The images are listed, not read: groups of one file are dropped as
    :func:`ndir.data.validate_images` drops them, unreadable images are not, so the
    counts are an upper bound of the ones ``index_dataset`` checks again. A fetched
    data set (no ``dataset.path``) and the embedded one are checked there only.
    """
    from ndir import data

    dataset = config["dataset"]
    if dataset["kind"] == "embedded" or not dataset["path"]:
        return
    quiet = logging.getLogger("ndir.data")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # index_dataset logs the files it ignores, once
    try:
        images = data.scan_dataset(dataset["kind"], dataset["path"]).images
    except DatasetError:
        return  # no images, or another layout: index_dataset says what it found
    finally:
        quiet.setLevel(level)
    sizes = images.groupby("group")["group"].transform("size")
    images = images[sizes >= 2].reset_index(drop=True)
    if images.empty:
        return
    keep_together = dataset["keep_together"]
    together = (
        None
        if keep_together is None
        else data.keep_together_labels(images, dataset["path"], keep_together["table"], keep_together["column"])
    )
    split = data.split_groups(images, dataset["train_fraction"], seed=config["seed"], together=together)
    counts = SplitCounts.of(split, config["codebooks"]["descriptors_per_image"])
    check_sizes(size_limits(config), counts, f"dataset.path: {dataset['path']}")
