"""The local web page for runs (`pi-workflows ui`): a client of the server, never an owner
of state.

Layout:

- `launcher`: the CLI's side: find the page process of a state directory or start one,
  and the URL to open (imports no web framework).
- `record`: the page process's record (`ui.json`), lock (`ui.lock`) and identity check.
- `access`: the access secret (`ui-secret`, mode 0600), the cookie and CSRF tokens.
- `page`: the page process's phases (startup, serve, shutdown).
- `app`: the aiohttp application and its routes; `guard`: Host, cookie, Origin and CSRF
  checks on every request; `context`: what handlers share.
- `clients`: the page's connections to the server; `live`: the server's pushed views
  shared by every open tab; `streams`: the server-sent events that carry them.
- `pages`: the reads (run list, run, node, upgrade dry run, schedules); `run_page`: the
  run page's sections; `actions`: the commands; `forms`: the checkpoint answer form;
  `graph`: the graph's layout; `render`: the templates' environment and filters.
- `templates/`, `static/`: HTML templates and the stylesheet and script (no build step,
  no third-party JavaScript).

This package imports only `pi_workflows.client` and `pi_workflows.protocol` among
internal packages (import-linter enforces it): it reads views and sends the same
receipted commands as the CLI. Importing it imports no web framework; `page` and the
modules it uses do.
"""

__all__: list[str] = []
