"""One module per bench section; each has ``run(ctx) -> dict`` (its part of latest.json)."""
