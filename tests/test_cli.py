"""The scangen command line, run as a user runs it (a subprocess of this interpreter)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env():
    # the checkout first on the path: scangen is found from any cwd, also where it is not
    # installed but reached through a relative PYTHONPATH (the GPU machine's PYTHONPATH=.)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def scangen(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "scangen.cli", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)


def test_list_shows_every_builtin():
    out = scangen("list")
    assert out.returncode == 0, out.stderr
    for fn in ("compute_gae", "compute_vtrace", "compute_retrace", "compute_lambda_returns",
               "compute_discounted_returns", "compute_eligibility_traces",
               "compute_episodic_prefix_sum", "compute_masked_gae"):
        assert fn in out.stdout


def test_show_prints_canonical_ir_and_location():
    out = scangen("show", "compute_gae")
    assert out.returncode == 0, out.stderr
    assert "# code: generated/gae.py" in out.stdout
    assert "direction: reverse" in out.stdout and "alpha:" in out.stdout
    assert scangen("show", "nope").returncode == 2


def test_check_prints_alpha_beta(tmp_path):
    spec = tmp_path / "ema.yaml"
    spec.write_text("name: ema\ndirection: forward\ninputs:\n  x: float\n  s: flag\n"
                    "params:\n  k: 0.9\nscans:\n  m:\n    update: where(s, x, x + k * m)\n"
                    "outputs:\n  y: m\n")
    out = scangen("check", str(spec))
    assert out.returncode == 0, out.stderr
    assert "m: alpha = x" in out.stdout
    assert "beta  = where(s, 0, k)" in out.stdout


def test_check_reports_bad_spec(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ndirection: reverse\ninputs:\n  x: float\nscans:\n"
                    "  A:\n    update: x * A * A\noutputs:\n  y: A\n")
    out = scangen("check", str(spec))
    assert out.returncode == 2
    assert f"{spec}:7: scan 'A' update: not affine in the state 'A'" in out.stderr


def test_build_check_and_out(tmp_path):
    assert scangen("build", "--check").returncode == 0
    spec = ROOT / "specs" / "gae.yaml"
    out = scangen("build", str(spec), "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "gae.py").is_file() and (tmp_path / "__init__.py").is_file()
    (tmp_path / "gae.py").write_text("stale\n")
    stale = scangen("build", str(spec), "--out", str(tmp_path), "--check")
    assert stale.returncode == 1 and "gae.py" in stale.stderr
    # the command it suggests rebuilds what was checked, where it was checked
    assert f"run `scangen build {spec} --out {tmp_path}`" in stale.stderr, stale.stderr


def test_own_specs_need_an_explicit_out(tmp_path):
    """Without --out a user spec is refused (generated/ holds the built-ins); --out given, even
    a folder named generated, is the user's own choice."""
    spec = tmp_path / "gae.yaml"
    spec.write_text((ROOT / "specs" / "gae.yaml").read_text().replace("name: gae", "name: mine"))
    refused = scangen("build", str(spec), cwd=tmp_path)
    assert refused.returncode == 2 and "pass --out DIR" in refused.stderr, refused.stderr
    assert not (tmp_path / "generated").exists()
    built = scangen("build", str(spec), "--out", "generated", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "generated" / "mine.py").is_file()


def test_verify_small_on_this_machine():
    out = scangen("verify")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all kernels match their references" in out.stdout


def test_build_removes_modules_of_specs_no_longer_built(tmp_path):
    """A spec renamed: --check names the old modules, the build it suggests removes them (and
    only modules scangen generated), and --check is then clean."""
    spec = tmp_path / "mine.yaml"
    text = (ROOT / "specs" / "discounted_returns.yaml").read_text()
    spec.write_text(text.replace("name: discounted_returns", "name: mine"))
    out = tmp_path / "out"
    assert scangen("build", str(spec), "--out", str(out)).returncode == 0
    (out / "notes.py").write_text("# mine, not generated\n")
    spec.write_text(text.replace("name: discounted_returns", "name: mine_v2"))
    stale = scangen("build", str(spec), "--out", str(out), "--check")
    assert stale.returncode == 1 and "mine.py" in stale.stderr and "notes.py" not in stale.stderr
    built = scangen("build", str(spec), "--out", str(out))
    assert built.returncode == 0 and "removed" in built.stdout, built.stdout + built.stderr
    assert not (out / "mine.py").exists() and (out / "mine_v2.py").is_file()
    assert (out / "notes.py").is_file()
    assert scangen("build", str(spec), "--out", str(out), "--check").returncode == 0


def test_two_specs_of_one_function_are_a_spec_error(tmp_path):
    text = (ROOT / "specs" / "discounted_returns.yaml").read_text()
    for name in ("one", "two"):
        (tmp_path / f"{name}.yaml").write_text(
            text.replace("name: discounted_returns", f"name: {name}"))
    done = scangen("build", "one.yaml", "two.yaml", "--out", "out", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        "error: two.yaml: function 'compute_discounted_returns' is already generated by one.py"), done.stderr


def test_own_specs_are_refused_into_the_package_folder(tmp_path):
    """--out naming the folder scangen imports its built-ins from (here: the checkout's
    generated/) would rewrite its __init__.py without them: refused, nothing written."""
    spec = tmp_path / "mine.yaml"
    spec.write_text((ROOT / "specs" / "gae.yaml").read_text().replace("name: gae", "name: mine"))
    done = scangen("build", str(spec), "--out", str(ROOT / "generated"))
    assert done.returncode == 2 and "scangen's own generated package" in done.stderr, done.stderr
    assert not (ROOT / "generated" / "mine.py").exists()


def test_verify_refuses_a_bad_device():
    bad = scangen("verify", "--device", "foo")
    assert bad.returncode == 2 and "--device must be cpu or cuda" in bad.stderr, bad.stderr
    import torch
    if not torch.cuda.is_available():
        none = scangen("verify", "--device", "cuda")
        assert none.returncode == 2 and "no CUDA device" in none.stderr, none.stderr


def test_bare_build_targets_the_generated_package_from_any_folder(tmp_path):
    """Without --out, from a folder with no generated modules, the built-ins are checked (and
    built) where scangen imports them from, not in a new generated/ of the current folder (a
    bare build elsewhere wrote 46 files there)."""
    out = scangen("build", "--check", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"{ROOT / 'generated'} is up to date" in out.stdout, out.stdout
    assert not (tmp_path / "generated").exists()
    assert scangen("build", "--check").stdout.startswith("generated is up to date")  # from the root


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`scangen show retrace | head -1`: the pipe closes under the command, which stops quietly."""
    p = subprocess.Popen([sys.executable, "-m", "scangen.cli", "show", "compute_retrace"], cwd=ROOT,
                         env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the command (importing for a while yet) writes a line
    err = p.stderr.read()
    assert p.wait(timeout=600) == 1
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
