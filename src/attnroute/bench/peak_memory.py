"""Child process for one memory measurement: `python -m attnroute.bench.peak_memory IMPL T` prints bytes.

Each measurement runs in a fresh process so the allocator state of one backend cannot hide or
inflate another's peak, and timing elsewhere keeps glibc's default (faster) thresholds.
"""

from __future__ import annotations

import json
import sys

import torch

from ..engine import RowStats, attend, causal
from .measure import peak_extra_bytes


def main(impl_name: str, T: int) -> None:
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, T, 64, generator=g) for _ in range(3))
    impl = impl_name.split("+")[0]

    def call():
        probes = [RowStats()] if impl_name.endswith("probes") else []
        return attend(q, k, v, causal(), impl=impl, probes=probes, memory_budget=1 << 36)

    print(json.dumps({"peak_extra_bytes": peak_extra_bytes(call)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
