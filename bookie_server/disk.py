"""Disk checks and readonly mode: a bookie stops taking adds before its disk fills up.

Theory of operation
-------------------
A disk check (:meth:`DiskMonitor.check_disk`, every ``disk_check_interval_s`` and once at
start) measures the bytes in files under the data directory and how full its file system
is, and decides (:func:`disk_full`): the bookie turns readonly when the file system is
fuller than ``disk_usage_threshold`` or the data directory holds more than
``max_disk_bytes``, and writable again only below ``threshold - 0.05`` and 90% of
``max_disk_bytes`` (hysteresis, so that it does not flap at the limit). Above
``disk_usage_warn_threshold`` every check logs a warning. :meth:`set_forced_read_only`
forces readonly mode on, e.g. for maintenance, whatever the disk says.

Readonly refuses adds (the storage asks :attr:`DiskMonitor.read_only` when it accepts
one); fences, reads and deletes go on, and deletes followed by GC are how space comes
back. Each change of mode is reported once to ``on_mode_change`` (the server re-registers
the bookie as readonly or writable and sets its metric).

What the disk check needs from the storage: only the data directory and the config (read
at every check, so a changed limit applies at the next one). Its mode lock is taken
alone, never while holding a storage lock; ``on_mode_change`` runs under it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from bookie_server.config import BookieConfig

log = logging.getLogger(__name__)

#: Leaving readonly mode takes a file system this much (as a fraction) below the threshold,
HYSTERESIS_FRACTION = 0.05
#: and a data directory below this share of ``max_disk_bytes``.
HYSTERESIS_BYTES = 0.9


def used_fraction(fs_used: int, free: int) -> float:
    """How full the file system is for us: used / (used + available to us), 0 if empty."""
    return fs_used / (fs_used + free) if fs_used + free > 0 else 0.0


def disk_full(
    fraction: float, used: int, threshold: float, max_bytes: int | None, was_full: bool
) -> bool:
    """Whether the disk counts as full (so the bookie is readonly) after a check: the file
    system is fuller than ``threshold`` or the data directory holds more than ``max_bytes``
    (None: no limit). Once full (``was_full``) it stays so until the file system is below
    ``threshold - HYSTERESIS_FRACTION`` and the data directory below ``HYSTERESIS_BYTES *
    max_bytes``."""
    if was_full:  # hysteresis: leave readonly only well below the limits
        return fraction > threshold - HYSTERESIS_FRACTION or (
            max_bytes is not None and used > HYSTERESIS_BYTES * max_bytes
        )
    return fraction > threshold or (max_bytes is not None and used > max_bytes)


class DiskMonitor:
    """Disk checks and the readonly flag of one bookie's storage. Thread-safe."""

    def __init__(self, config: BookieConfig, data_dir: Path) -> None:
        self.config = config
        self._data_dir = data_dir
        self.on_mode_change: Callable[[bool], None] | None = None
        self._mode_lock = threading.RLock()
        self._disk_full = False
        self._forced_read_only = False
        self._read_only = False

    @property
    def read_only(self) -> bool:
        """Whether adds are refused now (disk full or forced)."""
        return self._read_only

    def disk_usage(self) -> tuple[int, int]:
        """``(bytes in files under data_dir, bytes free for us on its file system)``."""
        used = 0
        stack = [str(self._data_dir)]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                            else:
                                used += entry.stat(follow_symlinks=False).st_size
                        except FileNotFoundError:
                            continue
            except FileNotFoundError:
                continue
        vfs = os.statvfs(self._data_dir)
        return used, vfs.f_bavail * vfs.f_frsize

    def check_disk(self) -> bool:
        """Run the disk check now; returns the resulting readonly flag."""
        used, free = self.disk_usage()
        vfs = os.statvfs(self._data_dir)
        fs_used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
        fraction = used_fraction(fs_used, free)
        cfg = self.config
        if fraction > cfg.disk_usage_warn_threshold:
            log.warning("file system of %s is %.1f%% full", self._data_dir, 100 * fraction)
        with self._mode_lock:
            self._disk_full = disk_full(
                fraction, used, cfg.disk_usage_threshold, cfg.max_disk_bytes, self._disk_full
            )
            self._update_mode()
            return self._read_only

    def set_forced_read_only(self, forced: bool) -> None:
        """Force readonly mode on (or lift the force), e.g. for maintenance."""
        with self._mode_lock:
            self._forced_read_only = forced
            self._update_mode()

    def _update_mode(self) -> None:
        with self._mode_lock:
            read_only = self._forced_read_only or self._disk_full
            if read_only == self._read_only:
                return
            self._read_only = read_only
            log.warning("bookie storage is now %s", "readonly" if read_only else "writable")
            callback = self.on_mode_change
            if callback is not None:
                try:
                    callback(read_only)
                except Exception:  # noqa: BLE001 - the mode changed anyway
                    log.exception("on_mode_change callback failed")
