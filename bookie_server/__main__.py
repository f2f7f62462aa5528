"""``python -m bookie_server ...``: the bare bookie (:mod:`bookie_server.main`); ``bk bookie``
is the same command with the in-process AutoRecovery."""

import sys

from bookie_server.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
