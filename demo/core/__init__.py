"""Shared ground: errors, settings, machine facts, memory, chunks, metrics, child processes."""
