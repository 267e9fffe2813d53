"""The statistical gate: anytime-valid tests, policy, verdicts, replay and simulation.

Everything here is a pure function over typed values; nothing does I/O at import time.
"""
