"""Training a translator: the loop, learning-rate schedules, CPU threads, clean
interruption and data-parallel training under torchrun.
"""
