"""Near-duplicate search over your own images with a learned sparse projector.

An image goes through the paper's pipeline (Negrel et al. 2014, §V-B and Eq. 3):

1. dense HOG descriptors (:func:`ndir.descriptors.image_descriptors`),
2. signature ``x = codebook.encode(descriptors)``, power- (alpha) and
   L2-normalised (:func:`ndir.encoding.power_l2_normalise`), D = ``codebook.dim``,
3. projection ``y = U^T x`` through the sparse U (D x R, CSC): the
   ``nnz(U)`` multiply-adds per image that the sparse projectors are about.

``y`` is stored **unnormalised**: U was trained so that the raw dot product
``y_q^T y_j`` ranks near duplicates first (Eq. 2), so a faiss inner-product index
(``faiss.IndexFlatIP``) over the raw ``y`` scores with exactly the learned
similarity. Scores are therefore not cosines and are not bounded by 1.

An index is a folder:

``index.faiss``
    The ``faiss.IndexFlatIP`` of the (n_images, R) float32 projections.
``images.csv``
    ``path`` (absolute, resolved) and ``norm`` (``||y||_2``), row i = faiss id i;
    ``group`` too when the index was built with near-duplicate groups
    (``ndir index --groups``: the number Holidays or UKBench names give, the
    sub-folder's name for ``folders``), empty for an image without a group.
``codebook.npz``, ``projector.npz``
    Copies of the codebook and projector the index was built with (26 KB to 1 MB
    each on the default run), so that the index keeps working when the run's
    ``results/`` is moved, rerun or deleted.
``meta.json``
    The codebook and projector (the paths they were copied from, SHA-256 of the
    files, signature name, D, R, the projector's training record), the descriptor parameters,
    ``alpha`` and the ndir version; queries use these, so they are encoded
    exactly as the indexed images were. ``groups`` names the data-set layout the
    groups were read from, if any.
"""

import hashlib
import json
import logging
import shutil
import zipfile
from collections import deque
from contextlib import closing
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ndir import __version__, available_cpus, names
from ndir.atomic import atomic_folder, check_writable
from ndir.codebooks import CODEBOOK_CLASSES, load_codebook
from ndir.data import IMAGE_SUFFIXES
from ndir.descriptors import CELL_SIZES, STEP, image_descriptors_with
from ndir.encoding import power_l2_normalise, single_threaded_blas_pool
from ndir.errors import NdirInputError, os_reason
from ndir.model_files import file_kind
from ndir.preprocess import MAX_WIDTH
from ndir.projection import load_projector, projection_cost

logger = logging.getLogger(__name__)

INDEX_FILE = "index.faiss"
IMAGES_FILE = "images.csv"
META_FILE = "meta.json"
#: The copies of the models in an index folder, by part of ``meta.json``.
MODEL_FILES = {"codebook": "codebook.npz", "projector": "projector.npz"}

DESCRIPTOR_DEFAULTS = {"max_width": MAX_WIDTH, "step": STEP, "cell_sizes": list(CELL_SIZES)}
ALPHA_DEFAULT = 0.1

# --------------------------------------------------------------------------- files


def file_sha256(path):
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def image_files(folder):
    """Image files under ``folder`` (recursively), sorted; hidden entries skipped.

    Raises NdirInputError if ``folder`` is not a folder or holds no image file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise NdirInputError(f"{folder}: no such folder; pass the folder that holds your images")
    paths = sorted(
        path
        for path in folder.rglob("*")
        if path.suffix.lower() in IMAGE_SUFFIXES
        and path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )
    if not paths:
        raise NdirInputError(
            f"{folder}: no image files (suffixes {', '.join(sorted(IMAGE_SUFFIXES))}) "
            "in this folder or below; pass the folder that holds your images"
        )
    return paths


# --------------------------------------------------------------------------- encoder


@dataclass(eq=False)
class ImageEncoder:
    """Image file -> projected signature ``y = U^T x`` (R,) float32.

    Build it with :func:`load_encoder`, which checks that the projector fits the
    codebook.
    """

    codebook: object
    components: object  # scipy.sparse.csc_array (D, R) float32
    signature: str
    projector_meta: dict
    descriptors: dict = field(default_factory=lambda: dict(DESCRIPTOR_DEFAULTS))
    alpha: float = ALPHA_DEFAULT
    codebook_path: str = ""
    projector_path: str = ""

    @property
    def n_features(self):
        """D, the signature length."""
        return self.components.shape[0]

    @property
    def n_components(self):
        """R, the projected length."""
        return self.components.shape[1]

    def signature_of(self, path):
        """Power- and L2-normalised signature x (D,) float32 of an image file.

        The same bits as the workflow's signatures, whatever the cores (the
        codebook's ``encode``). Raises NdirInputError (ImageReadError) if the file
        cannot be decoded or is too small for one descriptor.
        """
        local = image_descriptors_with(path, self.descriptors)
        return power_l2_normalise(self.codebook.encode(local), alpha=self.alpha)

    def project(self, x):
        """``y = U^T x`` (R,) float32 through the CSC matrix: nnz(U) multiply-adds."""
        return np.asarray(self.components.T @ x, dtype=np.float32)

    def __call__(self, path):
        return self.project(self.signature_of(path))

    def meta(self):
        """The JSON record that lets a query be encoded as the indexed images were."""
        return {
            "codebook": {
                "path": self.codebook_path,
                "sha256": file_sha256(self.codebook_path),
                "signature": self.signature,
                "dim": int(self.n_features),
            },
            "projector": {
                "path": self.projector_path,
                "sha256": file_sha256(self.projector_path),
                "n_components": int(self.n_components),
                "n_nonzero": int(self.components.nnz),
                "meta": self.projector_meta,
            },
            "descriptors": {
                **self.descriptors,
                "cell_sizes": list(self.descriptors["cell_sizes"]),
            },
            "alpha": float(self.alpha),
            "similarity": "inner product of the raw projections y = U^T x (Eq. 2)",
            "ndir_version": __version__,
        }


def load_encoder(
    codebook,
    projector,
    max_width=MAX_WIDTH,
    step=STEP,
    cell_sizes=CELL_SIZES,
    alpha=ALPHA_DEFAULT,
):
    """Load a codebook and a projector and check that they belong together.

    Parameters
    ----------
    codebook : path of a ``results/codebooks/<vlad|fv>-<K>.npz``.
    projector : path of a projector (:data:`ndir.names.PROJECTOR_FILE_HINT`).
    max_width, step, cell_sizes : descriptor parameters (§V-B defaults).
    alpha : power normalisation exponent (0.1 in the paper).

    Raises
    ------
    NdirInputError
        If a file is missing or of the wrong kind, or the projector was trained on
        another signature (its D differs from ``codebook.dim`` or its recorded
        signature name from the codebook's).
    """
    model, signature = load_codebook(codebook)
    try:
        U, meta = load_projector(projector)
    except NdirInputError:
        # Read the file's kind again only to word the refusal for the CLI (a missing
        # file is refused by file_kind itself).
        if file_kind(projector) != "projector":
            raise NdirInputError(
                f"{projector}: not a projector (it is a codebook); pass --projector {names.PROJECTOR_FILE_HINT}"
            ) from None
        raise
    expected = meta.get("signature")
    if U.shape[0] != model.dim or (expected is not None and expected != signature):
        raise NdirInputError(
            f"{projector}: projector for {expected or 'an unnamed signature'} with "
            f"D={U.shape[0]}, but codebook {codebook} gives {signature} signatures with "
            f"D={model.dim}; pass a projector from results/sparse/{signature}/"
        )
    if not 0 < alpha <= 1:
        raise NdirInputError(f"alpha={alpha}: the power normalisation needs 0 < alpha <= 1")
    return ImageEncoder(
        codebook=model,
        components=U.astype(np.float32).tocsc(),
        signature=signature,
        projector_meta=meta,
        descriptors={
            "max_width": int(max_width),
            "step": int(step),
            "cell_sizes": [int(c) for c in cell_sizes],
        },
        alpha=float(alpha),
        codebook_path=str(Path(codebook).resolve()),
        projector_path=str(Path(projector).resolve()),
    )


# --------------------------------------------------------------------------- index


def check_index_folder(folder):
    """``folder`` as a Path if an index may be written there: new, empty or an ndir
    index (which is replaced), in a folder this process can write to;
    NdirInputError otherwise. Call it before encoding."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NdirInputError(f"{folder}: is a file; pass a folder name for the index (-o)")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / META_FILE).is_file():
        raise NdirInputError(
            f"{folder}: folder exists and is not an ndir index; pass a new or empty folder for the index (-o)"
        )
    # The new index is written beside the old one and swapped in (save), so it is
    # the parent folder that must take new files.
    try:
        check_writable(folder.absolute().parent)
    except OSError as error:
        raise NdirInputError(
            f"{folder}: cannot write the index there ({os_reason(error)}); pass a folder you can write to (-o)"
        ) from None
    return folder


@dataclass(eq=False)
class NearDuplicateIndex:
    """Projected signatures of a set of images in a faiss inner-product index.

    Attributes
    ----------
    index : faiss.IndexFlatIP of dimension R, row i = ``paths[i]``.
    paths : list of str, absolute resolved image paths.
    norms : (n,) float32, ``||y||_2`` of each row.
    meta : dict, see the module docstring.
    groups : None (no groups), or list of n near-duplicate group labels (int; str,
        the sub-folder's name, for the ``folders`` layout; None for an image
        without a group).
    """

    index: object
    paths: list
    norms: np.ndarray
    meta: dict
    groups: list = None
    #: The folder it was loaded from (None for an index not saved yet).
    folder: Path = None

    def group_of(self, path):
        """The group of an indexed image (its path is resolved first); None if the
        index has no groups, the image is not indexed or has no group."""
        if self.groups is None:
            return None
        row = self._row_of.get(str(Path(path).resolve()))
        return None if row is None else self.groups[row]

    @cached_property
    def _row_of(self):
        return {path: row for row, path in enumerate(self.paths)}

    def __len__(self):
        return len(self.paths)

    @property
    def n_components(self):
        return self.index.d

    def search(self, Y, k=10, exclude=None):
        """The ``k`` best images for each query projection, by inner product.

        Parameters
        ----------
        Y : (n_queries, R) float32 projections.
        k : int >= 1.
        exclude : None or list of n_queries paths; an indexed image with that
            (resolved) path is left out of that query's results (a query does not
            find itself).

        Returns
        -------
        list of n_queries lists of ``(path, score)``, best first.
        """
        Y = np.ascontiguousarray(Y, dtype=np.float32).reshape(-1, self.n_components)
        extra = 0 if exclude is None else 1
        n = min(len(self), k + extra)
        scores, ids = self.index.search(Y, n)
        results = []
        for q in range(len(Y)):
            skip = None if exclude is None else str(Path(exclude[q]).resolve())
            hits = [(self.paths[i], float(s)) for i, s in zip(ids[q], scores[q]) if i >= 0 and self.paths[i] != skip]
            results.append(hits[:k])
        return results

    def save(self, folder):
        """Write ``index.faiss``, ``images.csv``, ``meta.json`` and copies of the codebook and
        projector into ``folder``.

        An existing folder is reused only if it is empty or an ndir index. The new
        index is written into a folder beside it and swapped in when complete
        (:func:`ndir.atomic.atomic_folder`): if writing fails (a full disk, say),
        the old index is left as it was and NdirInputError says why.
        """
        import faiss

        folder = check_index_folder(folder)
        try:
            with atomic_folder(folder) as tmp:
                # Through Python's file: a full disk is an OSError, not faiss's
                # RuntimeError and a C++ line on stderr.
                with open(tmp / INDEX_FILE, "wb") as handle:
                    faiss.write_index(self.index, faiss.PyCallbackIOWriter(handle.write))
                table = pd.DataFrame({"path": self.paths, "norm": self.norms})
                if self.groups is not None:
                    table["group"] = pd.array(self.groups, dtype=_group_dtype(self.groups))
                table.to_csv(tmp / IMAGES_FILE, index=False)
                for part, name in MODEL_FILES.items():
                    shutil.copyfile(self.model_path(part), tmp / name)
                with open(tmp / META_FILE, "w") as handle:
                    json.dump({**self.meta, "n_images": len(self)}, handle, indent=2, sort_keys=True)
                    handle.write("\n")
        except OSError as error:
            kept = "the old index is unchanged" if (folder / META_FILE).is_file() else "nothing was written"
            raise NdirInputError(
                f"{folder}: cannot write the index ({os_reason(error)}); {kept}; "
                "free some space or pass another folder (-o)"
            ) from None
        self.folder = folder

    @classmethod
    def load(cls, folder):
        """Read an index written by :meth:`save`; NdirInputError naming what is wrong."""
        import faiss

        folder = Path(folder)
        if folder.is_file():
            raise NdirInputError(
                f"{folder}: is a file, not an index folder; pass the folder that `ndir index -o` wrote"
            )
        if not folder.is_dir():
            raise NdirInputError(f"{folder}: no such index folder; build one with `ndir index`")
        missing = [name for name in (INDEX_FILE, IMAGES_FILE, META_FILE) if not (folder / name).is_file()]
        if missing:
            raise NdirInputError(
                f"{folder}: not an ndir index (missing {', '.join(missing)}); build it with `ndir index`"
            )
        try:
            with open(folder / META_FILE) as handle:
                meta = json.load(handle)
            # Folder names stay text ("007" is not 7); Holidays' and UKBench's are numbers.
            text = ["path", "group"] if meta.get("groups") == "folders" else ["path"]
            table = pd.read_csv(folder / IMAGES_FILE, dtype=dict.fromkeys(text, str))
            index = faiss.read_index(str(folder / INDEX_FILE))
        except (OSError, ValueError, RuntimeError) as error:
            raise NdirInputError(f"{folder}: damaged index ({error}); build it again with `ndir index`") from None
        try:
            n_components = int(meta["projector"]["n_components"])
        except (KeyError, TypeError, ValueError):
            raise NdirInputError(
                f"{folder / META_FILE}: damaged, it has no projector record; build the index again with `ndir index`"
            ) from None
        if index.d != n_components:
            raise NdirInputError(
                f"{folder / INDEX_FILE}: holds vectors of {index.d} dimensions but "
                f"{META_FILE} records a projector of R = {n_components}; the index is "
                "damaged, build it again with `ndir index`"
            )
        if index.ntotal != len(table):
            raise NdirInputError(
                f"{folder}: {INDEX_FILE} holds {index.ntotal} vectors but {IMAGES_FILE} "
                f"{len(table)} images; build the index again with `ndir index`"
            )
        groups = None
        if "group" in table.columns:
            named = meta.get("groups") == "folders"
            groups = [None if pd.isna(g) else g if named else int(g) for g in table["group"]]
        return cls(
            index,
            table["path"].tolist(),
            table["norm"].to_numpy(np.float32),
            meta,
            groups,
            folder,
        )

    def model_path(self, part):
        """The file of ``part`` (``"codebook"`` or ``"projector"``), checked unchanged:
        the index folder's copy, or, for an index not saved yet (or saved before the
        copies), the file it was built from.

        Raises NdirInputError if that file is missing or changed since the index was
        built (its SHA-256 is in ``meta.json``).
        """
        record = self.meta[part]
        copy = None if self.folder is None else self.folder / MODEL_FILES[part]
        path = copy if copy is not None and copy.is_file() else Path(record["path"])
        if not path.is_file():
            raise NdirInputError(
                f"{path}: the {part} this index was built with is missing; "
                "restore it or build the index again with `ndir index`"
            )
        if file_sha256(path) != record["sha256"]:
            raise NdirInputError(
                f"{path}: the {part} changed since this index was built; build the index again with `ndir index`"
            )
        return path

    def encoder(self):
        """The :class:`ImageEncoder` the index was built with (:meth:`model_path`)."""
        params = self.meta["descriptors"]
        return load_encoder(
            self.model_path("codebook"),
            self.model_path("projector"),
            max_width=params["max_width"],
            step=params["step"],
            cell_sizes=params["cell_sizes"],
            alpha=self.meta["alpha"],
        )


def _group_dtype(groups):
    """pandas dtype of a column of group labels: text if any label is a name."""
    return "string" if any(isinstance(g, str) for g in groups) else "Int64"


def group_labels(folder, kind):
    """Near-duplicate groups of the images under ``folder``, read from their names
    as the ``kind`` data set (``holidays``, ``ukbench``, ``folders``: see
    :func:`ndir.data.scan_dataset`).

    Returns ``{resolved path: group}``, the group an int (the number Holidays' and
    UKBench's names give) or, for ``folders``, the sub-folder's name; an image the
    naming gives no group to is absent. Raises NdirInputError (DatasetError) if no
    image follows the naming.
    """
    from ndir.data import scan_dataset

    images = scan_dataset(kind, folder).images
    labels = images["group_name"] if kind == "folders" else images["group"].map(int)
    return {str(Path(path).resolve()): label for path, label in zip(images["path"], labels)}


def encoded_images(paths, encoder, n_jobs=None):
    """``(path, y)`` for each image in order, ``y`` the projected signature or, for a
    file that cannot be read, the NdirInputError that says why.

    The images are encoded on ``n_jobs`` threads (None or -1: every CPU available to
    the process), each with single-threaded BLAS
    (:func:`ndir.encoding.single_threaded_blas_pool`), so ``y`` has the same bits as
    on one thread (and as the workflow's signatures). At most ``4 * n_jobs`` images
    are in flight: the paths are consumed as the results are. Close the generator
    (``contextlib.closing``) when stopping early: images not started are dropped and
    BLAS gets its thread count back.
    """
    n_jobs = available_cpus() if n_jobs in (None, -1) else int(n_jobs)
    if n_jobs < 1:
        raise ValueError(f"n_jobs={n_jobs}: give a positive number of threads, or None or -1 for every CPU")

    def attempt(path):
        try:
            return encoder(path)
        except NdirInputError as error:
            return error

    if n_jobs == 1:
        yield from ((path, attempt(path)) for path in paths)
        return
    in_flight = deque()
    with single_threaded_blas_pool(n_jobs) as pool:
        for path in paths:
            in_flight.append((path, pool.submit(attempt, path)))
            if len(in_flight) >= 4 * n_jobs:
                done, future = in_flight.popleft()
                yield done, future.result()
        while in_flight:
            done, future = in_flight.popleft()
            yield done, future.result()


def build_index(paths, encoder, progress=None, on_skip=None, groups=None, n_jobs=None):
    """Encode and project every image; images that cannot be read are skipped.

    Streams image by image (:func:`encoded_images`, on ``n_jobs`` threads): only the
    (n, R) projections are held.

    Parameters
    ----------
    paths : sequence of image paths.
    encoder : ImageEncoder.
    progress : None or callable ``progress(iterable, total=n)`` wrapping an iterable
        (e.g. ``tqdm.tqdm``); it is given the images as they are encoded, not as
        they are handed to the threads.
    on_skip : None or callable ``on_skip(path, message)`` told of each skipped
        image; None logs a warning.
    groups : None, or ``{resolved path: group}`` (:func:`group_labels`): the
        index then records each image's group (None where absent).
    n_jobs : int or None, threads encoding images (None or -1: every CPU available).

    Returns
    -------
    index : NearDuplicateIndex
    skipped : list of (path, reason) for the images left out.

    Raises
    ------
    NdirInputError
        If no image could be read.
    """
    import faiss

    rows, kept, skipped = [], [], []
    outcomes = encoded_images(paths, encoder, n_jobs)
    with closing(outcomes):
        shown = progress(outcomes, total=len(paths)) if progress else outcomes
        for path, outcome in shown:
            if isinstance(outcome, NdirInputError):
                if on_skip is None:
                    logger.warning("skipped %s", outcome)
                else:
                    on_skip(path, str(outcome))
                skipped.append((str(path), str(outcome)))
                continue
            rows.append(outcome)
            kept.append(str(Path(path).resolve()))
    if not kept:
        raise NdirInputError(
            f"none of the {len(paths)} images could be read (first: {skipped[0][1]}); check the image folder"
        )
    Y = np.ascontiguousarray(np.stack(rows), dtype=np.float32)
    index = faiss.IndexFlatIP(encoder.n_components)
    index.add(Y)
    return (
        NearDuplicateIndex(
            index,
            kept,
            np.linalg.norm(Y, axis=1).astype(np.float32),
            encoder.meta(),
            None if groups is None else [groups.get(path) for path in kept],
        ),
        skipped,
    )


def query_index(index, paths, k=10):
    """The ``k`` nearest indexed images of each query image file, itself excluded.

    The queries are encoded on every CPU (:func:`encoded_images`).

    Returns a list of ``{"query": path, "results": [{"rank", "path", "score"}]}``.
    Raises NdirInputError (naming the file) if a query image cannot be read.
    """
    encoder = index.encoder()
    Y = []
    with closing(encoded_images(paths, encoder)) as outcomes:
        for _, outcome in outcomes:
            if isinstance(outcome, NdirInputError):
                raise outcome
            Y.append(outcome)
    Y = np.stack(Y)
    hits = index.search(Y, k=k, exclude=paths)
    return [
        {
            "query": str(Path(path).resolve()),
            "results": [
                {"rank": rank, "path": hit, "score": score} for rank, (hit, score) in enumerate(found, start=1)
            ],
        }
        for path, found in zip(paths, hits)
    ]


# --------------------------------------------------------------------------- info


def describe(path):
    """Facts about a projector, a codebook or an index folder, as an ordered dict.

    Projector: R, tau, non-zeros (total and per column), the signature and D it
    expects, and its storage in bytes as a dense float32 matrix and in CSC form
    (float32 values, int32 row indices and column pointers). Codebook: kind, K,
    dimensions per cluster and the signature length D. Index: images, R and the
    codebook and projector it was built with.
    """
    path = Path(path)
    if path.is_dir():
        index = NearDuplicateIndex.load(path)
        meta = index.meta
        projector = meta["projector"]
        return {
            "file": str(path),
            "type": "index",
            "images": len(index),
            "R": index.n_components,
            "signature": meta["codebook"]["signature"],
            "D": meta["codebook"]["dim"],
            "tau": projector["meta"].get("sparsity"),
            "groups": meta.get("groups", "none"),
            "codebook": str(index.model_path("codebook")),
            "projector": str(index.model_path("projector")),
            "descriptors": meta["descriptors"],
            "alpha": meta["alpha"],
            "ndir_version": meta["ndir_version"],
        }
    if path.is_file() and path.suffix != ".npz" and not zipfile.is_zipfile(path):
        # A table or figure of the run, say: nothing damaged, nothing to rebuild.
        raise NdirInputError(
            f"{path}: not an ndir model file; ndir info describes a codebook or a projector "
            "(.npz, written by the workflow) or an index folder"
        )
    kind = file_kind(path)
    if kind == "projector":
        U, meta = load_projector(path)
        D, R = U.shape
        per_column = np.diff(U.indptr)
        cost = projection_cost(U)
        return {
            "file": str(path),
            "type": "projector",
            "R": R,
            "tau": meta.get("sparsity"),
            "non-zeros": cost["nnz"],
            "non-zeros per column": (
                int(per_column[0])
                if per_column.min() == per_column.max()
                else f"{per_column.min()}..{per_column.max()}"
            ),
            "density": round(cost["nnz"] / (D * R), 6),
            "signature": meta.get("signature", "unknown"),
            "D": D,
            "bytes dense": cost["bytes_dense"],
            "bytes CSC": cost["bytes_sparse"],
            "multiply-adds per image": cost["madds_sparse"],
            "training": {
                key: value
                for key, value in meta.items()
                if key not in ("signature", "n_features", "n_components", "sparsity")
            },
        }
    if kind in CODEBOOK_CLASSES:
        model, signature = load_codebook(path)
        per_cluster = model.n_components if kind == "vlad" else model.means_.shape[1]
        return {
            "file": str(path),
            "type": "codebook",
            "kind": kind,
            "signature": signature,
            "K": model.n_clusters,
            "dims per cluster": (per_cluster if kind == "vlad" else f"2 x {per_cluster} (PCA of descriptors)"),
            "D": model.dim,
        }
    if kind == "descriptor_pca":
        from ndir.codebooks import DescriptorPCA

        pca = DescriptorPCA.load(path)
        return {
            "file": str(path),
            "type": "descriptor PCA",
            "input dims": pca.mean_.shape[0],
            "components": pca.n_components,
        }
    raise NdirInputError(f"{path}: unknown ndir file kind {kind!r}; pass a codebook, a projector or an index folder")
