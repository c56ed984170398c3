"""EvalPlus' raw rows (HumanEval+ as evalplus 0.3.1 downloads it: task_id, prompt, entry_point,
canonical_solution, contract, base_input, plus_input, atol) as a code reference judged as evalplus
judges them (evalplus/evaluate.py, evalplus/eval/__init__.py: untrusted_check): the expected value
of each input is what prompt + canonical_solution returns on it (run once here, in the sandbox,
when the row is loaded), compared exactly, else, with the row's atol (1e-6 for floats when atol is
0), same type, same length and np.allclose(rtol=1e-7); find_zero (HumanEval/32) by evalplus' own
oracle, |poly(xs, answer)| <= atol. The tests are written in the form evalplus publishes on the hub
(evalplus/humanevalplus's `test`: inputs, results, assertion), so the trainer judges them.

Time: evalplus gives each input max(1 s, 4x the canonical solution's time on it); a run here holds
every input, so its limit is 4x the canonical solution's total time measured at loading, plus 1 s
to start, where that is past the reward's default.

MBPP+ rows (task_id "Mbpp/N") are refused: evalplus converts their inputs per task (tuples, sets,
complex numbers: evalplus.data.mbpp.mbpp_deserialize_inputs) and judges several tasks by special
oracles, which a row does not carry.
"""
import json
import math

FIELDS = ("base_input", "plus_input")  # what makes a row evalplus' own
GT_TIME_LIMIT_FACTOR = 4.0  # evalplus.config.DEFAULT_GT_TIME_LIMIT_FACTOR
START_S = 1.0  # a run's start (interpreter, the solution's import) beside the calls
CANONICAL_TIMEOUT_S = 120.0  # evalplus: at most 60 s for base_input and 60 s for plus_input
OUTPUT_CAP = 64 << 20  # the canonical solution's outputs, as tagged JSON

# evalplus/eval/__init__.py's is_floats and the comparison of untrusted_check, as the tests' own
# helpers (module-level functions of plain data: the trainer defines and calls them)
HELPERS = '''
import numpy as np


def is_floats(x) -> bool:
    # check if it is float; List[float]; Tuple[float]
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
    return False


def assertion(out, exp, atol):
    exact_match = out == exp
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        assert type(out) == type(exp)
        if isinstance(exp, (list, tuple)):
            assert len(out) == len(exp)
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert exact_match
'''

POLY = '''
import math


def _poly(xs: list, x: float):
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])
'''

# run after prompt + canonical_solution in the sandbox: each input's value (deep-copied, as
# evalplus' trusted_exec does), tagged so that JSON keeps tuples, sets, complex numbers and dict
# keys apart, and the calls' total time
DRIVER = '''

import copy as _ep_copy, json as _ep_json, time as _ep_time


def _ep_tag(v):
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [_ep_tag(x) for x in v]
    if type(v) in (tuple, set, frozenset):
        items = sorted(v, key=repr) if type(v) is not tuple else v
        return {"~": type(v).__name__, "v": [_ep_tag(x) for x in items]}
    if type(v) is dict:
        return {"~": "dict", "v": [[_ep_tag(k), _ep_tag(x)] for k, x in v.items()]}
    if type(v) is complex:
        return {"~": "complex", "v": [v.real, v.imag]}
    if type(v) is bytes:
        return {"~": "bytes", "v": v.hex()}
    raise TypeError("returns a " + type(v).__name__ + ", which no literal writes")


_ep_values, _ep_seconds = [], 0.0
try:
    for _ep_input in _ep_json.loads(_EP_INPUTS):
        _ep_start = _ep_time.perf_counter()
        _ep_out = _EP_ENTRY_(*_ep_copy.deepcopy(_ep_input))
        _ep_seconds += _ep_time.perf_counter() - _ep_start
        _ep_values.append(_ep_tag(_ep_out))
except Exception as _ep_error:
    print(_ep_json.dumps({"error": type(_ep_error).__name__ + ": " + str(_ep_error)[:200],
                          "input": len(_ep_values)}))
else:
    print(_ep_json.dumps({"values": _ep_values, "seconds": _ep_seconds}))
'''


def is_evalplus_row(row: dict) -> bool:
    return all(k in row for k in FIELDS)


def source(value) -> str:
    """Python source of a value the driver tagged (what the tests' `results` list holds)."""
    if isinstance(value, dict):
        kind, items = value["~"], value["v"]
        if kind == "tuple":
            return "(" + "".join(source(x) + ", " for x in items) + ")"
        if kind in ("set", "frozenset"):
            return f"{kind}([{', '.join(source(x) for x in items)}])"
        if kind == "dict":
            return "{" + ", ".join(f"{source(k)}: {source(x)}" for k, x in items) + "}"
        if kind == "complex":
            return f"complex({source(float(items[0]))}, {source(float(items[1]))})"
        if kind == "bytes":
            return repr(bytes.fromhex(items))
        raise ValueError(f"unknown tag {kind!r}")
    if isinstance(value, list):
        return "[" + ", ".join(source(x) for x in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise ValueError(f"not a tagged value: {type(value).__name__}")


def reference(row: dict, where: str, default_timeout: float) -> dict:
    """{"tests", "entry_point", "prompt", "timeout"?} for a raw evalplus row, its expected values
    computed by the row's canonical solution in the sandbox; a row that cannot be judged so is one
    line naming it."""
    task = str(row.get("task_id") or "")
    if task.startswith("Mbpp/"):
        raise ValueError(f"{where}: an MBPP+ row as evalplus distributes it ({task}): evalplus "
                         "converts its inputs per task (tuples, sets: mbpp_deserialize_inputs) and "
                         "judges some tasks by special oracles, which the row does not carry; load "
                         "the hub's evalplus/mbppplus instead (its `test` holds the converted "
                         "inputs and the expected values)")
    for key in ("prompt", "entry_point", "canonical_solution"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise ValueError(f"{where}: an evalplus row (base_input, plus_input) needs {key} as a "
                             f"string: the expected values are what prompt + canonical_solution "
                             f"returns")
    entry = row["entry_point"]
    if not entry.isidentifier():
        raise ValueError(f"{where}: entry_point must be a Python name, got {entry!r}")
    inputs = []
    for key in FIELDS:
        if not isinstance(row[key], list) or not all(isinstance(i, list) for i in row[key]):
            raise ValueError(f"{where}: {key} must be a list of argument lists, got "
                             f"{str(row[key])[:60]!r}")
        inputs += row[key]
    if not inputs:
        raise ValueError(f"{where}: base_input and plus_input are empty: nothing to judge")
    atol = row.get("atol", 0)
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not (
            math.isfinite(atol) and atol >= 0):
        raise ValueError(f"{where}: atol must be a non-negative number, got {atol!r}")
    values, seconds = _canonical_values(row, inputs, where)
    literal = "[" + ", ".join(source(v) for v in values) + "]"
    args = json.dumps(inputs)
    if entry == "find_zero":   # evalplus' oracle for HumanEval/32: a zero of the polynomial
        check = (f"{POLY}\n\ndef check(candidate):\n    inputs = {args}\n"
                 f"    for i, inp in enumerate(inputs):\n"
                 f"        assert abs(_poly(*inp, candidate(*inp))) <= {atol!r}\n")
    else:
        check = (f"{HELPERS}\n\ndef check(candidate):\n    inputs = {args}\n"
                 f"    results = {literal}\n"
                 f"    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
                 f"        assertion(candidate(*inp), exp, {atol!r})\n")
    out = {"tests": check, "entry_point": entry, "setup": "", "prompt": row["prompt"]}
    limit = GT_TIME_LIMIT_FACTOR * seconds + START_S
    if limit > default_timeout:
        out["timeout"] = round(limit, 1)
    return out


def _canonical_values(row: dict, inputs: list, where: str) -> tuple[list, float]:
    """The canonical solution's value on each input (tagged) and the calls' total seconds, run in
    the sandbox (the data set's code, not the trainer's)."""
    from gmts.rewards.sandbox import run_child
    program = (row["prompt"] + row["canonical_solution"] + "\n\n_EP_INPUTS = "
               + json.dumps(json.dumps(inputs)) + "\n"
               + DRIVER.replace("_EP_ENTRY_", row["entry_point"]))
    run = run_child({"solution": program, "cases": [""], "out_caps": [OUTPUT_CAP]},
                    timeout=CANONICAL_TIMEOUT_S, memory_mb=4096, file_mb=OUTPUT_CAP >> 20,
                    read_outputs=lambda files: [f.seek(0) or f.read(OUTPUT_CAP + 1)
                                                for f in files])
    try:
        found = json.loads(run.outputs[0])
        if "error" in found:
            why = f"{found['error']}, on input {found['input']} of base_input + plus_input"
        else:
            return found["values"], float(found["seconds"])
    except (ValueError, KeyError, TypeError, IndexError):
        report = next((r["cases"] for r in run.report if isinstance(r, dict) and "cases" in r),
                      [{}]) if isinstance(run.report, list) else [{}]
        case = report[0] if report and isinstance(report[0], dict) else {}
        why = (f"timed out after {CANONICAL_TIMEOUT_S:.0f} s" if run.timed_out
               or case.get("timed_out") else f"exit code {case.get('exit', run.returncode)}")
    raise ValueError(f"{where}: the canonical solution gives no expected values ({why}): the row "
                     "cannot be judged as evalplus judges it")
