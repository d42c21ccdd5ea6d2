"""The translator models: the interface every architecture implements, the registry that
builds one from ``model.arch``, and the architectures (``rnn``, ``transformer``).
"""
