"""scangen's public functions against the checked-in golden outputs of the float64 references
(tests/golden/*.pt, written by tests/make_golden.py; the file format is described there)."""

from pathlib import Path

import pytest
import torch

import scangen
from scangen.testing import assert_close

GOLDEN = sorted((Path(__file__).resolve().parent / "golden").glob("*.pt"))


def test_golden_files_exist():
    assert len(GOLDEN) >= 8


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_scangen_matches_golden(path):
    case = torch.load(path, weights_only=True)
    out = getattr(scangen, case["name"])(**case["inputs"])
    expected = case["expected"]
    if isinstance(expected, list):
        assert isinstance(out, tuple) and len(out) == len(expected), f"{case['name']} should return {len(expected)}"
    else:
        out, expected = (out,), [expected]
    for i, (actual, exp) in enumerate(zip(out, expected)):
        assert actual.dtype == torch.float32, "outputs take the input's floating dtype"
        assert_close(actual, exp, dtype=torch.float32, name=f"{path.stem} output {i}")
