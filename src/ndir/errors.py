"""Exceptions raised for bad user input: each message names the file or key and the fix."""

from pathlib import PurePath


class NdirInputError(ValueError):
    """Bad input from the user (a file, a folder or a config value)."""


class DatasetError(NdirInputError):
    """A data set folder is missing, empty or laid out in a way its loader does not read."""


class ResultFileError(NdirInputError):
    """A file written by an earlier rule is stale, incomplete or does not match the
    run's other inputs; the message names the file and the rule to rerun."""


class ImageReadError(NdirInputError):
    """An image file cannot be decoded; carries the path and the reason."""

    def __init__(self, path, reason):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ConfigError(NdirInputError):
    """A configuration value is invalid; the message names the key."""


def rebuild_advice(path):
    """How to replace ``path``, a file the workflow wrote that is cut short or damaged:
    the command that rebuilds exactly that file, for every message that says so.

    The file is named as a Snakemake target because many such files (samples,
    signatures, codebooks, projectors) are no input of the default target once its
    outputs exist: deleted, they would not be written again by a plain ``snakemake``.
    The target is the path from its last ``results`` folder on (the workflow's working
    directory holds it). A file outside any ``results`` folder is a copy the workflow
    cannot name, so the advice is to copy it again from the run that wrote it.
    """
    parts = PurePath(path).parts
    if "results" not in parts:
        return (
            "it is not in a workflow's results/ folder, so copy it again from the results/ of the run that "
            "wrote it (where `snakemake results/<its path> --cores all` writes it anew)"
        )
    start = max(i for i, part in enumerate(parts) if part == "results")
    target = PurePath(*parts[start:])
    return (
        f"delete it and run `snakemake {target.as_posix()} --cores all` in the workflow's folder, with the "
        "--configfile/--config options of your run, to write it anew; then your usual snakemake command "
        "brings what depends on it up to date"
    )


def os_reason(error):
    """The system's one-line reason for a failed file operation (``No space left on
    device``, ``Read-only file system``): an OSError's ``strerror``, or the last
    parenthesised part of a faiss RuntimeError, which quotes it after C++ details."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = " ".join(str(error).split())
    if text.endswith(")") and "(" in text:
        return text[text.rindex("(") + 1 : -1]
    return text
