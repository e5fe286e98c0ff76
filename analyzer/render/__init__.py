"""Render documents as Markdown, JSON, CSV and HTML."""
