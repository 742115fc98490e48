"""Wall time and peak resident memory of one call, on CPU.

Peak memory: Linux keeps the process's high-water mark (VmHWM); writing 5 to
/proc/self/clear_refs resets it to the current RSS (proc(5)). Large tensors are mmap'd by
the allocator and returned on free, so "peak − RSS before" is the call's extra memory.
"""

from __future__ import annotations

import ctypes
import gc
import statistics
import time

from ..read.ground.budget import peak, reset_peak, resident


def fix_malloc_thresholds() -> None:
    """Make glibc return large blocks to the OS on free (fixed mmap threshold), so RSS falls back
    between measurements; by default the threshold grows after each large free (mallopt(3))."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: blocks >= 1 MiB are mmap'd and unmapped on free
        libc.mallopt(-1, 1 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def seconds(fn, repeats: int = 3, warmup: int = 1) -> float:
    """Median wall time of fn over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_extra_bytes(fn) -> int | None:
    """Peak RSS during one call of fn minus RSS before it (after one warm-up call).

    Call this in a process of its own: the fixed malloc thresholds it sets would slow timing."""
    fix_malloc_thresholds()
    fn()
    gc.collect()
    before = resident()
    if not reset_peak():
        return None
    fn()
    hwm = peak()
    return None if hwm is None or before is None else max(0, hwm - before)
