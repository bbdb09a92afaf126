"""Channels: where decisions and notices reach a person besides Pi and the web page.

`config` (the user's audiences and channels; the CLI and the server read it) imports only
the protocol. The channel process (`python -m pi_workflows.channels`: `process`,
`telegram`, `notices`) is a client of the server like the web page: it answers decisions
through the same `decision.answer` every seat uses, and imports the optional extra's
libraries (python-telegram-bot, Apprise) only there. See docs/channels.md.
"""
