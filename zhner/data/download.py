"""Downloading registered datasets from their public sources, verified against the catalogue's sha256.

Kept apart from the registry so that loading data never pulls in the network code, and the network code can be
tested (against a loopback server) on its own.
"""
from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from zhner.data.catalogue import ONTONOTES_HOWTO, DatasetFile, get_info
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open

log = logging.getLogger(__name__)


def user_cache_dir() -> Path:
    """Where `fetch` downloads to by default: `$ZHNER_CACHE` or `~/.cache/zhner/data`."""
    env = os.environ.get("ZHNER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "zhner" / "data"


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(
    name: str, cache_dir: Path | None = None, base_url: str | None = None, timeout: float = 30
) -> list[Path]:
    """Download a dataset's files into `cache_dir` (default: the user cache), verifying each sha256.

    Each file streams into a temporary file next to its target and is renamed into place only when its digest
    matches; a mismatch or a failed download is a ZhnerError and leaves no file behind. A file already present with
    the right digest is not downloaded again. `base_url` (a mirror, or a test server) replaces the source URL:
    the file is fetched from f"{base_url}/{relpath}". Returns the paths of all the dataset's files.
    """
    info = get_info(name)
    if info.carried:
        raise ZhnerError(f"{name} is carried inside the zhner package (zhner/resources/corpus/): there is nothing to fetch")
    if any(f.url is None for f in info.files):
        raise ZhnerError(f"{name} cannot be fetched: {ONTONOTES_HOWTO}")
    root = Path(cache_dir).expanduser() if cache_dir is not None else user_cache_dir()
    paths = []
    for dfile in info.files:
        target = root / dfile.relpath
        if target.is_file() and dfile.sha256 is not None and sha256_file(target) == dfile.sha256:
            log.info("%s: already present and verified", target)
        else:
            url = f"{base_url.rstrip('/')}/{dfile.relpath}" if base_url else dfile.url
            assert url is not None
            _download(url, target, dfile, timeout)
        paths.append(target)
    return paths


def _download(url: str, target: Path, dfile: DatasetFile, timeout: float) -> None:
    """Stream `url` to `target` through a temporary file; keep it only if its sha256 is the expected one."""
    # Folders we create, so a failed download can remove them again (deepest first).
    created = [p for p in [target.parent, *target.parent.parents] if not p.exists()]
    log.info("downloading %s -> %s", url, target)
    hint = "check the network, pass base_url=<a mirror>, or copy the file there by hand"
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "zhner"})  # a malformed URL raises ValueError
        # A fresh opener reads the proxy settings of the environment at call time.
        with urllib.request.build_opener().open(request, timeout=timeout) as response:
            with atomic_open(target, "wb") as out:
                digest = hashlib.sha256()
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    digest.update(chunk)
                    out.write(chunk)
                actual = digest.hexdigest()
                if dfile.sha256 is not None and actual != dfile.sha256:
                    # Raising inside atomic_open discards the temporary file.
                    raise ZhnerError(
                        f"sha256 mismatch for {dfile.relpath}: expected {dfile.sha256}, got {actual}; "
                        "the download was discarded",
                        url,
                    )
    except ZhnerError:
        _remove_empty(created)
        raise
    except urllib.error.HTTPError as exc:
        _remove_empty(created)
        raise ZhnerError(f"download of {dfile.relpath} failed: HTTP {exc.code} {exc.reason}; {hint}", url) from None
    except urllib.error.URLError as exc:
        _remove_empty(created)
        raise ZhnerError(f"download of {dfile.relpath} failed: {exc.reason}; {hint}", url) from None
    except (OSError, ValueError) as exc:  # timeouts, resets, malformed URLs
        _remove_empty(created)
        raise ZhnerError(f"download of {dfile.relpath} failed: {exc}; {hint}", url) from None
    log.info("%s: verified (sha256 %s)", target, dfile.sha256)


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return
