"""UI suite: every notebook run through a real JupyterLab in headless Chromium.

A package so that the helper module ``jupyterlab.py`` is ``ui.jupyterlab`` and never shadows the
real ``jupyterlab`` package on ``sys.path``.
"""
