"""Results kept for their next request: least recently used first out, bounded in bytes.

Keys are (request kind, its canonical JSON: text, interventions, head …); values are the response
bodies as bytes, so the bound is exact (what the server would send again) and nothing is serialized twice.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class ResultCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = self.misses = 0
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: bytes) -> None:
        if len(value) > self.max_bytes // 4:  # one result never takes most of the cache
            return
        with self._lock:
            old = self._items.pop(key, None)
            self.bytes -= len(old) if old is not None else 0
            self._items[key] = value
            self.bytes += len(value)
            while self.bytes > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self.bytes -= len(dropped)

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["ResultCache"]
