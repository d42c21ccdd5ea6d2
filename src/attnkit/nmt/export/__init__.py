"""Engines practitioners deploy on: a trained Transformer run exported to CTranslate2
(:mod:`.ctranslate2`) and translated by it with attnkit's own output path (:mod:`.engine`).
"""
