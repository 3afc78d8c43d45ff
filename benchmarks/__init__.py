"""Benchmarks: scripts that measure performance as ratios in one run (not part of CI timing)."""
