"""A run folder on disk: its files and start/resume rules, checkpoints (safetensors + JSON,
written atomically), the one-writer lock, and loading a run back to translate with.
"""
