"""API keys with policies: who a key is (its name), which models it may use, and its limits.

A leaf: the HTTP edge authenticates and admits (``http.security``), planning hides the models a
key may not use (``models.resolve``), the core charges tokens when a request ends
(``core.outcome``), and none of them needs more than this package.
"""
