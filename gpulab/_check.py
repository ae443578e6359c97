"""Argument checks shared by gpulab's public functions: one wording for one mistake.

Every check raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for a value out of
range, naming the argument and what to pass instead.

Example:
    >>> whole("warmup", 3, low=0)
    3
    >>> positive("min_run_time", 0)
    Traceback (most recent call last):
    ...
    ValueError: min_run_time must be a positive finite number, got 0
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import math
import numbers
import os
from typing import Any, Callable, Mapping, Sequence, TypeVar

__all__ = ["whole", "positive", "flag", "per_label", "rows_arg", "table_rows", "text", "callable_arg", "path_arg",
           "mapping", "nbytes", "number_array", "texts", "axes", "cuda_hidden_by_env", "device_arg",
           "install_hint", "checked"]

F = TypeVar("F", bound=Callable[..., Any])


def whole(name: str, value: Any, low: int = 1) -> int:
    """``value`` as a whole number ``>= low`` (a NumPy integer such as ``np.int64`` too; never a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or type(value).__name__ == "bool_":
        raise TypeError(f"{name} must be a whole number >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    return int(value)


def positive(name: str, value: Any, *, allow_zero: bool = False, unit: str = "") -> float:
    """``value`` as a finite number ``> 0`` (``>= 0`` with ``allow_zero``); ``unit`` only words the error."""
    what = f"{'non-negative' if allow_zero else 'positive'} finite number{' of ' + unit if unit else ''}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a {what}, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a {what}, got {value!r}")
    return float(value)


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool (``1`` or ``"yes"`` are refused: they hide typos)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def per_label(name: str, value: Any, labels: Sequence[str], *, allow_zero: bool = False) -> dict[str, float | None]:
    """One number (or ``None``) for every label from a single number or a mapping label -> number.

    >>> per_label("items", {"a": 64}, ["a", "b"])
    {'a': 64.0, 'b': None}
    """
    if value is None:
        return {k: None for k in labels}
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in labels]
        if unknown:
            raise ValueError(f"{name} given for unknown label(s) {unknown}; labels are {list(labels)}")
        raw = {k: value.get(k) for k in labels}
    else:
        raw = {k: value for k in labels}
    return {k: None if v is None else positive(f"{name} for {k!r}", v, allow_zero=allow_zero) for k, v in raw.items()}


def rows_arg(name: str, rows: Any, kind: type, maker: str) -> tuple[Any, ...]:
    """``rows`` as a non-empty tuple of ``kind`` (results made by ``maker``), from a list or tuple."""
    if isinstance(rows, (str, bytes)) or not isinstance(rows, (list, tuple)):
        raise TypeError(f"{name} must be a list of {kind.__name__}s (from {maker}), got {type(rows).__name__} "
                        f"{rows!r:.60}")
    if not rows:
        raise ValueError(f"{name} is empty: a comparison needs at least one {kind.__name__} (from {maker})")
    bad = [type(r).__name__ for r in rows if not isinstance(r, kind)]
    if bad:
        raise TypeError(f"{name} must hold {kind.__name__}s (from {maker}), got {', '.join(bad)}")
    return tuple(rows)


def table_rows(rows: Sequence[Any], kind: type, maker: str, baseline: str,
               published: Mapping[str, Any] | None = None, *, name: str = "rows",
               published_name: str = "published") -> list[str]:
    """The labels of a comparison table's rows, checked: every row a ``kind`` (made by ``maker``), labels
    unique, ``baseline`` among them, published figures only for known labels.

    >>> from types import SimpleNamespace as Row
    >>> table_rows([Row(label="a"), Row(label="b")], Row, "Row(label=...)", baseline="a")
    ['a', 'b']
    """
    rows = rows_arg(name, rows, kind, maker)
    labels = [r.label for r in rows]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"labels in {name} must be unique, repeated: {dupes}; pass label=... to {maker}")
    if baseline not in labels:
        raise ValueError(f"unknown baseline {baseline!r}: choose one of {labels}")
    unknown = [k for k in (published or {}) if k not in labels]
    if unknown:
        raise ValueError(f"{published_name}: published figures given for unknown label(s) {unknown}; "
                         f"labels are {labels}")
    return labels


def text(name: str, value: Any, *, empty: bool = True) -> str:
    """``value`` as a text (``empty=False``: at least one character)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a text, got {value!r}")
    if not empty and not value.strip():
        raise ValueError(f"{name} must not be empty, got {value!r}")
    return value


def callable_arg(name: str, value: Any) -> Any:
    """``value`` as a callable: a function, a model, a lambda (not its result)."""
    if not callable(value):
        raise TypeError(f"{name} must be a callable (a function, a model or a lambda), got {type(value).__name__} "
                        f"{value!r:.60}: pass the function itself, not its result")
    return value


def path_arg(name: str, value: Any) -> str | os.PathLike[str]:
    """``value`` as a path (a text or ``pathlib.Path``, not empty)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise TypeError(f"{name} must be a path (a text or pathlib.Path), got {value!r}")
    return value


def mapping(name: str, value: Any, *, example: str = "{'a': ...}") -> Mapping[Any, Any]:
    """``value`` as a mapping (a dict)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict such as {example}, got {type(value).__name__} {value!r:.60}")
    return value


def nbytes(name: str, value: Any, low: int = 0) -> int:
    """``value`` as a whole number of bytes ``>= low`` (``16 * gl.GiB``; not "16GiB", not 1.5e9)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number of bytes >= {low} (e.g. int(1.5 * gl.GiB)), got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be a whole number of bytes >= {low} (e.g. 64 * gl.MiB), got {value!r}")
    return value


def cuda_hidden_by_env(env: dict[str, str] | None = None) -> bool:
    """True when ``CUDA_VISIBLE_DEVICES`` is set to a value that hides every GPU ("", "-1", "none")."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" not in env:
        return False
    v = env["CUDA_VISIBLE_DEVICES"].strip().lower()
    return v in ("", "-1", "none", "nodevfiles") or v.startswith("-")


def device_arg(name: str, value: Any, *, here: bool = True) -> Any:
    """``value`` checked as a device this process can use: ``None`` (the default device), ``"cpu"``, ``"cuda"``,
    ``"cuda:N"``, ``"mps"``, a ``torch.device`` or a GPU index. One clear error before any work for a device
    that is not here ("cuda" without CUDA, "cuda:7" past the GPU count) or not a device at all ("tpu").

    >>> device_arg("device", "cpu")
    'cpu'
    >>> device_arg("device", "tpu")
    Traceback (most recent call last):
    ...
    ValueError: device='tpu' is not a device gpulab can use: pass 'cpu', 'cuda', 'cuda:N', 'mps' or None (the best available)

    ``here=False`` checks the spelling only (for reports that describe a device that is absent).
    """
    if value is None:
        return value
    kinds = "'cpu', 'cuda', 'cuda:N', 'mps' or None (the best available)"
    if isinstance(value, bool) or not (isinstance(value, (str, int)) or type(value).__name__ == "device"):
        raise TypeError(f"{name} must be a device such as {kinds}, got {type(value).__name__} {value!r}")
    spec = f"cuda:{value}" if isinstance(value, int) else str(value).strip()
    kind, _, index = spec.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()):
        raise ValueError(f"{name}={value!r} is not a device gpulab can use: pass {kinds}")
    if kind == "cpu" or not here:
        return value
    try:
        import torch
    except ImportError:
        raise ValueError(f"{name}={value!r} needs PyTorch, which is not installed: pip install 'gpulab[torch]', "
                         f"or pass 'cpu'") from None
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"{name}={value!r}: MPS is not available here; pass 'cpu' or None")
        return value
    count = torch.cuda.device_count() if torch.cuda.is_available() and not cuda_hidden_by_env() else 0
    if count == 0:
        raise ValueError(f"{name}={value!r}: CUDA is not available here (no usable NVIDIA GPU); pass 'cpu' or None, "
                         f"and run gl.doctor() to see why")
    if index and int(index) >= count:
        raise ValueError(f"{name}={value!r}: only {count} GPU(s) are visible (cuda:0 to cuda:{count - 1})")
    return value


def number_array(name: str, value: Any, *, low: float = 0.0, allow_low: bool = True) -> Any:
    """``value`` (one number or an array-like of numbers) as a float array, every entry finite and ``>= low``
    (``> low`` with ``allow_low=False``); a text is refused, not parsed."""
    import numpy as np

    bound = f"{'>=' if allow_low else '>'} {low:g}"
    if isinstance(value, (str, bytes, bool)) or (isinstance(value, (list, tuple)) and
                                                 any(isinstance(v, (str, bytes, bool)) for v in value)):
        raise TypeError(f"{name} must be a number or numbers {bound}, got {value!r:.60}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or numbers {bound}, got {value!r:.60}") from None
    if not np.all(np.isfinite(arr)) or np.any(arr < low) or (not allow_low and np.any(arr == low)):
        raise ValueError(f"{name} must be finite numbers {bound}, got {value!r:.60}")
    return arr


def texts(name: str, value: Any, allowed: Sequence[str] | None = None) -> tuple[str, ...]:
    """``value`` as a tuple of texts (a list or tuple, not one text: "torch" would be read letter by letter),
    each among ``allowed`` when given.

    >>> texts("frameworks", ["torch"], ["torch", "tensorflow"])
    ('torch',)
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise TypeError(f"{name} must be a list of texts such as {[value] if isinstance(value, str) else ['...']}, "
                        f"got {value!r}")
    bad = [v for v in value if not isinstance(v, str)]
    if bad:
        raise TypeError(f"{name} must hold texts only, got {bad!r}")
    unknown = [v for v in value if allowed is not None and v not in allowed]
    if unknown:
        raise ValueError(f"{name}: unknown {unknown}; choose from {sorted(allowed or ())}")
    return tuple(value)


def axes(name: str, value: Any) -> Any:
    """``value`` as a matplotlib Axes to draw on (``None``: a new figure)."""
    if value is not None and not hasattr(value, "plot"):
        raise TypeError(f"{name} must be a matplotlib Axes (e.g. from plt.subplots()) or None, got "
                        f"{type(value).__name__} {value!r:.40}")
    return value


def _nonempty(name: str, value: Any) -> str:
    return text(name, value, empty=False)


def _opt(check: Callable[..., Any]) -> Callable[..., Any]:
    return lambda name, value: value if value is None else check(name, value)


_KINDS: dict[str, Callable[[str, Any], Any]] = {
    "count": whole,
    "count0": lambda n, v: whole(n, v, low=0),
    "pos": positive,
    "pos0": lambda n, v: positive(n, v, allow_zero=True),
    "flag": flag,
    "text": text,
    "name": _nonempty,
    "fn": callable_arg,
    "path": path_arg,
    "mapping": mapping,
    "bytes": nbytes,
    "bytes1": lambda n, v: nbytes(n, v, low=1),
    "device": device_arg,
    "devspec": lambda n, v: device_arg(n, v, here=False),
    "axes": axes,
}
_KINDS.update({k + "?": _opt(f) for k, f in list(_KINDS.items())})


# the optional packages gpulab's functions import, by the extra of pyproject.toml that installs them
EXTRAS = {"torch": "torch", "torchvision": "torch", "tensorflow": "tensorflow", "nvidia": "dali", "mlflow": "tracking",
          "tensorboard": "tracking", "onnx": "onnx", "onnxscript": "onnx", "onnxruntime": "onnx", "hta": "hta"}
# what each extra installs, for an install of gpulab from a clone or a wheel (no package index needed)
PACKAGES = {"torch": "torch torchvision", "tensorflow": "tensorflow", "dali": "nvidia-dali-cuda120",
            "tracking": "mlflow tensorboard", "onnx": "onnx onnxscript onnxruntime", "hta": "HolisticTraceAnalysis"}


def install_hint(module: str | None) -> str | None:
    """How to install ``module`` (a missing import's name) with gpulab, or None for a module gpulab does not know.

    >>> install_hint("torch.utils.flop_counter")
    "pip install torch torchvision (the 'gpulab[torch]' extra)"
    """
    extra = EXTRAS.get((module or "").split(".")[0])
    return None if extra is None else f"pip install {PACKAGES[extra]} (the 'gpulab[{extra}]' extra)"


def checked(_needs: str | None = None, **kinds: str) -> Callable[[F], F]:
    """Check a function's arguments by kind before it runs: ``@checked(label="text?", warmup="count0")``.

    Kinds: ``count`` (whole >= 1), ``count0`` (>= 0), ``pos``/``pos0`` (finite > 0 / >= 0), ``flag``, ``text``,
    ``name`` (non-empty text), ``fn``, ``path``, ``mapping``, ``bytes``/``bytes1`` (whole bytes >= 0 / >= 1),
    ``device`` (one this process can use), ``devspec`` (spelled as a device), ``axes``; a trailing ``?`` also
    allows ``None``. Applied outside ``@contextmanager``, a context manager's arguments are checked when it is
    called, before ``with`` enters it. An optional package the function imports and that is missing (torch,
    TensorFlow, DALI, MLflow) is one ``ImportError`` naming the ``pip install`` that adds it (the packages of
    gpulab's extra); ``_needs="torch"`` checks for it before the call (for a context manager, whose body runs
    later).

    >>> @checked(n="count")
    ... def twice(n): return 2 * n
    >>> twice(0)
    Traceback (most recent call last):
    ...
    ValueError: n must be a whole number >= 1, got 0
    """
    unknown = sorted(set(kinds.values()) - set(_KINDS))
    if unknown:
        raise ValueError(f"unknown argument kind(s) {unknown}: choose from {sorted(_KINDS)}")

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        missing = sorted(set(kinds) - set(sig.parameters))
        if missing:
            raise TypeError(f"{fn.__qualname__} has no parameter(s) {missing}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                given = sig.bind_partial(*args, **kwargs).arguments
            except TypeError:
                given = {}                     # the call's own error (a missing or unexpected argument) follows
            for name, kind in kinds.items():
                if name in given:
                    _KINDS[kind](name, given[name])
            if _needs is not None and importlib.util.find_spec(_needs) is None:
                raise ImportError(f"{fn.__name__}() needs {_needs}, which is not installed: {install_hint(_needs)}")
            try:
                return fn(*args, **kwargs)
            except ModuleNotFoundError as e:
                hint = install_hint(e.name)
                if hint is None:
                    raise
                raise ImportError(f"{fn.__name__}() needs {e.name}, which is not installed: {hint}") from e

        return wrapper  # type: ignore[return-value]

    return decorate
