"""Training a translator: the loop, its data (prepare), the objective and validation, the stop
rules, per-rank RNG states, learning-rate schedules, CPU threads, clean interruption and
data-parallel training under torchrun.
"""
