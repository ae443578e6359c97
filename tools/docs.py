#!/usr/bin/env python3
"""Build gpulab's API reference from its docstrings with pdoc: `make docs` -> build/docs/index.html.

Every public module is documented (private `_…` modules and the torchrun scripts' internals are left out);
the landing page is the package docstring, "gpulab in your own notebook".

    python tools/docs.py [OUTPUT_DIR]
"""
from __future__ import annotations

import pkgutil
import sys
import warnings
from pathlib import Path


def modules() -> list[str]:
    import gpulab

    found = [m.name for m in pkgutil.walk_packages(gpulab.__path__, "gpulab.")]
    return ["gpulab", *(n for n in found if not any(part.startswith("_") for part in n.split(".")))]


def main(out: str = "build/docs") -> int:
    import pdoc
    import pdoc.render

    import gpulab

    pdoc.render.configure(docformat="google", footer_text=f"gpulab {gpulab.__version__}")
    with warnings.catch_warnings():
        # modules the package's __all__ already names are listed once more here: pdoc says so and skips them
        warnings.filterwarnings("ignore", message="The module specification")
        pdoc.pdoc(*modules(), output_directory=Path(out))
    pages = sorted(Path(out).rglob("*.html"))
    if not (Path(out) / "gpulab.html").exists():
        print(f"docs: no gpulab.html in {out}", file=sys.stderr)
        return 1
    print(f"docs: {len(pages)} pages in {out}/ (open {out}/index.html)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
