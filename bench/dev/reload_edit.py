#!/usr/bin/env python3
"""Refuted experiment (2026-12-05, bench/NOTES.md open question 22): look-back kernels that load
and scan their chunk again after the look-back instead of holding its scanned maps across the
wait, for fewer registers (more programs an SM). Edits the generated ``<op>_triton.py`` text of
one-scan ops into a folder for ``module_ab.py --new``:

    python3 bench/dev/reload_edit.py generated ab_reload eligibility_traces gae ...
    PYTHONPATH=. python3 bench/dev/module_ab.py --base generated --new ab_reload --time-major \
        --algos eligibility_traces,... --shapes 64x65536,... --out "$OUT"

Offline (Triton 3.6, sm_90) eligibility traces' 32 x 256 lane tile on 8 warps took 227 -> 160
registers, but on the GPU every cell ran 1.08x-1.22x slower (GAE and TD(lambda) 2.1x-2.5x, with
spills): results/h100-2026-12-05-d-reload-*.txt. It edits the generated text as it was before the
thirty-second round moved the look-back's calls into scangen.kernels.lookback: run it on 13481e0's
modules (git show 13481e0:generated/<op>_triton.py).
"""
import re, sys
from pathlib import Path

AGG = "    # The chunk's aggregate is its composed map"

def edit(text: str, name: str) -> str:
    start = text.index(f"def _{name}_lookback_kernel(")
    end = text.index("@triton.jit", start)
    k = text[start:end]
    assert k.count(AGG) == 1, (name, k.count(AGG))
    b0 = k.index("    _t0 = _chunk * BLOCK_T\n")
    b1 = k.index(AGG)
    block = k[b0:b1]
    re_block = ("        # reload (experiment): the chunk again after the look-back, its maps not held across the wait\n"
                "        _chunk = _chunk + tl.minimum(_count, 0).to(tl.int32)  # 0, opaque: no CSE with the first loads\n"
                + "".join("    " + l if l.strip() else l for l in block.splitlines(True)))
    out, pos = [], 0
    # after each look-back call (ends with 'ACC)\n'), before the state line
    for m in re.finditer(r"= _lookback(_rows)?\((?:.|\n)*?ACC\)\n", k):
        out.append(k[pos:m.end()]); out.append(re_block); pos = m.end()
    out.append(k[pos:])
    k2 = "".join(out)
    assert k2.count("reload (experiment)") == 2, name
    return text[:start] + k2 + text[end:]

if __name__ == "__main__":
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[3:]:
        for suffix in ("", "_numba"):
            (dst / f"{name}{suffix}.py").write_text((src / f"{name}{suffix}.py").read_text())
        t = (src / f"{name}_triton.py").read_text()
        (dst / f"{name}_triton.py").write_text(edit(t, name))
        print("edited", name)
