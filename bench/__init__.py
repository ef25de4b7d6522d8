"""The gateway's benchmark: ``python -m bench <subcommand>`` (see docs/PERFORMANCE.md).

Not a test suite: it measures the gateway against the floor (gRPC straight to Triton) on this
machine, variants of it side by side, and writes reports to ``bench/results/`` (ignored by git).
"""
