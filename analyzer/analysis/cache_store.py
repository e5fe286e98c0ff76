"""Where the cached passes over the rounds live on disk: one entry per trace unit.

An entry is a DuckDB database file (``<key>.duckdb``: the unit's pass tables, every
column type kept exactly, which Parquet would not do for HUGEINT and DECIMAL sums)
and a manifest (``<key>.json``: the unit's row counts, the database's size). The key
is a hash of everything the unit's results depend on (``analysis.pass_cache``);
nothing is ever updated in place, so an entry is either complete or absent:

- written atomically and durably: the database and the manifest are written under
  temporary names, flushed to disk (``fsync``) and renamed, the manifest last, and
  the folder is flushed after the renames; a reader takes an entry only when its
  manifest names the database's size and SHA-256, checked before any of it is read;
  an entry that fails the check (a power loss, a flipped block) is deleted, and the
  run computes its unit from the files, which writes it again;
- safe under concurrent runs: the directory is private (created ``0700``; a
  directory that another user owns or may write is not used), and an exclusive lock
  (``.lock``, ``flock``) is held while entries are renamed into place or removed,
  a shared one while they are looked up and opened;
- bounded: after a run adds entries, the least recently used ones (a hit touches its
  manifest) are removed until the directory holds at most ``max_bytes``; the entries
  the run itself uses go last.

This module holds no SQL: it hands out paths and manifests.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputProblem

DEFAULT_MAX = "4GB"
# The layout of entries; a change of it starts a new folder, so old entries are never misread.
LAYOUT = "passes-v1"

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?", re.I)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``4GB``, ``500MiB`` or ``0`` (plain numbers are bytes); else InputProblem."""
    match = _SIZE.fullmatch(str(text).strip())
    if not match:
        raise InputProblem(f"--cache-max {text!r} is not a size: expected e.g. 4GB, 500MB or 0")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])


def default_cache_dir() -> Path | None:
    """``${XDG_CACHE_HOME:-$HOME/.cache}/specan``; None when neither says where (no cache)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):
            return None
    return Path(base) / "specan"


class CacheUnusable(Exception):
    """The cache directory cannot be used (not private, not writable): the run reads the files."""


@dataclass
class Entry:
    key: str
    database: Path
    manifest: dict


@dataclass
class Store:
    """The entries under ``root/LAYOUT``, at most ``max_bytes`` in all."""

    root: Path
    max_bytes: int
    used: set[str] = field(default_factory=set)
    damaged: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder = self.root / LAYOUT
        try:
            _private_dir(self.root)
            _private_dir(self.folder)
            (self.folder / ".lock").touch(mode=0o600, exist_ok=True)
        except OSError as exc:
            raise CacheUnusable(f"{self.root}: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        with open(self.folder / ".lock", "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold while looking entries up and opening them: no entry is removed meanwhile
        (an opened database stays readable after that)."""
        with self._locked(exclusive=False):
            yield

    def get(self, key: str) -> Entry | None:
        """The complete, intact entry of ``key`` (its manifest touched: it was used now), or
        None. An entry whose database does not hash to its manifest's digest is removed."""
        manifest_path, database = self._paths(key)
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        try:
            intact = (isinstance(manifest, dict) and database.stat().st_size == manifest.get("database_bytes")
                      and file_digest(database) == manifest.get("database_sha256"))
        except OSError:
            intact = False
        if not intact:
            self.damaged[key] = manifest     # deleted by drop_damaged, outside ``reading``'s lock
            return None
        with contextlib.suppress(OSError):
            os.utime(manifest_path)
        self.used.add(key)
        return Entry(key, database, manifest)

    def drop_damaged(self) -> list[str]:
        """Delete the entries ``get`` found damaged (not under ``reading``: this takes the
        exclusive lock). The keys deleted."""
        dropped = [key for key, seen in self.damaged.items() if self.drop(key, seen if isinstance(seen, dict) else None)]
        self.damaged.clear()
        return dropped

    def drop(self, key: str, seen: dict | None = None) -> bool:
        """Remove ``key``'s entry (found damaged). With ``seen`` (its manifest as read), only
        while the manifest is still that one: an entry another run put meanwhile is kept."""
        manifest_path, database = self._paths(key)
        with self._locked(exclusive=True):
            if seen is not None:
                try:
                    if json.loads(manifest_path.read_text(encoding="utf-8")) != seen:
                        return False
                except (OSError, ValueError):
                    pass
            manifest_path.unlink(missing_ok=True)
            database.unlink(missing_ok=True)
        self.used.discard(key)
        return True

    def _complete(self, key: str) -> bool:
        manifest_path, database = self._paths(key)
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            return (database.stat().st_size == manifest["database_bytes"]
                    and file_digest(database) == manifest["database_sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def new_database(self) -> Path:
        """A temporary name in the cache folder for an entry's database being written."""
        return self.folder / f".tmp-{os.getpid()}-{uuid.uuid4().hex}.duckdb"

    def put(self, key: str, written: Path, manifest: dict) -> None:
        """Rename the database ``written`` (from ``new_database``) into place as ``key``'s,
        then its manifest, each flushed to disk first and the folder after. An intact entry
        another run put meanwhile is kept (the same key: the same content)."""
        manifest_path, database = self._paths(key)
        _flush(written)
        manifest = {**manifest, "database_bytes": written.stat().st_size, "database_sha256": file_digest(written)}
        text = self.folder / f".tmp-{os.getpid()}-{uuid.uuid4().hex}.json"
        text.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        _flush(text)
        for path in (written, text):
            path.chmod(0o600)     # the user's alone, as the folder
        with self._locked(exclusive=True):
            if self._complete(key):
                written.unlink(missing_ok=True)
                text.unlink(missing_ok=True)
            else:
                os.replace(written, database)
                os.replace(text, manifest_path)
                _flush_folder(self.folder)
        self.used.add(key)

    def discard(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        Path(str(path) + ".wal").unlink(missing_ok=True)

    def evict(self) -> list[str]:
        """Remove least recently used entries until the folder holds at most ``max_bytes``
        (this run's entries last), and temporary files of runs that ended. The keys removed."""
        removed = []
        with self._locked(exclusive=True):
            entries, total = [], 0
            for manifest_path in self.folder.glob("*.json"):
                key = manifest_path.stem
                database = self.folder / f"{key}.duckdb"
                try:
                    used_at = manifest_path.stat().st_mtime
                    size = manifest_path.stat().st_size + (database.stat().st_size if database.exists() else 0)
                except OSError:
                    continue
                entries.append((key in self.used, used_at, key, size))
                total += size
            for path in self.folder.glob(".tmp-*"):
                if not _pid_alive(path.name.split("-")[1]):
                    path.unlink(missing_ok=True)
            for _this_run, _used_at, key, size in sorted(entries):
                if total <= self.max_bytes:
                    break
                manifest_path, database = self._paths(key)
                manifest_path.unlink(missing_ok=True)
                database.unlink(missing_ok=True)
                total -= size
                removed.append(key)
        return removed

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.folder / f"{key}.json", self.folder / f"{key}.duckdb"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _flush(path: Path) -> None:
    """Write a file's data to disk (its rename must not come first after a power loss)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _flush_folder(folder: Path) -> None:
    """Write a folder's entries (the renames) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _private_dir(path: Path) -> None:
    """Create ``path`` as ``0700``, or check that an existing one is this user's and
    that no one else may write to it (else CacheUnusable)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise CacheUnusable(f"{path} belongs to another user (uid {info.st_uid}): give --cache-dir a folder of yours")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheUnusable(f"{path} may be written by other users: make it private (chmod 700 {path})")


def _pid_alive(text: str) -> bool:
    try:
        os.kill(int(text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
