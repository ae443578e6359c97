"""Tests of ``gpulab.data``."""
