"""specan: offline analysis of speculative-decoding traces.

The packages, in the order data flows through them (each imports only the ones above it):

- ``analyzer.ingest``    schemas, row rules, loading Parquet into DuckDB, the importers
  that turn engine output into traces.
- ``analyzer.analysis``  the SQL model (``sql/`` views) and everything computed from it:
  metrics, speculation-length tuning, quantization, gates, history, n-gram replay.
  Each returns a document (dicts and lists); none renders.
- ``analyzer.record``    the recorder inside vLLM (a stat-logger plugin, loaded by vLLM
  only) and its trace writer: a live engine writes traces that ``ingest`` reads.
- ``analyzer.render``    documents to Markdown, JSON, CSV and HTML.
- ``analyzer.simulate``  synthetic traces for tests and benchmarks.
- ``analyzer.api``, ``analyzer.nightly``  the library entry points; ``analyzer.cli`` is the
  thin click layer over them.
"""

__version__ = "0.1.0"
