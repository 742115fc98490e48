"""bench/: the benchmarks `attnroute bench` and `attnroute cost bill` run — figures, never pass/fail.

It may import every analysis floor; nothing in attnroute imports it. Memory is measured in child
processes (child.py).
"""

__all__: list[str] = []
