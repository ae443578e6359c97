"""Profiling: lesson 08.

The story of a profiling session told from the verdicts it computed (``verdicts``); the profiler itself is the
toolkit's (``gpulab.profiling``).
"""
