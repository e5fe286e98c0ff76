"""Files specan writes: checked before any analysis runs, then written to what the path is.

Every output (``report -o``, ``load --db``, the nightly day reports and its history)
goes through here, so they fail alike and early, and end alike:

- A path is followed through its symbolic links (a chain too) to the file they name,
  and every rule below applies to that target (``output_target``). A dangling link
  writes its target, created if the target's folder exists. The link stays a link:
  replacing it would cut whatever else reads through it off from the output.
- ``check_output`` refuses a path that can't be written before the work that fills it
  starts, so a long analysis never ends in "cannot write". A missing folder or no
  permission is the machine's doing (EnvironmentProblem, exit 3). A target that is
  neither a regular file nor one of the kinds written in place below (a folder, a
  block device) is refused as a bad path (InputProblem, exit 2): a rename would
  replace the device node, and writing a report into a disk is never what was meant.
- A regular file (or none yet) is written aside: ``written_aside`` hands out a
  temporary file in the target's folder; when the block ends without an error the file
  gets the mode a newly created file gets (0666 less the umask, as the report files
  always had) and is renamed over the target. A reader never sees half a file, and a
  failed write leaves the old one as it was.
- A FIFO or a character device (``/dev/null``, ``/dev/stdout``, a terminal) is written
  in place: opened and written, no temporary file, no rename, no chmod. Renaming over
  it would replace the device node (as root, ``/dev/null`` itself) or the pipe its
  reader holds open, which would then get nothing. A unix socket is connected to and
  the text sent. In place there is no "all or nothing": a failed write (``/dev/full``,
  a reader gone) is an EnvironmentProblem naming the path.
- An output that is opened again (a DuckDB database, the nightly history and its lock
  file) must be a regular file: its caller passes ``regular_because`` and a FIFO, a
  device or a socket is refused (exit 2) with that reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import EnvironmentProblem, InputProblem

# Linux's MAXSYMLINKS: past as many links the kernel gives up on a path (ELOOP) too.
MAX_LINKS = 40


def output_target(path: str | Path) -> Path:
    """The file ``path`` names once its symbolic links are followed: ``path`` itself when
    it is no link. Only the last component is followed (the folders above are the
    kernel's business), and a relative link is taken from the link's folder, as the
    kernel takes it; a loop is refused."""
    path = Path(path)
    target = path
    for _ in range(MAX_LINKS):
        if not target.is_symlink():
            return target
        target = target.parent / os.readlink(target)
    if not target.is_symlink():
        return target
    raise InputProblem(f"cannot write {path}: its symbolic links form a loop (or a chain of more than "
                       f"{MAX_LINKS})")


def _mode(path: Path, target: Path) -> int | None:
    """The target's file type and mode; None when there is no file there yet."""
    try:
        return os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISSOCK, "a socket"))


def _in_place(mode: int) -> bool:
    """Written to where it is, not aside: a FIFO, a character device, a socket."""
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _refused(path: Path, target: Path, mode: int, regular_because: str | None = None) -> InputProblem:
    what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    where = "it is" if target == path else f"it links to {target}, which is"
    why = f", and {regular_because}" if regular_because and _in_place(mode) else ""
    return InputProblem(f"cannot write {path}: {where} {what}{why}")


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check_output(path: str | Path, *, folders_created: bool = False, regular_because: str | None = None) -> None:
    """Refuse an output file that can't be written, before any analysis runs.

    Through its symbolic links: the target must be a regular file, a FIFO, a character
    device or a socket (with ``regular_because``, the reason it is read back, only a
    regular file), or not exist yet. A regular file or a new one needs its folder to
    exist (with ``folders_created``, the nearest folder above it that exists, unless it
    was reached through a link: specan creates only the folders of the path it was
    given) and be writable; a FIFO, device or socket needs only to be writable."""
    path = Path(path)
    target = output_target(path)
    mode = _mode(path, target)
    if mode is not None and not stat.S_ISREG(mode):
        if regular_because or not _in_place(mode):
            raise _refused(path, target, mode, regular_because)
        if not os.access(target, os.W_OK):
            raise EnvironmentProblem(f"cannot write {path}: permission denied")
        return
    folder = target.parent
    if not folder.is_dir():
        if not folders_created or target != path:
            raise EnvironmentProblem(f"cannot write {path}: the folder {folder} does not exist")
        existing = _nearest_existing(folder)
        if not existing.is_dir():
            raise EnvironmentProblem(f"cannot write {path}: {existing} is not a folder")
        folder = existing
    if not os.access(folder, os.W_OK | os.X_OK) or (mode is not None and not os.access(target, os.W_OK)):
        raise EnvironmentProblem(f"cannot write {path}: permission denied")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def written_aside(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path``'s target (``output_target``) to write to; renamed
    over the target when the block ends without an error, removed when it raises. An
    OSError (a full disk, a folder gone) becomes an EnvironmentProblem naming ``path``.
    For a regular file only: a target that is anything else (it may have become one
    since ``check_output``) is refused, never renamed over."""
    path = Path(path)
    target = output_target(path)
    mode = _mode(path, target)
    if mode is not None and not stat.S_ISREG(mode):
        raise _refused(path, target, mode)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp creates the file 0600: a report or history others read must not be
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_in_place(target: Path, data: bytes) -> None:
    # No O_CREAT: had the FIFO or device gone since the check, this must fail, not leave a
    # regular file in its place. No O_TRUNC: neither has anything to truncate. O_NOCTTY:
    # a terminal given as the output must not become this process's controlling one.
    # Opening a FIFO waits for its reader, as any writer to a pipe does.
    fd = os.open(target, os.O_WRONLY | os.O_NOCTTY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _send(target: Path, data: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(target))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)   # the listener reads to the end of the text, then EOF


def write_output(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``'s target: a regular file (or a new one) aside and
    renamed (``written_aside``); a FIFO or a character device in place; a unix socket by
    connecting and sending it. Anything else is refused (``check_output``'s rule)."""
    path = Path(path)
    target = output_target(path)
    mode = _mode(path, target)
    if mode is None or stat.S_ISREG(mode):
        with written_aside(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return
    if not _in_place(mode):
        raise _refused(path, target, mode)
    try:
        (_send if stat.S_ISSOCK(mode) else _write_in_place)(target, text.encode("utf-8"))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None
