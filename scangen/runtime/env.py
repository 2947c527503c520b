"""Environment switches, read once at import so that a call pays no environment lookups.

``SCANGEN_BACKEND`` (auto | triton | numba | torch), ``SCANGEN_FAMILY`` (stream | persist | lookback) and
``TRITON_INTERPRET``. Call :func:`reload_env` after changing them in a running process.
"""
import os

_NAMES = ("SCANGEN_BACKEND", "SCANGEN_FAMILY", "TRITON_INTERPRET")
ENV: dict = {}


def reload_env() -> None:
    ENV.update({n: os.environ.get(n) for n in _NAMES})


reload_env()
