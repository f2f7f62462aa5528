"""What the code needs from Python versions newer than the oldest one it supports (3.10).

PySpark 4.3 runs on Python 3.10 and newer, and Spark workers run whatever Python their image
has, so the package keeps to 3.10 and takes the few newer conveniences from here.
"""

from __future__ import annotations

import enum
import sys


class StrEnum310(str, enum.Enum):
    """Python 3.11's ``enum.StrEnum`` for 3.10: members are strings and print as their value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return str(self.value).__format__(format_spec)


StrEnum = enum.StrEnum if sys.version_info >= (3, 11) else StrEnum310

__all__ = ["StrEnum", "StrEnum310"]
