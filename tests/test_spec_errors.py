"""Every spec error, verbatim: one small bad spec per case (file, line, message, expression)."""
import pytest

import scangen
from scangen.compiler.pipeline import to_ir

BASE = 'name: bad\ndirection: {direction}\ninputs:\n  x: float\n  d: {dkind}\n  k: {{kind: float, shape: [N, T, K]}}\n  i: {{kind: index}}\nparams:\n  g: 0.9\nscans:\n  A:\n    {scan}\noutputs:\n  y: {out}\n'


def spec(scan="update: x + g * A", out="A", direction="reverse", dkind="flag"):
    return BASE.format(scan=scan, out=out, direction=direction, dkind=dkind)


CASES = {
    "square": (spec(scan="update: x + A**2"),
        "{path}:12: scan 'A' update: not affine in the state 'A' (nonlinear term: A**2): 'x + A**2'"),
    "product": (spec(scan="update: x + A*A"),
        "{path}:12: scan 'A' update: not affine in the state 'A' (nonlinear term: A**2): 'x + A*A'"),
    "exp": (spec(scan="update: x + exp(A)"),
        "{path}:12: scan 'A' update: not affine in the state 'A' (nonlinear term: exp(A)): 'x + exp(A)'"),
    "beta_state": (spec(scan="alpha: x\n    beta: g * A"),
        "{path}:13: scan 'A' beta: the state 'A' cannot appear here (only the states of earlier scans may): 'g * A'"),
    "undeclared": (spec(scan="update: x + h * A"),
        "{path}:12: scan 'A' update: undeclared name 'h': 'x + h * A'"),
    "prev_state_reverse": (spec(out="A + prev(A, 0)"),
        "{path}:14: output 'y': prev(A) is not available in a reverse scan: the state there is computed after step t: 'A + prev(A, 0)'"),
    "next_state_forward": (spec(out="A + next(A, 0)", direction="forward"),
        "{path}:14: output 'y': next(A) is not available in a forward scan: the state there is computed after step t: 'A + next(A, 0)'"),
    "nested_shift": (spec(scan="update: next(next(x, 0), 0) + g * A"),
        "{path}:12: scan 'A' update: next()/prev() cannot be nested: 'next(next(x, 0), 0) + g * A'"),
    "own_state_shift": (spec(scan="update: x + g * next(A, 0)"),
        "{path}:12: scan 'A' update: write the carried state as plain 'A' in an update, not inside next()/prev(): 'x + g * next(A, 0)'"),
    "bad_kind": (spec(dkind="bool"),
        "{path}:5: input 'd': kind must be one of float, flag, index, got 'bool'"),
    "index_outside_gather": (spec(scan="update: x + i * A"),
        "{path}:12: scan 'A' update: index input 'i' may only be the second argument of gather(): 'x + i * A'"),
    "k_outside_sum": (spec(scan="update: k + g * A"),
        "{path}:12: scan 'A' update: 'k' has a trailing axis [N, T, K]: use it inside sum() or as the first argument of gather(): 'k + g * A'"),
    "attribute": (spec(scan="update: x.__class__ + g * A"),
        "{path}:12: scan 'A' update: unsupported syntax (Attribute): 'x.__class__ + g * A'"),
    "import": (spec(scan="update: __import__('os').system('echo hi') + A"),
        '{path}:12: scan \'A\' update: unsupported syntax (a call of Attribute): only the functions abs, clip, exp, gather, log, max, min, next, present, prev, sigmoid, sqrt, sum, tanh, where can be called: "__import__(\'os\').system(\'echo hi\') + A"'),
    "unknown_function": (spec(scan="update: foo(x) + A"),
        "{path}:12: scan 'A' update: unknown function 'foo' (allowed: abs, clip, exp, gather, log, max, min, next, present, prev, sigmoid, sqrt, sum, tanh, where): 'foo(x) + A'"),
    "missing_beta": (spec(scan="alpha: x"),
        "{path}:12: scan 'A': needs either update, or both alpha and beta: 'x'"),
    "direction": (spec(direction="sideways"),
        "{path}:2: direction must be 'reverse' or 'forward', got 'sideways'"),
    "init_nt": (spec(scan="update: x + g * A\n    init: x"),
        "{path}:13: scan 'A' init: may only use numbers and [N] inputs, got 'x': 'x'"),
    "fill_nt": (spec(scan="update: next(x, x) + g * A"),
        "{path}:12: scan 'A' update: the fill of next() must be an expression of numbers, params and [N] inputs, got 'x': 'next(x, x) + g * A'"),
    "fill_position": (spec(scan="update: next(x, is_last) + g * A"),
        "{path}:12: scan 'A' update: the fill of next() must be an expression of numbers, params and [N] inputs, got 'is_last': 'next(x, is_last) + g * A'"),
    "duplicate_key": (spec().replace("  d: flag\n", "  d: flag\n  x: float\n"),
        "{path}:6: duplicate key 'x'"),
    "unknown_key": (spec().replace("params:", "paramz:"),
        "{path}:8: the spec: unknown key 'paramz' (expected one of: name, function, doc, direction, signature, inputs, exclusive, params, let, scans, outputs, returns)"),
    "malformed": (spec().replace("  x: float", "  x: [float"),
        "{path}:5: malformed YAML (expected ',' or ']', but got ':')"),
    "comparison_outside_where": (spec(scan="update: (x > 0) + g * A"),
        "{path}:12: scan 'A' update: a comparison may only be the first argument of where(): '(x > 0) + g * A'"),
    "syntax": (spec(scan="update: x + * A"),
        "{path}:12: scan 'A' update: not a valid expression (invalid syntax): 'x + * A'"),
    "signature_twice": (spec() + "signature: [x, d, k, i, g, x]\n",
        "{path}:1: signature must list every input and param exactly once (listed twice: ['x'])"),
    "returns_string": (spec() + "returns: y\n",
        "{path}: 'returns' must be a list such as [a, b], got a string 'y'"),
    "no_scans": (spec().replace("scans:\n  A:\n    update: x + g * A\n", "scans: {{}}\n".format()),
        "{path}:1: a spec needs at least one input, one scan and one output (none in: scans)"),
    "param_as_input": (spec().replace("  g: 0.9", "  g: 0.9\n  x: 1"),
        "{path}:10: param 'x' is already declared as an input"),
    "arity": (spec(scan="update: exp(x, 1) + g * A"),
        "{path}:12: scan 'A' update: exp() takes 1 argument, got 2: 'exp(x, 1) + g * A'"),
    "optional_k_input": (spec().replace("shape: [N, T, K]}", "shape: [N, T, K], default: 0}"),
        "{path}:6: input 'k': an input of shape [N, T, K] cannot be optional (default 0.0): sum() and gather() read it whole; declare it without a default and pass it"),
    "optional_index": (spec().replace("{kind: index}", "{kind: index, default: 0}"),
        "{path}:7: input 'i': an index input cannot be optional (default 0.0): sum() and gather() read it whole; declare it without a default and pass it"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_error_text(name, tmp_path):
    text, expected = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with pytest.raises(scangen.SpecError) as info:
        to_ir(path)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == expected.format(path=path)


def _python_spec(**change):
    from scangen import Input, Output, Param, Scan, Spec
    parts = dict(name="py_bad", direction="reverse",
                 inputs=[Input("x"), Input("y", default=0.0)], params=[Param("g", 0.9)],
                 scans=[Scan("A", update="x + y + g * A")], outputs=[Output("o", "A")])
    parts.update(change)
    return Spec(**parts)


def _python_cases():
    from scangen import Input, Param
    nan = float("nan")
    return {
        "shape_tuple": (dict(inputs=[Input("x"), Input("y", shape=("N", "T"))]),
                        "input 'y': shape must be 'NT', 'N' or 'NTK', got ('N', 'T')"),
        "names_not_objects": (dict(inputs=["x"]), "inputs must hold Input(...) objects, got 'x' (str)"),
        "default_string": (dict(inputs=[Input("x"), Input("y", default="0")]),
                           "input 'y': default must be a finite number, got '0'"),
        "default_nan": (dict(inputs=[Input("x"), Input("y", default=nan)]),
                        "input 'y': default must be a finite number, got nan"),
        "param_inf": (dict(params=[Param("g", float("inf"))]),
                      "param 'g': default must be a finite number or a string, got inf"),
        "choices_dict": (dict(params=[Param("g", 0.9), Param("m", "a", choices={"a": 0, "b": 1})]),
                         "param 'm': choices must be (string, number) pairs, e.g. (('a', 0), ('b', 1)), "
                         "got {'a': 0, 'b': 1}"),
        "exclusive_flat": (dict(inputs=[Input("x"), Input("y", default=0.0), Input("z", default=0.0)],
                                exclusive=["y", "z"]),
                           "exclusive must be a list of groups of two or more names, e.g. [['y', 'z']], "
                           "got [['y'], ['z']]"),
    }


@pytest.mark.parametrize("case", ["shape_tuple", "names_not_objects", "default_string", "default_nan",
                                  "param_inf", "choices_dict", "exclusive_flat"])
def test_python_spec_errors(case):
    """Specs built from Python objects get the checks the YAML front end makes as it parses (they
    raised KeyError, AttributeError, NameError from inside the generated module, or were accepted)."""
    change, expected = _python_cases()[case]
    with pytest.raises(scangen.SpecError) as info:
        to_ir(_python_spec(**change))
    assert str(info.value) == f"<python spec>: {expected}"
