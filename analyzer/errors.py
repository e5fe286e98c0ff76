"""The kinds of failure, each with its exit status, so the CLI decides in one place.

- ``InputProblem`` (exit 2): bad usage or bad input. The message names the file,
  table and column where it can. It is also a ``ValueError``: a bad value given.
- ``EnvironmentProblem`` (exit 3): the machine, not the input: an output that
  cannot be written, a full disk, memory, a lock held too long.
- ``InternalError`` (exit 3): specan itself is wrong (a bug, a broken SQL file,
  a hash collision).

Exit 1 is not an error: it is a gate, a regression or ``--strict`` finding
something, decided by the command.
"""

from __future__ import annotations


class SpecanError(Exception):
    exit_code = 3


class InputProblem(SpecanError, ValueError):
    exit_code = 2


class EnvironmentProblem(SpecanError):
    exit_code = 3


class InternalError(SpecanError):
    exit_code = 3


def first_line(exc: BaseException) -> str:
    """An exception's first line, printable: what a one-line error message quotes of it."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return "".join(ch if ch.isprintable() else "?" for ch in line)
