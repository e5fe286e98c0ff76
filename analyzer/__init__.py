"""specan: offline analysis of speculative-decoding traces.

The layers, in the order data flows through them:

- ``analyzer.schema``  reads ``schemas/<table>.json``, the single source of truth
  for columns, types, keys and row rules.
- ``analyzer.load``    finds Parquet files, checks their structure, and builds the
  clean DuckDB tables plus ``rejected_rows``.
- ``analyzer.views``   creates the SQL views in ``sql/`` in dependency order.
- ``analyzer.report``  turns view results into Markdown / JSON.
- ``analyzer.cli``     the thin click layer.
"""

__version__ = "0.1.0"
