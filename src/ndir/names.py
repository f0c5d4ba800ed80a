"""The names of the workflow's runs, built here once for the workflow and the library.

A name is built from its run's parameters and never read back: the workflow passes the
parameters (encoding, K, R, tau, ...) to the stages through ``params:``, and the stages
record them inside the files they write (a projector's ``meta``, a training history's
columns). Each format is one pattern (:data:`SIGNATURE`, :data:`PROJECTOR`,
:data:`JCF_RUN`): the functions fill it in with values, and the workflow's rules use it
as it is, its fields being Snakemake wildcards, matched as :data:`WILDCARD_CONSTRAINTS`
says.
"""

#: The VLAD and Fisher Vector encodings, as the config and the names spell them.
ENCODINGS = ("vlad", "fv")

#: A signature: its encoding and codebook size K (``fv-64``); also the name of the
#: codebook that encodes it (``results/codebooks/fv-64.npz``).
SIGNATURE = "{encoding}-{K}"
#: The name of the seeds' learners' tf-idf input (the word counts), beside the signature
#: names in ``seeds.soml.signatures``.
TFIDF = "tfidf"
#: A sparse rank projector of a signature: its output dimension R and sparsity tau.
PROJECTOR = "R{R}-tau{tau}"
#: A JCF run: its codebook size K (1: no codebook) and output dimension R; JCF-R-k
#: runs add :data:`JCF_SHARED`.
JCF_RUN = "K{K}-R{R}"
#: The shared rank k of a JCF-R-k run, after :data:`JCF_RUN`.
JCF_SHARED = "-k{k}"

_NUMBER = r"\d+"
_SIGNATURE_REGEX = SIGNATURE.format(encoding="(" + "|".join(ENCODINGS) + ")", K=_NUMBER)
#: Regular expressions of the wildcards above, for the workflow's ``wildcard_constraints``.
WILDCARD_CONSTRAINTS = {
    "encoding": "|".join(ENCODINGS),
    "K": _NUMBER,
    "R": _NUMBER,
    # tau in [0, 1) as :func:`projector_name` writes it: "0", "0.5", "0.99".
    "tau": r"0(\.\d+)?",
    "signature": _SIGNATURE_REGEX,
    # A seeds' learner's input: tf-idf or a signature.
    "soml_input": f"{TFIDF}|{_SIGNATURE_REGEX}",
    "jcf_run": JCF_RUN.format(K=_NUMBER, R=_NUMBER) + "(" + JCF_SHARED.format(k=_NUMBER) + ")?",
}

#: Where a codebook and a projector lie, in the words of error messages and ``--help``.
CODEBOOK_FILE_HINT = f"results/codebooks/{SIGNATURE.format(encoding='<' + '|'.join(ENCODINGS) + '>', K='<K>')}.npz"
PROJECTOR_FILE_HINT = f"results/sparse/<signature>/{PROJECTOR.format(R='<R>', tau='<tau>')}.npz"


def signature_name(encoding, K):
    """The name of the ``encoding`` signature with a codebook of ``K`` words: ``fv-64``."""
    return SIGNATURE.format(encoding=encoding, K=K)


def projector_name(R, tau):
    """The name of a sparse rank projector to ``R`` dimensions at sparsity ``tau`` (a
    number): ``R32-tau0.99``; tau as ``%g`` writes it, so 0.0 and 0 are both ``tau0``."""
    return PROJECTOR.format(R=R, tau=f"{tau:g}")


def sparse_run(signature, R, tau):
    """Path stem of a sparse training run of ``signature`` (a :func:`signature_name`):
    ``results/sparse/fv-64/R32-tau0.99``; the projector is its ``.npz``, the training
    history its ``.csv``."""
    return f"results/sparse/{signature}/{projector_name(R, tau)}"


def jcf_run_name(K, R, k=None):
    """The name of a JCF run: ``K64-R64`` (JCF-R), ``K64-R64-k8`` (JCF-R-k, shared rank
    ``k``), ``K1-R64`` (no codebook)."""
    name = JCF_RUN.format(K=K, R=R)
    return name if k is None else name + JCF_SHARED.format(k=k)
