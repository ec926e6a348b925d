"""The benchmark: configurations × prompts × repeats, paired speedups (python -m demo.bench)."""
