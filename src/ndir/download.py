"""Fetching a public data set (INRIA Holidays, UKBench): download its archives, resuming a
cut download, check them, and unpack their images into a folder, whole or not at all.

Every failure is a :class:`DownloadError` of one line that names the URL or the file and
the fix: download the archive by hand to the path the workflow expects, or point
``dataset.path`` at a folder of the unpacked images.

URLs may be ``http://``, ``https://``, ``ftp://`` (INRIA's server) or ``file://``.
HTTP downloads resume with a ``Range`` request, FTP ones with ``REST``; a partial
download is kept beside the archive as ``<archive>.part`` until it is complete.
"""

import ftplib
import hashlib
import json
import os
import shutil
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
from ndir.errors import NdirInputError

CHUNK = 1 << 20  # bytes read at a time
TIMEOUT = 60  # seconds without an answer before a download gives up


class DownloadError(NdirInputError):
    """A data set could not be fetched, or what was fetched is not that data set."""


def _by_hand(dest):
    return f"download it by hand to {dest}, or set dataset.path to a folder of the unpacked images"


def file_sha256(path):
    """The SHA-256 of the file ``path``, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url, dest, sha256=None, progress=True):
    """Download ``url`` to the file ``dest``, resuming ``<dest>.part`` if a former try
    left one, and check it.

    Parameters
    ----------
    url : str, ``http(s)://``, ``ftp://`` or ``file://``.
    dest : path of the archive to write; it appears only once complete and checked.
    sha256 : None, or the 64 hex digits the archive must have (a pin from the config).
    progress : draw a progress bar on stderr.

    Returns
    -------
    dict ``{"url", "bytes", "sha256"}`` of the archive written.

    Raises
    ------
    DownloadError
        The server cannot be reached or refuses (HTTP 404, FTP 550...), the download
        stops short of the size the server announced (the part is kept: run again to
        resume), or the archive's SHA-256 differs from the pin (it is moved aside to
        ``<dest>.rejected``).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    scheme = urllib.parse.urlsplit(url).scheme
    fetch = _ftp if scheme == "ftp" else _urllib
    try:
        total = fetch(url, part, progress)
    except urllib.error.HTTPError as error:
        raise DownloadError(f"{url}: the server answered HTTP {error.code} {error.reason}; {_by_hand(dest)}") from None
    except ftplib.error_perm as error:
        raise DownloadError(f"{url}: the FTP server refused it ({str(error).strip()}); {_by_hand(dest)}") from None
    except (urllib.error.URLError, ftplib.Error, OSError, EOFError) as error:
        reason = getattr(error, "reason", error)  # URLError wraps the socket's error
        if isinstance(reason, OSError):
            reason = reason.strerror or str(reason) or type(reason).__name__
        raise DownloadError(f"{url}: cannot download ({reason}); {_by_hand(dest)}") from None
    size = part.stat().st_size
    if total is not None and size != total:
        raise DownloadError(
            f"{url}: the download stopped at {size:,} of {total:,} bytes (kept in {part}); run the workflow "
            f"again to resume, or {_by_hand(dest)}"
        )
    digest = file_sha256(part)
    if sha256 is not None and digest != sha256.lower():
        rejected = dest.with_name(dest.name + ".rejected")
        os.replace(part, rejected)
        raise DownloadError(
            f"{url}: its SHA-256 is {digest}, not the {sha256} pinned in download.sha256 (moved to {rejected}); "
            "check the URL (a mirror with other files?) or the pin"
        )
    os.replace(part, dest)
    return {"url": url, "bytes": size, "sha256": digest}


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


def _members(archive):
    """``(name, open)`` of each file member of a .tar(.gz) or .zip archive."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: zipped.open(info)
        return
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile():
                yield member.name, lambda member=member: tar.extractfile(member)


def unpack_images(archives, folder, inside, kind, n_images, n_groups):
    """Unpack the images of ``archives`` found in their folder ``inside`` into ``folder``
    (flat), then check that they are the data set: ``n_images`` images in ``n_groups``
    groups of layout ``kind`` (:func:`ndir.data.scan_dataset`). ``folder`` appears only
    if every check passes; nothing half-unpacked is left behind.

    Only members ``<anything>/<inside>/<name>`` with an image suffix are read, so the
    thumbnails and web pages of an archive (UKBench's) are left out, and no member
    can write outside ``folder``.

    Raises DownloadError naming the archive (damaged, cut short, no images in
    ``inside``) or the folder (counts that differ: other archives than the data set's).
    """
    folder = Path(folder)
    with atomic_folder(folder) as tmp:
        for archive in archives:
            found = 0
            try:
                for name, member in _members(archive):
                    path = PurePosixPath(name)
                    if path.parent.name != inside or path.suffix.lower() not in IMAGE_SUFFIXES:
                        continue
                    target = tmp / path.name
                    if target.exists():
                        raise DownloadError(
                            f"{archive}: {path.name} is in it twice, or in two archives; check the URLs"
                        )
                    with member() as source, open(target, "wb") as out:
                        shutil.copyfileobj(source, out, CHUNK)
                    found += 1
            except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
                raise DownloadError(
                    f"{archive}: damaged or cut short ({error or type(error).__name__}); delete it and run the "
                    f"workflow again, or {_by_hand(archive)}"
                ) from None
            if not found:
                raise DownloadError(
                    f"{archive}: no image in a folder {inside}/ of the archive; check the URL, or "
                    "download.<kind>.folder_in_archive"
                )
        images = scan_dataset(kind, tmp).images
        got = (len(images), int(images["group"].nunique()))
        if got != (n_images, n_groups):
            raise DownloadError(
                f"{folder}: the archives hold {got[0]} images in {got[1]} groups, not the {n_images} in {n_groups} "
                f"of {kind}; check download.{kind}.urls (another data set, or a mirror that changed it?)"
            )
    return got


def fetch_dataset(urls, archive_folder, images_folder, record, inside, kind, n_images, n_groups, sha256, progress=True):
    """Download every archive of ``urls`` not yet in ``archive_folder``, unpack and check
    their images into ``images_folder`` (:func:`unpack_images`) and write ``record``,
    a JSON list of ``{"url", "file", "bytes", "sha256"}`` per archive, for the run's
    provenance. ``sha256`` maps archive names to pinned checksums."""
    archive_folder = Path(archive_folder)
    entries = []
    for url in urls:
        name = PurePosixPath(urllib.parse.urlsplit(url).path).name
        dest = archive_folder / name
        if dest.is_file():
            entry = {"url": url, "bytes": dest.stat().st_size, "sha256": file_sha256(dest)}
            pin = sha256.get(name)
            if pin is not None and entry["sha256"] != pin.lower():
                raise DownloadError(
                    f"{dest}: its SHA-256 is {entry['sha256']}, not the {pin} pinned in download.sha256; "
                    "delete it to download it again, or correct the pin"
                )
        else:
            entry = download(url, dest, sha256=sha256.get(name), progress=progress)
        entries.append({"file": str(dest), **entry})
    unpack_images([entry["file"] for entry in entries], images_folder, inside, kind, n_images, n_groups)
    with atomic_output(record) as tmp:
        Path(tmp).write_text(json.dumps(entries, indent=2) + "\n")
    return entries
