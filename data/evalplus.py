"""EvalPlus' raw rows (HumanEval+ and MBPP+ as evalplus 0.3.1 downloads them: task_id, prompt,
entry_point, canonical_solution, contract, base_input, plus_input, atol; MBPP+ also assertion) as
a code reference judged as evalplus judges them (evalplus/evaluate.py, evalplus/eval/__init__.py:
untrusted_check): the expected value of each input is what prompt + canonical_solution returns on
it (run once here, in the sandbox, when the row is loaded), compared exactly, else, with the row's
atol (1e-6 for floats when atol is 0), same type, same length and np.allclose(rtol=1e-7). Its
special oracles: find_zero (HumanEval/32) by |poly(xs, answer)| <= atol; MBPP+'s inputs converted
per task as evalplus.data.mbpp.mbpp_deserialize_inputs does (tuples, sets, complex numbers), and
its tasks judged by a set, by "not None", or by a second formula as _special_oracle.py says. The
tests are written in the form evalplus publishes on the hub (evalplus/humanevalplus's `test`:
inputs, results, assertion), so the trainer judges them.

Time: evalplus gives each input max(1 s, 4x the canonical solution's time on it); a run here holds
every input, so its limit is 4x the canonical solution's total time measured at loading, plus 1 s
to start, where that is past the reward's default.

Cache: the canonical solution's values and time are kept in <data folder>/evalplus-expected/ (the
data folder of data/files.py: $GMTS_DATA_DIR or ~/.cache/gmts), a file per row, named by the hash
of the program that computed them (row, driver, Python version): a later load reads them back
instead of running the row again. The time is the machine's that measured it: on another machine,
delete the folder to measure again.
"""
import hashlib
import json
import math
import os
import re
import sys
import tempfile

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


def assertion(out, exp, atol, inp):
    exact_match = EXACT_MATCH
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

# MBPP+'s special oracles (evalplus/eval/__init__.py, _special_oracle.py): exact_match by task
MBPP_SET_EQ = ("similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
               "larg_nnum", "intersection_array", "find_dissimilar", "Diff")
MBPP_NOT_NONE = ("check_str", "text_match_three", "text_starta_endb")  # expected: not None
MBPP_EXACT = {
    "are_equivalent": "True",                                           # Mbpp/164
    "sum_div": "out == exp or out == 0",                                # Mbpp/295
    "surface_Area": "out == exp or abs(out - _surface_Area(*inp)) <= atol",  # Mbpp/581
    "digit_distance_nums": "out == exp or out == _digit_distance_nums(*inp)",  # Mbpp/558
    **{name: "set(out) == set(exp)" for name in MBPP_SET_EQ},
    **{name: "out == exp if isinstance(out, bool) else exp == (out is not None)"
       for name in MBPP_NOT_NONE},
}
MBPP_ORACLES = '''

def _surface_Area(base_edge, height):
    slant_height = math.sqrt((base_edge / 2) ** 2 + height**2)
    base_area = base_edge**2
    lateral_area = 4 * (base_edge * slant_height) / 2
    total_surface_area = base_area + lateral_area
    return round(total_surface_area)


def _digit_distance_nums(num1, num2):
    str_num1, str_num2 = str(num1), str(num2)
    max_length = max(len(str_num1), len(str_num2))
    str_num1, str_num2 = str_num1.zfill(max_length), str_num2.zfill(max_length)
    total_difference = 0
    for digit1, digit2 in zip(str_num1, str_num2):
        difference = abs(int(digit1) - int(digit2))
        total_difference += difference
    return total_difference
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
    raise TypeError("returns a " + type(v).__name__ + ", which no answer's value can be (plain "
                    "data: None, numbers, str, bytes, containers of them)")


def _ep_tuples(v):
    return tuple(_ep_tuples(x) for x in v) if isinstance(v, list) else v


def _ep_mbpp(task, inp):
    """evalplus.data.mbpp.mbpp_deserialize_inputs, for one input of MBPP+ task `task`."""
    if task in (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596,
                616, 630, 726, 740, 744, 809):
        return [tuple(a) for a in inp]
    if task in (63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780):
        return [[tuple(x) for x in a] for a in inp]
    if task in (75, 413, 444, 753):
        return [[tuple(x) for x in inp[0]]] + [inp[1]]
    if task in (106, 750):
        return [inp[0]] + [tuple(inp[1])]
    if task == 115:
        return [[set(x) if isinstance(x, list) and len(x) else {} for x in inp[0]]]
    if task == 124:
        return (float(inp[0]), complex(inp[1]))
    if task in (250, 405, 446, 617, 720, 763, 808):
        return [tuple(inp[0])] + [inp[1]]
    if task in (259, 401, 445):
        return [tuple(tuple(x) for x in a) for a in inp]
    if task == 278:
        return [tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])]
    if task == 307:
        return [tuple(inp[0])] + [inp[1], inp[2]]
    if task == 722:
        return [{k: tuple(v) for k, v in inp[0].items()}] + inp[1:]
    if task == 252:
        return [complex(inp[0])]
    if task in (580, 615, 791):
        return _ep_tuples(inp)
    return inp


_ep_inputs, _ep_values, _ep_seconds = [], [], 0.0
try:
    for _ep_input in _ep_json.loads(_EP_INPUTS):
        if _EP_MBPP is not None:
            _ep_input = _ep_mbpp(_EP_MBPP, _ep_input)
        _ep_inputs.append(_ep_tag(_ep_input))
        _ep_start = _ep_time.perf_counter()
        _ep_out = _EP_ENTRY_(*_ep_copy.deepcopy(_ep_input))
        _ep_seconds += _ep_time.perf_counter() - _ep_start
        _ep_tagged = _ep_tag(_ep_out)  # an answer's value crosses the sandbox as plain data
        _ep_values.append(_ep_out is not None if _EP_NOT_NONE else _ep_tagged)
except Exception as _ep_error:
    print(_ep_json.dumps({"error": type(_ep_error).__name__ + ": " + str(_ep_error)[:200],
                          "input": len(_ep_values)}))
else:
    print(_ep_json.dumps({"inputs": _ep_inputs, "values": _ep_values, "seconds": _ep_seconds}))
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
    mbpp = int(task[5:]) if re.fullmatch(r"Mbpp/\d+", task) else None
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
    found, seconds = _canonical_values(row, inputs, where, mbpp)
    try:
        args = "[" + ", ".join(source(v) for v in found["inputs"]) + "]"
        literal = "[" + ", ".join(source(v) for v in found["values"]) + "]"
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}: the canonical solution's values cannot be read back ({e})"
                         ) from None
    if entry == "find_zero" and mbpp is None:  # evalplus' oracle for HumanEval/32: a zero
        check = (f"{POLY}\n\ndef check(candidate):\n    inputs = {args}\n"
                 f"    for i, inp in enumerate(inputs):\n"
                 f"        assert abs(_poly(*inp, candidate(*inp))) <= {atol!r}\n")
    else:
        exact = MBPP_EXACT.get(entry, "out == exp") if mbpp is not None else "out == exp"
        helpers = HELPERS.replace("EXACT_MATCH", exact)
        if "_surface_Area" in exact or "_digit_distance_nums" in exact:
            helpers = "\nimport math\n" + helpers + MBPP_ORACLES
        check = (f"{helpers}\n\ndef check(candidate):\n    inputs = {args}\n"
                 f"    results = {literal}\n"
                 f"    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
                 f"        assertion(candidate(*inp), exp, {atol!r}, inp)\n")
    out = {"tests": check, "entry_point": entry, "setup": ""}
    if mbpp is None:  # HumanEval's program is prompt + completion; MBPP+'s prompt is a docstring
        out["prompt"] = row["prompt"]
    limit = GT_TIME_LIMIT_FACTOR * seconds + START_S
    if limit > default_timeout:
        out["timeout"] = round(limit, 1)
    return out


def _canonical_values(row: dict, inputs: list, where: str, mbpp: int | None) -> tuple[dict, float]:
    """{"inputs", "values"}: each input as the call takes it (MBPP+'s converted) and the canonical
    solution's value on it, tagged, and the calls' total seconds; run in the sandbox (the data
    set's code, not the trainer's)."""
    from gmts.rewards.sandbox import run_child
    not_none = mbpp is not None and row["entry_point"] in MBPP_NOT_NONE
    program = (row["prompt"] + row["canonical_solution"] + "\n\n_EP_INPUTS = "
               + json.dumps(json.dumps(inputs)) + "\n"
               + f"_EP_MBPP = {mbpp!r}\n_EP_NOT_NONE = {not_none}\n"
               + DRIVER.replace("_EP_ENTRY_", row["entry_point"]))
    cached = _cache_path(program)
    found = _read_cached(cached)
    if found is not None:
        return found, float(found["seconds"])
    run = run_child({"solution": program, "cases": [""], "out_caps": [OUTPUT_CAP]},
                    timeout=CANONICAL_TIMEOUT_S, memory_mb=4096, file_mb=OUTPUT_CAP >> 20,
                    read_outputs=lambda files: [f.seek(0) or f.read(OUTPUT_CAP + 1)
                                                for f in files])
    try:  # the last line: the canonical solution may print too
        found = json.loads(run.outputs[0].strip().splitlines()[-1])
        if "error" in found:
            why = f"{found['error']}, on input {found['input']} of base_input + plus_input"
        else:
            seconds = float(found["seconds"])
            _write_cached(cached, found)
            return found, seconds
    except (ValueError, KeyError, TypeError, IndexError):
        report = next((r["cases"] for r in run.report if isinstance(r, dict) and "cases" in r),
                      [{}]) if isinstance(run.report, list) else [{}]
        case = report[0] if report and isinstance(report[0], dict) else {}
        why = (f"timed out after {CANONICAL_TIMEOUT_S:.0f} s" if run.timed_out
               or case.get("timed_out") else f"exit code {case.get('exit', run.returncode)}")
    raise ValueError(f"{where}: the canonical solution gives no expected values ({why}): the row "
                     "cannot be judged as evalplus judges it")


def _cache_path(program: str) -> str:
    """Where the values `program` computes are kept (the module docstring's cache)."""
    from gmts.data.files import data_dir
    key = hashlib.sha256(f"{sys.version_info[:2]}\0{program}".encode()).hexdigest()
    return os.path.join(data_dir(), "evalplus-expected", key + ".json")


def _read_cached(path: str) -> dict | None:
    """The kept values, or None when there are none or they are not what a run writes."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
        seconds = found["seconds"]
        if (type(found["inputs"]) is list and type(found["values"]) is list
                and len(found["inputs"]) == len(found["values"])
                and type(seconds) in (int, float) and 0 <= seconds < math.inf):
            return found
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _write_cached(path: str, found: dict) -> None:
    """Keep the values (whole or not at all: a temporary file renamed); a folder that cannot be
    written only means the next load runs the row again."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(found, f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
