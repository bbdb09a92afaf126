"""Shared test helpers (on the test path through pytest's ``pythonpath``)."""
