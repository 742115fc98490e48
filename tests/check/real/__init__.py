"""Attention implementations copied from public repositories, each under its own license, with the
outcome per check decided from reading the code (tests/check/test_real_gallery.py runs them)."""
