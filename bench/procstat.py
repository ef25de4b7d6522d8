"""What ``/proc`` says about a process: CPU seconds and resident memory.

Read from outside, so the gateway runs unchanged and the figure includes what it does in C, in
the kernel and on threads. A process's ``utime``/``stime`` leaves out its live children, so a
tree (tritonserver and its Python-backend stubs, a gateway and its workers) is summed one
process at a time.
"""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (all its threads), in seconds; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    todo.extend(int(child) for child in handle.read().split())
        except OSError:
            pass
    return out


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a process and its descendants."""
    known = [s for s in map(cpu_seconds, process_tree(pid)) if s is not None]
    return sum(known) if known else None


def rss_bytes(pid: int) -> int | None:
    """Resident memory of one process."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) with linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
