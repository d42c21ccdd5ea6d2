"""Parallel text to token ids: corpus readers, what counts as a blank line, tokenizers, toy
tasks and length-bucketed batches.
"""
