"""Where a staging area is: real DIGen output for validation and benchmarks, unpacked on demand.

The location comes from ``TPCDI__DIGEN_DATA`` (see :class:`streamdi.settings.TpcdiSettings`) or
defaults to the repository's ``../shared/tpcdi``. It may be an unpacked staging area, a directory
holding one ``.tar.xz``/``.tar.gz``/``.tar`` of it, or the archive itself; an archive is unpacked
once into ``TPCDI__CACHE_DIR`` (a marker file records a finished unpack; a lock keeps two
processes from unpacking at the same time) and reused afterwards.
"""

from __future__ import annotations

import fcntl
import logging
import re
import shutil
import tarfile
from pathlib import Path

from streamdi.settings import TpcdiSettings
from tpcdi.exceptions import SourceNotFound

logger = logging.getLogger(__name__)

_ARCHIVES = (".tar.xz", ".tar.gz", ".tgz", ".tar")
_DONE = ".unpacked"


def default_digen_location() -> Path:
    """``<repository>/../shared/tpcdi``."""
    return Path(__file__).resolve().parent.parent.parent / "shared" / "tpcdi"


def staging_root(directory: Path) -> Path | None:
    """``directory`` or the one directory below it that holds ``Batch1``, else ``None``."""
    if (directory / "Batch1").is_dir():
        return directory
    for child in sorted(directory.iterdir()) if directory.is_dir() else []:
        if child.is_dir() and (child / "Batch1").is_dir():
            return child
    return None


def _is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(_ARCHIVES)


def unpack(archive: Path, cache_dir: Path) -> Path:
    """Unpack ``archive`` into ``cache_dir`` unless done before; returns the staging root.

    The copy is named by the archive's size and modification time, so an archive that changed
    is unpacked again; the copies of its earlier versions are deleted then (each is the size of
    the data set: a shared archive touched by every checkout or sync left one more each time).
    A run still reading such a copy when the archive changed under it loses its files."""
    stat = archive.stat()
    stem = archive.name.split(".tar")[0].split(".tgz")[0]
    target = cache_dir / f"{stem}-{stat.st_size}-{stat.st_mtime_ns}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / _DONE).exists():
            logger.info("unpacking archive=%s into=%s", archive, target)
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            with tarfile.open(archive) as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(partial, filter="data")
                else:  # pragma: no cover - Python before 3.11.4
                    tar.extractall(partial)
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
            (target / _DONE).touch()
            for earlier in _earlier_copies(cache_dir, stem, target):
                logger.info("deleting an earlier unpacking of archive=%s path=%s", archive, earlier)
                shutil.rmtree(earlier, ignore_errors=True)
    root = staging_root(target)
    if root is None:
        raise SourceNotFound(f"{archive} holds no Batch1 directory", path=str(archive))
    return root


def _earlier_copies(cache_dir: Path, stem: str, current: Path) -> list[Path]:
    """The folders of ``cache_dir`` that :func:`unpack` made of another version of the archive
    named ``stem`` (``<stem>-<size>-<mtime_ns>``, finished or ``.partial``), not ``current``."""
    pattern = re.compile(re.escape(stem) + r"-\d+-\d+(\.partial)?")
    return [
        entry
        for entry in cache_dir.iterdir()
        if entry.is_dir() and entry != current and pattern.fullmatch(entry.name)
    ]


def locate_digen(settings: TpcdiSettings) -> Path | None:
    """The staging root of the configured DIGen data set, unpacked if needed; ``None`` when the
    default location does not exist. A configured location that does not exist is an error."""
    configured = settings.digen_data
    candidate = Path(configured) if configured is not None else default_digen_location()
    if not candidate.exists():
        if configured is not None:
            raise SourceNotFound(
                f"TPCDI__DIGEN_DATA={configured} does not exist", path=str(configured)
            )
        return None
    if _is_archive(candidate):
        return unpack(candidate, settings.cache_dir)
    root = staging_root(candidate)
    if root is not None:
        return root
    archives = sorted(p for p in candidate.iterdir() if _is_archive(p))
    if archives:
        return unpack(archives[0], settings.cache_dir)
    if configured is not None:
        raise SourceNotFound(f"{candidate} holds no staging area nor archive", path=str(candidate))
    return None
