"""The bundle's single program: ``rocketdesk`` runs the command line (``rocketdesk console``
opens the console), and ``rocketdesk -m MODULE …`` runs one of our modules the way
``python -m`` would, which is how the supervisor starts nodes from inside a bundle."""

import runpy
import sys

from rocketdesk.cli import utf8_output

# A bundle reads no PYTHON* variables (PYTHONIOENCODING among them): UTF-8 output here, for the
# nodes' logs as for the command line's.
utf8_output()

if len(sys.argv) > 2 and sys.argv[1] == "-m":
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
else:
    from rocketdesk.cli import main

    sys.exit(main())
