"""Tests of `pi_workflows.protocol`: canonical JSON, framing, client and runner messages."""
