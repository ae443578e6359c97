"""The API reference's landing page (build/docs/index.html): install, a quick start with the output and the figure
it gave on the machine that built the pages, then the toolkit by topic with one-line summaries (as pandas'
reference lists its API), the modules one level down, and the course's scaffolding in a section of its own."""
from __future__ import annotations

import base64
import html
import importlib
import inspect
import io
import re
import time
from typing import Any

EXAMPLE = '''\
import numpy as np
import gpulab as gl

a = np.random.default_rng(0).standard_normal((1024, 1024))
with gl.Monitor(interval=0.05) as mon:          # host (and GPU) telemetry while it runs
    m64 = gl.benchmark(np.matmul, a, a, label="float64", flops=2 * 1024**3)
    a32 = a.astype(np.float32)
    m32 = gl.benchmark(np.matmul, a32, a32, label="float32", flops=2 * 1024**3)
table = gl.compare([m64, m32], baseline="float64",
                   peak_flops=gl.machine_limits().peak_flops())
table                                            # a table in Jupyter, text in a terminal
mon.trace.plot()                                 # the run's utilisation and memory over time
'''

INSTALL = '''\
pip install "gpulab @ git+https://github.com/gpulab-course/gpulab@main"
pip install torch torchvision     # for PyTorch work; on Linux without an NVIDIA GPU add
                                  # --index-url https://download.pytorch.org/whl/cpu
python -m gpulab doctor           # the machine and its stack, with a fix for what is wrong'''

CSS = """
body { font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1f24; margin: 0; }
main { max-width: 62rem; margin: 0 auto; padding: 1.5rem 1.5rem 4rem; }
h1 { font-size: 2rem; margin: .5rem 0 .25rem; } h1 small { font-size: 1rem; color: #57606a; font-weight: normal; }
h2 { margin-top: 2.2rem; border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
h3 { margin: 1.4rem 0 .4rem; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: .8rem 1rem; overflow-x: auto;
      white-space: pre-wrap; overflow-wrap: anywhere; font-size: .86rem; line-height: 1.45; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
p code, td code { background: #eff1f3; padding: .05rem .3rem; border-radius: 4px; font-size: .88em; }
table.api { border-collapse: collapse; width: 100%; font-size: .93rem; }
table.api td { border-top: 1px solid #e4e7eb; padding: .35rem .6rem; vertical-align: top; }
table.api td:first-child { white-space: nowrap; width: 14rem; }
.output { border: 1px solid #d0d7de; border-radius: 6px; padding: .6rem 1rem; overflow-x: auto; }
.output table { border-collapse: collapse; font-size: .88rem; }
.output th, .output td { padding: .2rem .6rem; border-bottom: 1px solid #e4e7eb; text-align: right; }
.note { color: #57606a; font-size: .9rem; }
img.figure { max-width: 100%; border: 1px solid #d0d7de; border-radius: 6px; }
nav.top a { margin-right: 1.2rem; }
"""


def summary(obj: object) -> str:
    """The first sentence of ``obj``'s docstring, as HTML (``code`` kept)."""
    if isinstance(obj, int):                         # a constant such as gl.MiB
        return f"the number {obj:,} (bytes)"
    doc = inspect.getdoc(obj) or ""
    first = doc.split("\n\n")[0].replace("\n", " ").strip()
    first = re.split(r"(?<=\.)\s", first, maxsplit=1)[0]
    text = html.escape(first)
    text = re.sub(r"``(.+?)``", r"<code>\1</code>", text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r":(?:func|class|meth|attr|data|mod):`~?([^`]+)`", r"<code>\1</code>", text)


def _table(rows: list[tuple[str, str, str]]) -> str:
    return ('<table class="api">' + "".join(f'<tr><td><a href="{href}"><code>{html.escape(name)}</code></a></td>'
                                            f"<td>{text}</td></tr>" for name, href, text in rows) + "</table>")


def _run_example() -> tuple[str, str, str]:
    """The example's table (HTML), its figure (a PNG as a data URL) and where it ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import warnings

    scope: dict = {}
    body, last = EXAMPLE.rsplit("\ntable ", 1)[0], "table"
    with warnings.catch_warnings():     # a noisy row is marked in the table itself; the build log stays quiet
        warnings.simplefilter("ignore")
        exec(compile(body, "<gpulab example>", "exec"), scope)
    table = scope[last]
    fig = scope["mon"].trace.plot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    png = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return table._repr_html_(), png, str(scope["m32"].env)


def course_parts(modules: list[str], page: Any) -> str:
    """The course's modules grouped by part (``gpulab.course.<part>``): a heading per part, its lessons from the
    part's docstring, a row per module."""
    parts = [m for m in modules if m.startswith("gpulab.course.") and m.count(".") == 2]
    out = []
    for part in parts:
        mods = [m for m in modules if m.startswith(part + ".") and m.count(".") == 3
                and not m.rsplit(".", 1)[1].startswith("_")]
        title = summary(importlib.import_module(part))
        out.append(f'<h3><a href="{page(part)}">{html.escape(part.removeprefix("gpulab."))}</a></h3>'
                   f"<p>{title}</p>"
                   + _table([(m.removeprefix(part + "."), page(m), summary(importlib.import_module(m))) for m in mods]))
    return "".join(out)


def landing(modules: list[str], version: str, run_example: bool = True) -> str:
    """The landing page's HTML."""
    import gpulab

    if run_example:
        t0 = time.perf_counter()
        table, png, where = _run_example()
        shown = (f'<p class="note">What it printed and drew on the machine that built these pages ({html.escape(where)}; '
                 f"{time.perf_counter() - t0:.0f} s); yours depend on your machine.</p>"
                 f'<div class="output">{table}</div><p><img class="figure" alt="Trace.plot(): CPU utilisation and '
                 f'memory during the two benchmarks" src="{png}"></p>')
    else:
        shown = '<p class="note">(run <code>python tools/docs.py</code> to show its output here)</p>'
    groups = "".join(f"<h3>{html.escape(title)}</h3>" + _table([(n, f"gpulab.html#{n}", summary(getattr(gpulab, n)))
                                                                for n in names]) for title, names in gpulab.GROUPS)
    course_side = ("gpulab.course", "gpulab.preflight")   # the lessons' scaffolding, and the preflight over them
    toolkit_mods = [m for m in modules if m.count(".") == 1 and not m.startswith(course_side)]
    page = lambda m: m.replace(".", "/") + ".html"   # noqa: E731
    below = _table([(m, page(m), summary(importlib.import_module(m))) for m in toolkit_mods])
    course = _table([("preflight (python -m gpulab check)", page("gpulab.preflight"),
                      summary(importlib.import_module("gpulab.preflight")))]) + course_parts(modules, page)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpulab {version}: API reference</title><style>{CSS}</style></head>
<body><main>
<nav class="top"><a href="#install">Install</a><a href="#quick-start">Quick start</a><a href="#toolkit">Toolkit</a>
<a href="#modules">Modules</a><a href="#course">Course</a><a href="gpulab.html">gpulab (full page)</a></nav>
<h1>gpulab <small>{version}</small></h1>
<p>Make machine learning fast on GPUs: correct timing, GPU telemetry, comparison tables with each result's
share of the machine's measured ceiling and published figures beside yours, and diagnosis of setups and
bottlenecks. <code>import gpulab</code> needs only numpy, pandas, matplotlib, psutil and NVML's bindings; torch,
TensorFlow and a GPU are used where present.</p>
<h2 id="install">Install</h2>
<pre><code>{html.escape(INSTALL)}</code></pre>
<h2 id="quick-start">Quick start</h2>
<pre><code>{html.escape(EXAMPLE)}</code></pre>
{shown}
<p>With PyTorch the same calls time models (<code>gl.benchmark(model, x, items=64)</code>), profile steps
(<code>gl.profile(step).verdict</code>) and explain memory (<code>gl.peak_memory</code>, <code>gl.explain_oom</code>):
see <a href="gpulab.html">the package page</a>.</p>
<h2 id="toolkit">The toolkit: <code>gpulab</code></h2>
<p>The stable face, <code>gpulab.__all__</code>, by topic.</p>
{groups}
<h2 id="modules">One level down</h2>
<p>Everything else, by concern: <code>gl.memory</code>, <code>gl.profiling</code>, ...</p>
{below}
<h2 id="course">The course: <code>gpulab.course</code></h2>
<p>The lessons' own scaffolding (reference models, synthetic data, demonstrations, exercise checks), kept apart
from the toolkit: <a href="gpulab/course.html"><code>from gpulab import course</code></a>.</p>
{course}
<p class="note">gpulab {version}. Generated by pdoc from the docstrings; their examples run in the test suite.</p>
</main></body></html>
"""
