"""Synthetic traces for tests and benchmarks."""
