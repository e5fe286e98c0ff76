"""Read traces: schemas, row rules, loading Parquet into DuckDB, engine importers."""
