"""Files specan writes: checked before any analysis runs, written aside and renamed.

Every output (``report -o``, ``load --db``, the nightly day reports and its history)
goes through here, so they fail alike and early, and end alike:

- ``check_output`` refuses a path that can't be written before the work that fills it
  starts, so a long analysis never ends in "cannot write".
- ``written_aside`` hands out a temporary file beside the target; when the block ends
  without an error the file gets the mode a newly created file gets (0666 less the
  umask, as the report files always had) and is renamed over the target. A reader
  never sees half a file, and a failed write leaves the old one as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import EnvironmentProblem


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check_output(path: str | Path, *, folders_created: bool = False) -> None:
    """Refuse an output file that can't be written, before any analysis runs: the path
    must not be a folder, and its folder must exist (or, with ``folders_created``, the
    nearest folder above it that exists) and be writable."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise EnvironmentProblem(f"cannot write {path}: it is a folder")
    if not folder.is_dir():
        if not folders_created:
            raise EnvironmentProblem(f"cannot write {path}: the folder {folder} does not exist")
        existing = _nearest_existing(folder)
        if not existing.is_dir():
            raise EnvironmentProblem(f"cannot write {path}: {existing} is not a folder")
        folder = existing
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise EnvironmentProblem(f"cannot write {path}: permission denied")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def written_aside(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed over ``path`` when the block
    ends without an error, removed when it raises. An OSError (a full disk, a folder
    gone) becomes an EnvironmentProblem naming ``path``."""
    path = Path(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp creates the file 0600: a report or history others read must not be
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_output(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, aside and renamed (``written_aside``)."""
    with written_aside(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
