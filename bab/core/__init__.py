"""Shared machinery of every method: the budget knob, losses, training, timing, run cache, sources.

Imports nothing else from bab: every other room may use it.
"""
