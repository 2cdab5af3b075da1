"""Deterministic fake LLM endpoints for testing real agent CLIs offline (see README.md)."""
