"""Renderers: turn engine results into rich tables or machine-readable text."""
