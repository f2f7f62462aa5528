"""``python -m bookie_server ...`` is ``bk bookie ...``."""

import sys

from bk_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["bookie", *sys.argv[1:]]))
