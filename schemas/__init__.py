"""Pydantic contracts shared by every stage: config, data items, sessions, results, reports."""
