"""The one effect key derivation the server and the runner share."""

from __future__ import annotations

from pi_workflows.protocol import effect_key


def test_an_effect_key_is_stable_per_visit_and_distinct_across_everything_else() -> None:
    """Retries of one visit share a key; another run, round, node, visit or type does not."""
    key = effect_key("run-1", 0, "apply", 1, "mail")
    assert key == effect_key("run-1", 0, "apply", 1, "mail")
    others = {
        effect_key("run-2", 0, "apply", 1, "mail"),
        effect_key("run-1", 1, "apply", 1, "mail"),
        effect_key("run-1", 0, "other", 1, "mail"),
        effect_key("run-1", 0, "apply", 2, "mail"),
        effect_key("run-1", 0, "apply", 1, "sms"),
    }
    assert key not in others
    assert len(others) == 5


def test_an_effect_key_is_safe_for_outside_idempotency_headers() -> None:
    """Keys are 36 characters of lower-case letters, digits and a dash, whatever the names."""
    key = effect_key("run_x", 3, "node with / slashes", 7, "type:ä")
    assert key.startswith("pwf-")
    assert len(key) == 36
    assert all(c.isdigit() or "a" <= c <= "f" or c == "-" for c in key[4:])
