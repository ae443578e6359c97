"""Tests of ``gpulab.preflight``."""
