"""How much memory this process may use, and how much it uses now (Linux /proc and cgroups).

A Space or a container often has a cgroup limit far below the host's RAM that
/proc/meminfo shows; exceeding it gets the process killed without a message. The
pipeline cache plans with the smaller of the two.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

GIB = 1 << 30
# Left for the OS, the web server, the tokenizers and the page's own work.
RESERVE_BYTES = int(1.5 * GIB)


def _read_int(path: str) -> Optional[int]:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo(key: str) -> Optional[int]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def total_bytes() -> int:
    """RAM this process may use: the cgroup limit if there is one, else the machine's RAM."""
    limits = [v for v in (
        _meminfo("MemTotal"),
        _read_int("/sys/fs/cgroup/memory.max"),                    # cgroup v2 ("max" -> None)
        _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
    ) if v]
    if not limits:
        return 16 * GIB
    return min(limits)


def rss_bytes() -> int:
    """Resident memory of this process now."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def tree_rss_bytes() -> int:
    """Resident memory of this process and every process under it (the arena's pipelines run
    in child processes, demo/engine/child_side.py): what the app holds in all. Linux only;
    elsewhere this process alone."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while we looked
    tree, grew = {os.getpid()}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    total = rss_bytes()
    for pid in tree - {os.getpid()}:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def budget_bytes(reserve: int = RESERVE_BYTES) -> int:
    """What the loaded pipelines may take in all."""
    env = os.environ.get("SPECDEC_MEMORY_BUDGET_GB")
    if env:
        return int(float(env) * GIB)
    return max(0, total_bytes() - reserve)


def gb(n: float) -> str:
    return f"{n / GIB:.1f} GB"


def available_bytes() -> int:
    """Memory a new allocation can get now without swapping or the OOM killer: the kernel's
    MemAvailable, or less under a cgroup limit (its limit less its current use)."""
    free = [v for v in (_meminfo("MemAvailable"),) if v is not None]
    for limit, used in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, now = _read_int(limit), _read_int(used)
        if cap and now is not None and cap < (1 << 60):
            free.append(max(0, cap - now))
    return min(free) if free else total_bytes()
