"""Resources a request needs, checked before the work starts: a setting that would need more memory than
the machine has (a billion bootstrap resamples) is refused with the estimate, not attempted."""

from __future__ import annotations

import os

__all__ = ["ResourceError", "memory_available", "machine_memory", "require_memory", "gib"]


class ResourceError(ValueError):
    """A request that needs more than the machine has; the message gives the estimate and what to lower."""


def memory_available() -> int:
    """Bytes of memory available now (``MemAvailable`` of /proc/meminfo), else the machine's physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return machine_memory()


def gib(n: float) -> str:
    """``n`` bytes in words: ``"238 GiB"``, ``"1.4 TiB"``, ``"12 MiB"``."""
    for unit, size in (("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{int(n)} bytes"


def machine_memory() -> int:
    """The machine's physical memory in bytes."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def require_memory(nbytes: float, what: str, lower: str) -> None:
    """Raise :class:`ResourceError` when ``what`` needs about ``nbytes`` and the machine has less available;
    ``lower`` says which setting to lower."""
    available = memory_available()
    if nbytes > available:
        raise ResourceError(f"{what} needs about {gib(nbytes)} of memory; this machine has {gib(available)} "
                            f"available: lower {lower}")
