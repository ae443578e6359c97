#!/usr/bin/env python3
"""Build gpulab's API reference from its docstrings with pdoc: `make docs` -> build/docs/index.html.

Every public module is documented (private `_…` modules and the torchrun scripts' internals are left out). The
landing page (tools/docs_landing.py) gives the install lines, a quick start with the output and figure it gave on the
building machine, the toolkit by topic and the course apart; the package page's sidebar follows the same topics
(tools/docs_templates). It needs gpulab's core dependencies and pdoc only (`make docs`: requirements/tools.txt).

    python tools/docs.py [OUTPUT_DIR] [--no-example]
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


def main(out: str = "build/docs", example: bool = True) -> int:
    import pdoc
    import pdoc.render

    import gpulab

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from docs_landing import landing

    pdoc.render.configure(docformat="google", footer_text=f"gpulab {gpulab.__version__}",
                          template_directory=Path(__file__).resolve().parent / "docs_templates")
    pdoc.render.env.globals["api_groups"] = gpulab.GROUPS
    names = modules()
    with warnings.catch_warnings():
        # modules the package's __all__ already names are listed once more here: pdoc says so and skips them
        warnings.filterwarnings("ignore", message="The module specification")
        # a `torch.device` annotation cannot be resolved where torch is not installed: it is shown as written
        warnings.filterwarnings("ignore", message=".*type annotation.*torch")
        # pdoc walks every submodule of a package it is given, private ones too: "!" drops them again before any is
        # imported (a private module such as the course's Triton kernel needs Triton, which this venv lacks)
        pdoc.pdoc(*names, r"!.*\._", output_directory=Path(out))
    if not (Path(out) / "gpulab.html").exists():
        print(f"docs: no gpulab.html in {out}", file=sys.stderr)
        return 1
    (Path(out) / "index.html").write_text(landing(names, gpulab.__version__, run_example=example))
    pages = sorted(Path(out).rglob("*.html"))
    print(f"docs: {len(pages)} pages in {out}/ (open {out}/index.html)")
    return 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    sys.exit(main(*args[:1], example="--no-example" not in sys.argv[1:]))
