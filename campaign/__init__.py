"""The kill-anywhere campaign: `python -m campaign` (or `make campaign SEEDS=N`).

Layout:

- `cli`: the command line, running seeds in fresh processes and writing the report;
- `seed`: one seed, start to finish (set-up, chaos, quiesce, oracle), in its own process;
- `plan`: everything a seed does, drawn from its seed before it runs;
- `workflows`: the workflows it writes into a temporary project and their expected outputs;
- `witness`: reading the witness files effect bodies write outside the database;
- `surfaces`: the CLI and the Python client, with durable retries of logical commands;
- `observe`, `operator`, `faults`: one tick of looking, acting, and hurting;
- `oracle`: what must hold after a seed; `leaks`: the claim-token and token-hash check;
- `messaging`, `retrying`: a run that signals another (`ctx.signal`) and `run retry` of a
  run that failed by design, the operator's part and the oracle's;
- `processes`: the pids a seed saw, with their start identity, and the signals it sends;
- `report`: the JSON report in `campaign/results/`; `fuzz`: the large protocol-fuzz budget;
- `telegram`: the Telegram seat (a scripted chat, channel-process kills) against `bot_api`,
  the Bot API stand-in on loopback (which `tests/channels` uses too); `telegram_oracle`:
  its checks.

It drives only public surfaces: the `pi-workflows` CLI, the Python client and the authoring
API. Its only side channels are read-only: the witness files, the database (opened
read-only) for the token hashes the secrets check needs, and a Telegram seat's channel
files (`channels/process.json` for the pid it kills, the channel's ledger for its oracle).
"""
