"""`python -m campaign`: see `campaign.cli`."""

import sys

from campaign.cli import main

sys.exit(main())
