"""Tests of ``gpulab.course.data``."""
