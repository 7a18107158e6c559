"""What our process tree and the whole machine use, read from /proc (Linux).

What belongs here: the CPU time of this process, its reaped children and its
live descendants, and of the whole machine (to tell how noisy a run was);
`Meter`, which measures a timed window with them; memory probes (RSS, peak
RSS, PSS) of a process and of the tree; and the facts about the machine that
every report prints (CPU count and model, load average).
"""

from __future__ import annotations

import math
import os
import platform
import time

_TICK = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime+stime, cutime+cstime) of a process in clock ticks; (0, 0) if it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return 0, 0
    fields = text[text.rindex(")") + 2 :].split()  # fields[0] is field 3 (state)
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def descendants(pid: int | None = None) -> list[int]:
    """All live descendants of pid (default: this process), via /proc/<pid>/task/*/children."""
    root = os.getpid() if pid is None else pid
    found: list[int] = []
    todo = [root]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{p}/task/{tid}/children") or ""
            for child in text.split():
                c = int(child)
                if c not in found:
                    found.append(c)
                    todo.append(c)
    return found


def tree_cpu() -> float:
    """CPU seconds used by this process (all threads), its reaped children, and live descendants."""
    _, reaped = _cpu_ticks(os.getpid())
    total = time.process_time() + reaped / _TICK
    for pid in descendants():
        own, theirs = _cpu_ticks(pid)
        total += (own + theirs) / _TICK
    return total


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine since boot, from /proc/stat."""
    text = _read("/proc/stat") or "cpu 0 0 0 0"
    values = [int(v) for v in text.splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def ncpu() -> int:
    return os.cpu_count() or 1


class Meter:
    """Wall time, CPU time of our process tree, and what the rest of the machine used.

    ``other_cores`` is the number of cores kept busy by processes outside our
    tree during the window (/proc/stat busy time minus ours): the noise from
    whatever else runs on the machine.
    """

    def __enter__(self) -> Meter:
        self._m0 = _machine_ticks()
        self._c0 = tree_cpu()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        self.cpu = tree_cpu() - self._c0
        m1 = _machine_ticks()
        busy, total = m1[0] - self._m0[0], m1[1] - self._m0[1]
        machine_cores = ncpu() * busy / total if total > 0 else math.nan
        self.cpu_per_wall = self.cpu / self.wall if self.wall > 0 else math.nan
        self.other_cores = max(0.0, machine_cores - self.cpu_per_wall)

    def result(self) -> dict[str, float]:
        return {
            "wall": self.wall,
            "cpu": self.cpu,
            "cpu_per_wall": self.cpu_per_wall,
            "other_cores": self.other_cores,
        }


def _status_kib(pid: int | str, key: str, name: str = "status") -> int:
    text = _read(f"/proc/{pid}/{name}") or ""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size (VmRSS) in KiB."""
    return _status_kib(pid, "VmRSS")


def peak_rss_kib(pid: int | str = "self") -> int:
    """Peak resident set size (VmHWM) in KiB, since start or clear_peak_rss()."""
    return _status_kib(pid, "VmHWM")


def clear_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux 4.0+); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def pss_kib(pid: int | str = "self") -> int:
    """Proportional set size (shared pages divided among sharers) in KiB."""
    return _status_kib(pid, "Pss", "smaps_rollup")


def uss_kib(pid: int | str = "self") -> int:
    """Unique set size (the pages no other process maps: Private_Clean + Private_Dirty) in KiB."""
    return _status_kib(pid, "Private_Clean", "smaps_rollup") + _status_kib(
        pid, "Private_Dirty", "smaps_rollup"
    )


def tree_memory() -> dict[str, int]:
    """RSS and PSS (KiB) of this process and, separately, of all its live descendants."""
    kids = descendants()
    return {
        "rss_self": rss_kib(),
        "pss_self": pss_kib(),
        "rss_children": sum(rss_kib(p) for p in kids),
        "pss_children": sum(pss_kib(p) for p in kids),
        "children": len(kids),
    }


def cpu_model() -> str:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def loadavg() -> str:
    return " ".join((_read("/proc/loadavg") or "? ? ?").split()[:3])
