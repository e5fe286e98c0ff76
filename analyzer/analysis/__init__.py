"""Compute: the SQL model and the documents built from it. Nothing here renders."""
