"""``python -m analyzer`` is the same as the ``specan`` command. The import is absolute so
that this file also runs as a script: ``spark-submit .../analyzer/__main__.py report ...``."""

from analyzer.cli import main

main(prog_name="specan")
