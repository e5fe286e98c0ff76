"""Decide: what the numbers say to do, and how sure they are.

The SQL model (analyzer/analysis, sql/) measures; this package judges what it measured:
the evidence floors and the speedup a deployment is judged by (``evidence``), the four
deployment gates (``gates``), the verdict that leads the report (``verdict``) and the
nightly regression rule (``regression``). Nothing here reads trace files or renders.
"""
