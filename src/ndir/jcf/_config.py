"""The workflow config's ``seeds.jcf`` keys and the :class:`~ndir.jcf.JCF` parameters they
set: the rules that read that section import this, not the estimator (scikit-learn)."""

#: The one table from the workflow's config to the estimator: each key of the config's
#: ``seeds.jcf`` section that sets a :class:`~ndir.jcf.JCF` parameter, and that parameter. ``dims``
#: and ``shared_ranks`` are lists, the grid of runs: a training gets one R and one k (or
#: none) from its run name (:func:`jcf_params`). The run's top-level ``seed`` is
#: ``random_state``.
CONFIG_PARAMETERS = {
    "dims": "n_components",
    "shared_ranks": "n_shared",
    "margin": "margin",
    "learning_rate": "learning_rate",
    "epochs": "n_epochs",
    "epochs_no_change": "n_iter_no_change",
    "batch_groups": "batch_groups",
    "holdout_fraction": "holdout_fraction",
    "sqrt_eps": "sqrt_eps",
    "posterior_threshold": "posterior_threshold",
}
#: Keys of the ``seeds.jcf`` section that are lists of runs (one value per training).
CONFIG_GRID = ("dims", "shared_ranks")
#: Keys of the ``seeds.jcf`` section that no estimator parameter takes: the switch, the
#: codebook sizes K and which forms are run at each (the codebook is an input, not a
#: parameter), and the local features' subsample (rule extract_jcf_features').
CONFIG_OTHERS = ("enabled", "codebook_sizes", "descriptors_per_image", "full_codebook", "without_codebook")


def jcf_params(settings, n_components, n_shared, seed):
    """Keyword arguments of :class:`~ndir.jcf.JCF` for one training: the values of the config's
    ``seeds.jcf`` section ``settings`` under the names of :data:`CONFIG_PARAMETERS`,
    with the run's R (``n_components``) and k (``n_shared``, None for JCF-R and K = 1)
    and the run's ``seed`` as ``random_state``."""
    params = {name: settings[key] for key, name in CONFIG_PARAMETERS.items() if key not in CONFIG_GRID}
    return {**params, "n_components": n_components, "n_shared": n_shared, "random_state": seed}
