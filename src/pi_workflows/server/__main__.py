"""``python -m pi_workflows.server``: run the server (see ``main.main``)."""

import sys

from pi_workflows.server.main import main

sys.exit(main())
