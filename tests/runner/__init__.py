"""Tests of the runner and resolver children (real child processes over real socketpairs)."""
