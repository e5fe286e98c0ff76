"""Locate the SQL and schema files, whether installed from a wheel or run from a checkout.

A wheel carries them inside the package (``analyzer/sql``, ``analyzer/schemas``);
a checkout keeps them at the top level, beside ``analyzer/``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"specan is installed without its {name}/ directory (looked in {_PACKAGE_DIR})")
