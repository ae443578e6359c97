"""The toolkit (``gpulab``), mirrored: a test file per top-level module here, a folder per subpackage."""
