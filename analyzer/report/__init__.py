"""Rendering: turn query results and view rows into text, Markdown and JSON."""
