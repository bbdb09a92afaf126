"""Helpers for the Pi tests: the scripted model provider and the RPC driver of the real Pi."""
