"""Tests of ``gpulab.figures``."""
