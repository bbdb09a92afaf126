"""Tests of `pi_workflows.client`; `scripted_peer` is shared with the CLI tests."""
