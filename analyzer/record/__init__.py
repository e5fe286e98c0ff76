"""Traces written from inside a serving engine while it runs.

- ``writer``: rows of the trace tables buffered in memory (bounded) and written as
  Parquet by a thread of their own, into date (or hour) partitions, each file renamed
  into place once it is complete, so ``specan report`` reads the folder at any time.
- ``vllm_plugin``: vLLM's stat-logger plugin (entry point group
  ``vllm.stat_logger_plugins``): the deployment from the engine's config, a step per
  engine iteration, a request per finished request, the speculative counters per
  interval. Imported by vLLM only; nothing else in specan imports vllm.

Recording is opt-in: nothing is written unless ``SPECAN_RECORD_DIR`` names a folder
(docs/recorder.md).
"""
