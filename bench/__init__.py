"""Benchmarks. Each compares things side by side in one run, because this machine is shared and noisy."""
