"""Reasoning parsers: a model's thinking taken out of its text, apart from its answer.

Pure and streaming, like ``gateway.tools``: fed a choice's decoded text in arbitrary pieces, a
parser returns (reasoning, content) for each piece, and the concatenations do not depend on how
the text was split. ``registry`` names them as vLLM does (``--reasoning-parser``) and detects one
from a chat template.
"""
