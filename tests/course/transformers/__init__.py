"""Tests of ``gpulab.course.transformers``."""
