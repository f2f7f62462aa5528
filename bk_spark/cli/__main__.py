"""``python -m bk_spark.cli ...`` is ``bk ...``."""

import sys

from bk_spark.cli import main

if __name__ == "__main__":
    sys.exit(main())
