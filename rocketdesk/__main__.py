"""``python -m rocketdesk``: the command line."""

import sys

from rocketdesk.cli import main

sys.exit(main())
