"""``python -m gui``: the desktop console."""

import sys

from gui.app import main

sys.exit(main())
