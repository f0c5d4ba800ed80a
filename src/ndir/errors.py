"""Exceptions raised for bad user input: each message names the file or key and the fix."""


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
