"""Fetching a public data set (INRIA Holidays, UKBench): download its archives, each from
the first of its URLs that gives it, resuming a cut download, check them, and unpack
their images into a folder, whole or not at all.

Each archive has a list of URLs tried in order (``download.<kind>.archives`` of the
config: INRIA's current host, then its former FTP server, then any mirror added). A URL
fails when the server cannot be reached or refuses, when the download stops short, when
what it gives is not an archive of the expected format (a web page) or when its SHA-256
differs from the archive's pin; the next URL is then tried. Every failure is a
:class:`DownloadError` naming the URL, the file or the config key, and the fix: add a
URL to the key that holds the archive's URLs, download the archive by hand to the path
the workflow expects, or point ``dataset.path`` at a folder of the unpacked images.

URLs may be ``http://``, ``https://``, ``ftp://`` (INRIA's former server) or ``file://``.
HTTP downloads resume with a ``Range`` request, FTP ones with ``REST``; a partial
download is kept beside the archive as ``<archive>.part`` until it is complete, and is
resumed from whichever URL of the archive answers next (the URLs of one archive must
serve the same file).
"""

import contextlib
import ftplib
import functools
import hashlib
import json
import logging
import os
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from ndir.atomic import atomic_folder, atomic_output
from ndir.data import IMAGE_SUFFIXES, scan_dataset
from ndir.errors import ConfigError, NdirInputError

logger = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes read at a time
TIMEOUT = 60  # seconds without an answer before a download gives up
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first member, or an empty zip's end record
GZIP_MAGIC = b"\x1f\x8b"
#: What each archive format is called in messages.
FORMAT_NAMES = {"zip": "zip archive", "gzip": "gzip/tar archive", "tar": "tar archive"}
#: What reading a damaged or cut archive raises (gzip.BadGzipFile is an OSError).
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError)


class DownloadError(NdirInputError):
    """A data set could not be fetched, or what was fetched is not that data set."""


class UrlError(DownloadError):
    """One URL that did not give its archive: ``url``, ``reason`` (what went wrong) and
    ``fix``; the message is ``<url>: <reason>; <fix>``."""

    def __init__(self, url, reason, fix):
        self.url, self.reason, self.fix = url, reason, fix
        super().__init__(f"{url}: {reason}; {fix}")


def _by_hand(dest):
    return f"download it by hand to {dest}, or set dataset.path to a folder of the unpacked images"


def _magic_format(path):
    """``"zip"`` or ``"gzip"`` from the file's first bytes, or None."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    return None


def archive_format(path, name=None):
    """``"zip"``, ``"gzip"`` (a .tar.gz) or ``"tar"`` (anything else: tarfile guesses):
    from the file's first bytes, else from ``name`` (``path``'s name by default), so that
    an archive whose end is missing or damaged is still known for what it is."""
    return _magic_format(path) or _expected_format(name or Path(path).name) or "tar"


def _expected_format(name):
    """The format an archive's name promises (``.zip``, ``.tar.gz``...), or None."""
    name = name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar.gz", ".tgz", ".gz")):
        return "gzip"
    return None


def file_sha256(path):
    """The SHA-256 of the file ``path``, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url, dest, sha256=None, progress=True, pin_key="the sha256 argument"):
    """Download ``url`` to the file ``dest``, resuming ``<dest>.part`` if a former try
    left one, and check it.

    Parameters
    ----------
    url : str, ``http(s)://``, ``ftp://`` or ``file://``.
    dest : path of the archive to write; it appears only once complete and checked.
    sha256 : None, or the 64 hex digits the archive must have (a pin from the config).
    progress : draw a progress bar on stderr.
    pin_key : where ``sha256`` was set, as messages name it
        (``download.ukbench.sha256["ukbench.zip"]``).

    Returns
    -------
    dict ``{"url", "bytes", "sha256"}`` of the archive written.

    Raises
    ------
    UrlError
        The server cannot be reached or refuses (HTTP 404, FTP 550...), the download
        stops short of the size the server announced (the part is kept: run again to
        resume), or what was downloaded is not the archive: not of the format its name
        says (``.zip``, ``.tar.gz``: a web page, say) or with a SHA-256 other than the
        pin (it is moved aside to ``<dest>.rejected``).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    rejected = dest.with_name(dest.name + ".rejected")
    scheme = urllib.parse.urlsplit(url).scheme
    fetch = _ftp if scheme == "ftp" else _urllib
    try:
        total = fetch(url, part, progress)
    except urllib.error.HTTPError as error:
        raise UrlError(url, f"the server answered HTTP {error.code} {error.reason}", _by_hand(dest)) from None
    except ftplib.error_perm as error:
        raise UrlError(url, f"the FTP server refused it ({str(error).strip()})", _by_hand(dest)) from None
    except (urllib.error.URLError, ftplib.Error, OSError, EOFError) as error:
        reason = getattr(error, "reason", error)  # URLError wraps the socket's error
        if isinstance(reason, OSError):
            reason = reason.strerror or str(reason) or type(reason).__name__
        raise UrlError(url, f"cannot download ({reason})", _by_hand(dest)) from None
    size = part.stat().st_size
    if total is not None and size != total:
        raise UrlError(
            url,
            f"the download stopped at {size:,} of {total:,} bytes (kept in {part})",
            f"run the workflow again to resume, or {_by_hand(dest)}",
        )
    expected = _expected_format(dest.name)
    if expected is not None and _magic_format(part) != expected:
        with open(part, "rb") as handle:
            head = handle.read(16)
        os.replace(part, rejected)
        raise UrlError(
            url,
            f"what it gave is not a {FORMAT_NAMES[expected]} but begins with {head!r} (a web page? moved to "
            f"{rejected})",
            f"check the URL, or {_by_hand(dest)}",
        )
    digest = file_sha256(part)
    if sha256 is not None and digest != sha256.lower():
        os.replace(part, rejected)
        raise UrlError(
            url,
            f"its SHA-256 is {digest}, not the {sha256} pinned in {pin_key} (moved to {rejected})",
            f"check the URL (a mirror with other files?) or the pin {pin_key}",
        )
    os.replace(part, dest)
    return {"url": url, "bytes": size, "sha256": digest}


def fetch_archive(urls, dest, sha256=None, progress=True, urls_key="urls", pin_key="the sha256 argument"):
    """Download the archive ``dest`` from the first of ``urls``, tried in order, that
    gives it whole, of the format its name says and with the SHA-256 ``sha256`` if
    pinned (:func:`download`); a part cut short by one URL is resumed from the next.

    ``urls_key`` and ``pin_key`` are the config keys of ``urls`` and ``sha256``, as
    the messages name them (``download.holidays.archives[0].urls``).

    Returns :func:`download`'s dict for the URL that gave it. Raises one
    :class:`DownloadError` naming ``urls_key``, each URL with its failure, and the fix,
    when none did.
    """
    dest = Path(dest)
    failures = []
    for number, url in enumerate(urls):
        try:
            return download(url, dest, sha256=sha256, progress=progress, pin_key=pin_key)
        except UrlError as failure:
            failures.append(failure)
            if number + 1 < len(urls):
                logger.warning("%s: %s; trying the next URL of %s", url, failure.reason, urls_key)
    part = dest.with_name(dest.name + ".part")
    fixes = [f"add a URL that serves {dest.name} to {urls_key}", _by_hand(dest)]
    if part.is_file():
        fixes.insert(0, f"run the workflow again to resume the {part.stat().st_size:,} bytes kept in {part}")
    tried = "its URL" if len(urls) == 1 else f"any of its {len(urls)} URLs, tried in this order"
    raise DownloadError(
        f"{urls_key}: {dest.name} could not be downloaded from {tried}; "
        + ", or ".join(fixes)
        + "".join(f"\n  {failure.url}: {failure.reason}" for failure in failures)
    )


def _bar(progress, total, start, name):
    return tqdm(total=total, initial=start, unit="B", unit_scale=True, desc=name, disable=not progress, mininterval=1)


def _urllib(url, part, progress):
    """HTTP(S) or file download into ``part``, from its current size on if the server
    honours ranges; the total size announced, or None."""
    start = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not start:  # 416: the part is already whole
            raise
        return start
    with response:
        resumed = start and getattr(response, "status", 200) == 206
        start = start if resumed else 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None else None
        with open(part, "ab" if resumed else "wb") as out, _bar(progress, total, start, part.name[:-5]) as bar:
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                bar.update(len(block))
    return total


def _ftp(url, part, progress):
    """FTP download into ``part`` (anonymous login), resumed with REST; the size the
    server gives, or None."""
    parsed = urllib.parse.urlsplit(url)
    path = PurePosixPath(urllib.parse.unquote(parsed.path))
    start = part.stat().st_size if part.exists() else 0
    with ftplib.FTP(timeout=TIMEOUT) as ftp:
        ftp.connect(parsed.hostname, parsed.port or 21)
        ftp.login(parsed.username or "anonymous", parsed.password or "anonymous@")
        ftp.voidcmd("TYPE I")
        try:
            total = ftp.size(str(path))
        except ftplib.error_perm:
            total = None
        if total is not None and start >= total:
            return start
        with open(part, "ab" if start else "wb") as out, _bar(progress, total, start, path.name) as bar:

            def write(block):
                out.write(block)
                bar.update(len(block))

            ftp.retrbinary(f"RETR {path}", write, blocksize=CHUNK, rest=start or None)
    return total


def _members(archive, form):
    """``(name, open)`` of each file member of a .zip (``form`` ``"zip"``) or .tar(.gz)
    archive."""
    if form == "zip":
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: zipped.open(info)
        return
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile():
                yield member.name, lambda member=member: tar.extractfile(member)
        # The rest of the stream, past the tar's end: a .tar.gz's own CRC is checked only
        # at its end, and scrambled data may decompress without an error before it.
        while tar.fileobj.read(CHUNK):
            pass


def _damaged(archive, form, error):
    what = str(error) or type(error).__name__
    if form == "tar":
        problem = f"not a zip or tar archive, or a damaged one ({what})"
    else:
        problem = f"a damaged {FORMAT_NAMES[form]}, cut short or corrupted ({what})"
    return DownloadError(f"{archive}: {problem}; delete it and run the workflow again, or {_by_hand(archive)}")


def _unpack(archive, inside, folder):
    """Copy the images of ``archive`` found in its folder ``inside`` into ``folder``;
    their number. An error reading the archive is a :class:`DownloadError` that names it
    and its format (:func:`archive_format`); one writing ``folder`` (a full disk)
    propagates as it is."""
    form = archive_format(archive)

    def read(step):
        try:
            return step()
        except READ_ERRORS as error:
            raise _damaged(archive, form, error) from None

    found = 0
    with contextlib.closing(_members(archive, form)) as members:
        while (item := read(lambda: next(members, None))) is not None:
            name, open_member = item
            path = PurePosixPath(name)
            if path.parent.name != inside or path.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            target = folder / path.name
            if target.exists():
                raise DownloadError(f"{archive}: {path.name} is in it twice, or in two archives; check the URLs")
            source = read(open_member)
            with source, open(target, "wb") as out:
                chunk = functools.partial(source.read, CHUNK)
                while block := read(chunk):
                    out.write(block)
            found += 1
    return found


def unpack_images(archives, folder, inside, kind, n_images, n_groups):
    """Unpack the images of ``archives`` found in their folder ``inside`` into ``folder``
    (flat), then check that they are the data set: ``n_images`` images in ``n_groups``
    groups of layout ``kind`` (:func:`ndir.data.scan_dataset`). ``folder`` appears only
    if every check passes; nothing half-unpacked is left behind.

    Only members ``<anything>/<inside>/<name>`` with an image suffix are read, so the
    thumbnails and web pages of an archive (UKBench's) are left out, and no member
    can write outside ``folder``.

    Raises DownloadError naming the archive (a damaged zip or gzip/tar archive, told
    apart by its first bytes or its name, so that one cut short is named as such; no
    images in ``inside``) or the folder (counts that differ: other archives than the
    data set's).
    """
    folder = Path(folder)
    with atomic_folder(folder) as tmp:
        for archive in archives:
            if not _unpack(archive, inside, tmp):
                raise DownloadError(
                    f"{archive}: no image in a folder {inside}/ of the archive; check the URL, or "
                    f"download.{kind}.folder_in_archive"
                )
        images = scan_dataset(kind, tmp).images
        got = (len(images), int(images["group"].nunique()))
        if got != (n_images, n_groups):
            raise DownloadError(
                f"{folder}: the archives hold {got[0]} images in {got[1]} groups, not the {n_images} in {n_groups} "
                f"of {kind}; check download.{kind}.archives (another data set, or a mirror that changed it?)"
            )
    return got


def fetch_dataset(
    archives, archive_folder, images_folder, record, inside, kind, n_images, n_groups, sha256, progress=True
):
    """Fetch every archive of ``archives`` not yet in ``archive_folder``
    (:func:`fetch_archive`), unpack and check their images into ``images_folder``
    (:func:`unpack_images`) and write ``record``, for the run's provenance.

    Parameters
    ----------
    archives : list of ``{"name": "jpg1.tar.gz", "urls": [...]}``
        ``download.<kind>.archives`` of the config: each archive's file name in
        ``archive_folder`` and its URLs, tried in order.
    sha256 : dict
        ``download.<kind>.sha256``: archive name -> the SHA-256 it must have.

    Returns
    -------
    The record's entries: a list of ``{"file", "url", "bytes", "sha256"}``, one per
    archive, ``url`` being the URL that gave it, or None for an archive found already
    in ``archive_folder`` (fetched by an earlier run, or by hand).
    """
    archive_folder = Path(archive_folder)
    key = f"download.{kind}.archives"
    names = [archive["name"] for archive in archives]
    for number, name in enumerate(names):
        if name in ("", ".", "..") or PurePosixPath(name).name != name or "\\" in name:
            raise ConfigError(f"{key}[{number}].name: {name!r} is not a file name; name the archive, as jpg1.tar.gz")
        if name in names[:number]:
            raise ConfigError(f"{key}[{number}].name: {name!r} names two archives; give each archive its own name")
    entries = []
    for number, archive in enumerate(archives):
        name = archive["name"]
        dest = archive_folder / name
        pin = sha256.get(name)
        pin_key = f'download.{kind}.sha256["{name}"]'
        if dest.is_file():
            entry = {"url": None, "bytes": dest.stat().st_size, "sha256": file_sha256(dest)}
            if pin is not None and entry["sha256"] != pin.lower():
                raise DownloadError(
                    f"{dest}: its SHA-256 is {entry['sha256']}, not the {pin} pinned in {pin_key}; "
                    "delete it to download it again, or correct the pin"
                )
        else:
            entry = fetch_archive(
                archive["urls"], dest, sha256=pin, progress=progress, urls_key=f"{key}[{number}].urls", pin_key=pin_key
            )
        entries.append({"file": str(dest), **entry})
    unpack_images([entry["file"] for entry in entries], images_folder, inside, kind, n_images, n_groups)
    with atomic_output(record) as tmp:
        Path(tmp).write_text(json.dumps(entries, indent=2) + "\n")
    return entries
