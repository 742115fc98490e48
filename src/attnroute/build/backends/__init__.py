"""Backends: each computes the same attention and states what it holds in memory."""
