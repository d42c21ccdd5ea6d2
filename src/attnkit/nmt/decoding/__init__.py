"""From a trained model to translations: greedy and beam search, text in and translations
out, streaming stdin, and the attention views of a translation.
"""
