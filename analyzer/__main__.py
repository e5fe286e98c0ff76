"""``python -m analyzer`` is the same as the ``specan`` command."""

from .cli import main

main()
