"""Tests of ``gpulab.memory``."""
