"""The run-time compile cache under real processes: concurrent builds, killed builds, and what
invalidates an entry.

* 4 processes compiling the same spec into one cache directory at the same moment all succeed,
  leave exactly one entry with a valid ``meta.json``, and compute the right numbers.
* A build killed half way (after the module, before the ``meta.json`` commit marker; or in the
  middle of writing the module) leaves nothing that loads: the next compile rebuilds and works.
* The key covers the templates, the scangen version and the Triton and torch versions.

Children are started with the same interpreter (``sys.executable``) and import scangen from
this checkout.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton

import scangen
from scangen.compiler import store
from scangen.compiler.options import Options

from conftest import call_on

REPO = Path(__file__).resolve().parent.parent

SPEC = """\
name: {name}
doc: Discounted sum with resets, reverse in time.
direction: reverse
inputs:
  x: float
  done: flag
params:
  gamma: 0.9
scans:
  G:
    update: x + gamma * (1 - done) * G
outputs:
  ret: G
  twice: 2 * G + x
"""


def _inputs(seed=0, N=3, T=37):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, T, generator=g), torch.rand(N, T, generator=g) < 0.2


def _expected(x, done, gamma=0.9):
    out = torch.zeros_like(x, dtype=torch.float64)
    g = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in reversed(range(x.shape[1])):
        g = x[:, t].double() + gamma * (~done[:, t]).double() * g
        out[:, t] = g
    return out, 2 * out + x.double()


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"  # before triton is imported in the child
    env.pop("SCANGEN_CACHE_DIR", None)
    return env


CHILD = textwrap.dedent("""\
    import json, os, sys, time
    from pathlib import Path
    import torch
    import scangen
    cache, spec, workdir, me = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    (workdir / f"ready{me}").touch()
    while not (workdir / "go").exists():   # start compiling together
        time.sleep(0.002)
    fn = scangen.compile(spec, cache_dir=cache)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 37, generator=g)
    done = torch.rand(3, 37, generator=g) < 0.2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    res = {}
    for backend in ("torch", "triton") + (("numba",) if device == "cpu" else ()):
        ret, twice = fn(x.to(device), done.to(device), backend=backend)
        res[backend] = [ret.cpu().tolist(), twice.cpu().tolist()]
    print(json.dumps(res))
""")


def _entries(cache: Path):
    return sorted(p for p in cache.iterdir() if p.is_dir()) if cache.exists() else []


def _check_entry(entry: Path, name: str):
    """One committed entry: the module and a meta.json naming its key and versions."""
    files = {p.name for p in entry.iterdir()} - {"__pycache__"}
    # the op, its generated backward, their Triton and CPU kernels, the commit marker; no
    # half-written .tmp files left
    assert files == {f"{name}.py", f"{name}_grad.py", f"{name}_triton.py", f"{name}_numba.py",
                     f"{name}_grad_triton.py", f"{name}_grad_numba.py", "meta.json"}, files
    meta = json.loads((entry / "meta.json").read_text())
    assert entry.name == f"{name}-{meta['key'][:24]}"
    assert meta["spec"] == name and meta["function"] == name
    assert meta["scangen"] == scangen.__version__
    assert meta["triton"] == triton.__version__ and meta["torch"] == torch.__version__
    assert meta["templates"] == store.templates_hash()
    compile(((entry / f"{name}.py").read_text()), str(entry / f"{name}.py"), "exec")
    return meta


def test_four_processes_compile_the_same_spec_at_once(tmp_path):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    name = "race4"
    text = SPEC.format(name=name)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(cache), text, str(work), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(), cwd=tmp_path) for i in range(4)]
    try:
        deadline = time.monotonic() + 120
        while not all((work / f"ready{i}").exists() for i in range(4)):
            assert time.monotonic() < deadline, "children did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        (work / "go").touch()
        results = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    (entry,) = _entries(cache)  # exactly one entry
    _check_entry(entry, name)
    ret, twice = _expected(*_inputs())
    for out, _ in results:
        res = json.loads(out.strip().splitlines()[-1])
        assert {"torch", "triton"} <= set(res), res
        for backend in res:  # torch, triton and, on the CPU, numba
            got_ret, got_twice = (torch.tensor(v, dtype=torch.float64) for v in res[backend])
            torch.testing.assert_close(got_ret, ret, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(got_twice, twice, atol=1e-5, rtol=1e-5)


KILLED = textwrap.dedent("""\
    import os, sys
    from pathlib import Path
    import scangen
    from scangen.compiler import store
    cache, spec, when = sys.argv[1], sys.argv[2], sys.argv[3]
    write, replace = store.write_if_changed, os.replace
    def dying_write(path, text):
        if Path(path).name == "meta.json" and when == "before-meta":
            os._exit(1)        # the module is written, the commit marker is not
        return write(path, text)
    def dying_replace(src, dst):
        if str(dst).endswith(".py") and when == "mid-module":
            os._exit(1)        # the module's temporary file is written, not yet renamed
        return replace(src, dst)
    store.write_if_changed = dying_write
    store.os.replace = dying_replace
    scangen.compile(spec, cache_dir=cache)
    print("not killed")
""")


@pytest.mark.parametrize("when", ["before-meta", "mid-module"])
def test_killed_build_leaves_nothing_that_loads(tmp_path, when):
    cache = tmp_path / "cache"
    name = f"killed_{when.replace('-', '_')}"
    text = SPEC.format(name=name)
    proc = subprocess.run([sys.executable, "-c", KILLED, str(cache), text, when],
                          capture_output=True, text=True, env=_env(), timeout=240)
    assert proc.returncode == 1, (proc.stdout, proc.stderr[-3000:])
    (entry,) = _entries(cache)
    assert not (entry / "meta.json").exists()
    files = {p.name for p in entry.iterdir()}
    if when == "before-meta":
        assert files == {f"{name}.py", f"{name}_grad.py", f"{name}_triton.py",
                         f"{name}_numba.py", f"{name}_grad_triton.py", f"{name}_grad_numba.py"}
        # Damage the uncommitted module too: an uncommitted entry is never trusted.
        (entry / f"{name}.py").write_text("raise RuntimeError('half-built module loaded')\n")
    else:
        assert f"{name}.py" not in files and any(f.endswith(".tmp") for f in files), files
    # A later compile (here: this process) rebuilds the entry and works.
    fn = scangen.compile(text, cache_dir=cache)
    assert _entries(cache) == [entry]
    meta = _check_entry(entry, name) if when == "before-meta" else json.loads(
        (entry / "meta.json").read_text())
    assert meta["spec"] == name
    x, done = _inputs(1, 2, 19)
    ret, twice = _expected(x, done)
    for backend in ("torch", "triton"):
        got_ret, got_twice = call_on(fn, backend, x, done)
        torch.testing.assert_close(got_ret.double(), ret, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_twice.double(), twice, atol=1e-5, rtol=1e-5)


def test_cache_key_covers_templates_and_versions(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    text = SPEC.format(name="keyed")
    scangen.compile(text, cache_dir=cache)
    (base,) = _entries(cache)
    scangen.compile(text, cache_dir=cache)  # unchanged: the same entry
    assert _entries(cache) == [base]
    seen = {base}
    changes = [  # (meta.json field, object, attribute, new value, value recorded in meta.json)
        ("templates", store, "templates_hash", lambda: "0" * 64, "0" * 64),
        ("scangen", store, "__version__", "999.0.0", "999.0.0"),
        # read from Triton's __init__.py without importing it (store.triton_version)
        ("triton", store, "triton_version", lambda: "0.0.1-test", "0.0.1-test"),
        ("torch", torch, "__version__", "0.0.2-test", "0.0.2-test"),
        ("options", None, None, Options(input_shift="gather"),
         {**Options().as_dict(), "input_shift": "gather"}),
    ]
    for field, obj, attr, value, recorded in changes:
        with monkeypatch.context() as m:
            if obj is None:  # template options are an argument, not a setting
                fn = store.compile_spec(text, cache, value)
            else:
                m.setattr(obj, attr, value)
                fn = scangen.compile(text, cache_dir=cache)
            new = set(_entries(cache)) - seen
            assert len(new) == 1, f"changing the {field} version did not change the cache key"
            (entry,) = new
            meta = json.loads((entry / "meta.json").read_text())
            assert meta[field] == recorded
            assert entry.name == f"keyed-{meta['key'][:24]}"
            seen.add(entry)
            assert callable(fn)
    assert len(_entries(cache)) == 1 + len(changes)
    # Back to the real versions: the original entry is reused, nothing new is written.
    scangen.compile(text, cache_dir=cache)
    assert len(_entries(cache)) == 1 + len(changes)


@pytest.mark.parametrize("content", ["", '{"key": 5', '{"key": "0000"}', "{}", "[]", "null", "1"],
                         ids=["empty", "truncated", "wrong-key", "no-key", "list", "null", "number"])
def test_damaged_meta_json_means_rebuild(tmp_path, content):
    """An entry whose commit marker is not a matching JSON object is not committed: it is
    rebuilt (never an AttributeError from reading the marker)."""
    cache = tmp_path / "cache"
    text = SPEC.format(name="damaged_meta")
    scangen.compile(text, cache_dir=cache)
    (entry,) = _entries(cache)
    (entry / "meta.json").write_text(content)
    fn = scangen.compile(text, cache_dir=cache)
    assert _entries(cache) == [entry]
    _check_entry(entry, "damaged_meta")
    x, done = _inputs(2, 2, 7)
    torch.testing.assert_close(fn(x, done, backend="torch")[0].double(), _expected(x, done)[0],
                               atol=1e-5, rtol=1e-5)


def test_threads_compiling_one_spec_at_once_all_get_the_op(tmp_path):
    """Each thread's scangen.compile returns the op; the module was registered in sys.modules
    before it had run, and the threads after the first once took it half-initialised
    ("module ... has no attribute ...")."""
    import threading
    n = 4
    barrier = threading.Barrier(n)
    got, errors = [], []
    spec = SPEC.format(name="threads_once")

    def work():
        barrier.wait()
        try:
            fn = scangen.compile(spec, cache_dir=tmp_path)
            x, done = _inputs(seed=1)
            got.append(fn(x, done, backend="torch")[0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    x, done = _inputs(seed=1)
    for ret in got:
        torch.testing.assert_close(ret.double(), _expected(x, done)[0], atol=1e-5, rtol=1e-5)


def test_cache_files_follow_the_umask(tmp_path):
    """Another user can read a cache or a build (mkstemp alone made every file 0600)."""
    old = os.umask(0o022)
    try:
        store.write_if_changed(tmp_path / "a.py", "x = 1\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.py").stat().st_mode & 0o777 == 0o666 & ~store._UMASK


def test_an_unwritable_cache_names_the_way_out(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    with pytest.raises(OSError, match="SCANGEN_CACHE_DIR"):
        scangen.compile(SPEC.format(name="unwritable"), cache_dir=blocker / "cache")


def test_numba_caches_in_the_temp_dir_when_nothing_else_is_writable(tmp_path):
    """A read-only installation run without a writable home: numba raised "no locator
    available" at the kernels' decoration; they are cached under the temp dir then."""
    pytest.importorskip("numba")
    import numba
    from scangen.runtime import numba_kernels
    source = tmp_path / "pkg"
    source.mkdir()
    (source / "__pycache__").write_text("")  # a file: no cache folder can be made there
    blocked = tmp_path / "file"
    blocked.write_text("")
    before = numba.config.CACHE_DIR
    try:
        numba.config.CACHE_DIR = ""
        assert numba_kernels._ensure_cache_dir([tmp_path]) is None  # writable: left to numba
        folder = numba_kernels._ensure_cache_dir([source], blocked / "numba")
        assert folder and numba.config.CACHE_DIR == folder
        assert numba_kernels._ensure_cache_dir([source], blocked / "numba") is None  # set now
    finally:
        numba.config.CACHE_DIR = before


def test_a_numba_module_generated_against_other_helpers_warns(tmp_path):
    pytest.importorskip("numba")
    from types import SimpleNamespace
    from scangen.runtime import numba as nb_runtime
    path = tmp_path / "x_numba.py"
    current = (REPO / "generated" / "gae_numba.py").read_text().splitlines()[2]
    path.write_text("# GENERATED\n#\n" + current + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nb_runtime._check_helpers(SimpleNamespace(__file__=str(path)))  # current: silent
    path.write_text("# GENERATED\n#\n# Helpers: scangen/runtime/numba_kernels.py 0123456789abcdef\n")
    with pytest.warns(RuntimeWarning, match="scangen build"):
        nb_runtime._check_helpers(SimpleNamespace(__file__=str(path)))



def test_a_compiled_op_unpickles_in_a_fresh_process(tmp_path):
    """Functions pickle by reference: a spawn worker given a compiled op imports its module,
    which only the compiling process had registered (ModuleNotFoundError; a multiprocessing
    Pool then hung on the task). The module is found in the cache by its key."""
    import pickle
    fn = scangen.compile(SPEC.format(name="pickled_op"), cache_dir=tmp_path)
    blob = tmp_path / "op.pkl"
    blob.write_bytes(pickle.dumps(fn))
    child = textwrap.dedent("""\
        import pickle, sys
        import torch
        fn = pickle.loads(open(sys.argv[1], "rb").read())
        g = torch.Generator().manual_seed(0)
        x = torch.randn(3, 37, generator=g)
        done = torch.rand(3, 37, generator=g) < 0.2
        print(fn(x, done, backend="torch")[0].double().sum().item())
    """)
    env = {**_env(), "SCANGEN_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", child, str(blob)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    x, done = _inputs(seed=0)
    assert abs(float(out.stdout.split()[-1]) - _expected(x, done)[0].sum().item()) < 1e-3
