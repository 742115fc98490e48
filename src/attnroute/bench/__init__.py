"""Benchmarks run by `attnroute bench`: figures, never pass/fail."""
