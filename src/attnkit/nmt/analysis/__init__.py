"""Judging a trained model: translation metrics (BLEU, chrF, AER), evaluation of a test
set, word alignments from attention, attention diagnostics and the inspection of a
split.
"""
