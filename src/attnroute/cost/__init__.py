"""cost/: what routing takes in memory and time (KV cache, attention bills)."""
