"""The link keys a writer stores beside the string keys: ``request_uid`` and ``step_uid``.

docs/trace-format.md ("Link keys written at the source") is the contract; this is
specan's own writer of it (the importers and ``specan simulate``):

    uid = the first 8 bytes of MD5(UTF-8(deployment_id + U+001F + id)),
          read as a big-endian two's-complement (signed) 64-bit integer

where ``id`` is the request_id, or the step_id written in decimal. MD5 because
every language and both engines compute it (DuckDB ``md5``, Spark ``md5``,
Python ``hashlib``), so a writer in SQL gets the same value as one in Python;
it is no security measure, and the loader checks that the uids link what the
string keys link before it uses them.

The loader itself never computes MD5 (a digest per round costs seconds at 50M
rounds): it reads the uids as they are, and hashes the string keys with the
engine's own 64-bit hash only when a trace carries no uids, or invalid ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

SEPARATOR = "\x1f"

# The uid column of each table, and the column it stands for.
UID_COLUMNS = {
    "requests": (("request_uid", "request_id"),),
    "steps": (("step_uid", "step_id"),),
    "rounds": (("request_uid", "request_id"), ("step_uid", "step_id")),
}


def link_uid(deployment_id: str, key: str | int) -> int:
    """The uid of one key (``key``: a request_id, or a step_id)."""
    digest = hashlib.md5(f"{deployment_id}{SEPARATOR}{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def link_uids(deployment_ids: Iterable, keys: Iterable) -> list[int | None]:
    """The uid of every row; None where the key is None. Each distinct key is digested once
    (the rounds repeat their request's key)."""
    seen: dict[tuple, int] = {}
    out: list[int | None] = []
    for dep, key in zip(deployment_ids, keys):
        if key is None or dep is None:
            out.append(None)
            continue
        pair = (dep, key)
        uid = seen.get(pair)
        if uid is None:
            uid = seen[pair] = link_uid(dep, key)
        out.append(uid)
    return out


def uid_columns(table: str, columns: dict[str, Sequence]) -> dict[str, list[int | None]]:
    """The uid columns ``table`` gets from its ``columns`` (lists or arrays by name): one per
    link whose id column is there."""
    added = {}
    for uid, key in UID_COLUMNS.get(table, ()):
        if key in columns and "deployment_id" in columns:
            keys = columns[key]
            keys = keys.tolist() if hasattr(keys, "tolist") else keys
            deps = columns["deployment_id"]
            deps = deps.tolist() if hasattr(deps, "tolist") else deps
            added[uid] = link_uids(deps, keys)
    return added
