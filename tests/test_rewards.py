"""Rewards: math/gsm8k answer checking on the real golds, a table of tricky cases, choice letters,
and the code sandbox against adversarial programs (each must end in reward 0 within its time limit,
touching nothing)."""
import importlib.util
import json
import os
import random
import stat
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

# ../shared/data, and the skip that says how to get it
from conftest import SHARED_DATA, needs_shared_data

from gmts import rewards
from gmts.rewards import code as code_mod
from gmts.rewards import get_reward
from gmts.rewards import math as math_mod
from gmts.rewards.choice import extract_choice
from gmts.rewards.sandbox import belongs_to_us, run_python, run_uids, sandbox_info

SHARED = SHARED_DATA                       # ../shared/data (tests/conftest.py says what it holds)
GSM8K = [os.path.join(SHARED, "gsm8k", f"{s}.jsonl") for s in ("train", "test")]
MATH500 = os.path.join(SHARED, "math500", "test.jsonl")
HAS_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None
needs_math_verify = pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed")
gsm8k, math_r, choice, code = (get_reward(n) for n in ("gsm8k", "math", "choice", "code"))


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# ------------------------------------------------------------------ GSM8K and MATH-500 golds


@needs_shared_data("gsm8k")
def test_every_gsm8k_gold_parses_and_scores():
    for row in rows(GSM8K[0]) + rows(GSM8K[1]):
        gold = math_mod.gold_answer(row["answer"])
        value = math_mod.to_number(gold)
        assert value is not None and value.denominator == 1, gold
        assert gsm8k(f"Let me think.\nSo the total is \\boxed{{{gold}}}.", gold) == 1.0
        assert gsm8k(f"So the total is \\boxed{{{value + 1}}}.", gold) == 0.0
        assert gsm8k(f"The answer is {value - 3}", row["answer"]) == 0.0
        # the reference solution itself ends in "#### <gold>": the last-number fallback must find it
        assert gsm8k(row["answer"], row["answer"]) == 1.0


@needs_shared_data("math500", "test.jsonl")
def test_every_math500_answer_equals_itself_and_reference_solutions_score():
    data = rows(MATH500)
    for row in data:
        assert math_mod.answers_equal(row["answer"], row["answer"]), row["answer"]
        assert math_r(row["solution"], row["answer"]) == 1.0, (math_mod.last_boxed(row["solution"]),
                                                               row["answer"])
        assert math_r(row["solution"] + "\nWait, no: \\boxed{123456789}", row["answer"]) == 0.0
    # the non-numeric ones also through math-verify itself, not just the string fast path
    if HAS_MATH_VERIFY:
        latex = [r["answer"] for r in data if math_mod.to_number(r["answer"]) is None]
        assert len(latex) > 50
        assert all(math_mod._verifier.equal(a, a) for a in latex)


# (reward, completion, gold, expected)
TRICKY = [
    ("gsm8k", "\\boxed{1,600}", "1600", 1), ("gsm8k", "The answer is 1,600.", "1600", 1),
    ("gsm8k", "\\boxed{1600}", "1,600", 1), ("gsm8k", "\\boxed{-5}", "-5", 1),
          ("gsm8k", "\\boxed{5}", "-5", 0),
    ("gsm8k", "\\boxed{\\$18}", "18", 1), ("gsm8k", "\\boxed{18 dollars}", "18", 1),
          ("gsm8k", "\\boxed{50\\%}", "50", 1),
    ("gsm8k", "\\boxed{18.0}", "18", 1), ("gsm8k", "\\boxed{18.00}", "18", 1),
          ("gsm8k", "\\boxed{18.5}", "18", 0),
    ("gsm8k", "She makes $18 every day.", "18", 1), ("gsm8k", "48/2 = 24 then 24+48 = 72", "72", 1),
    ("gsm8k", "no digits here", "5", 0), ("gsm8k", "", "5", 0),
          ("gsm8k", "\\boxed{x = 12}", "12", 1),
    ("gsm8k", "\\boxed{12\\text{ cm}^2}", "12", 1), ("gsm8k", "\\boxed{3} then \\boxed{4}", "4", 1),
    ("gsm8k", "\\boxed{3} then \\boxed{4}", "3", 0), ("gsm8k", "\\boxed{five}", "5", 0),
    ("gsm8k", "It is 5. \\boxed{}", "5", 0), ("gsm8k", "\\boxed{0.5}", "\\frac{1}{2}", 1),
    ("gsm8k", "#### 72", "Natalia sold 48/2 = 24 clips.\n#### 72", 1),
          ("gsm8k", "-.5 is it", "-0.5", 1),
    ("math", "\\boxed{\\frac{1}{2}}", "0.5", 1), ("math", "\\boxed{\\dfrac{1}{2}}", "\\frac12", 1),
    ("math", "\\boxed{1/2}", "\\frac{1}{2}", 1), ("math", "\\boxed{-\\frac{3}{4}}", "-0.75", 1),
    ("math", "\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 1),
          ("math", "\\boxed{0.33}", "\\frac{1}{3}", 0),
    ("math", "The answer is 5", "5", 0),
          ("math", "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1),
    ("math", "\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1), ("math", "\\boxed{\\sqrt{2}}", "\\sqrt{3}", 0),
    ("math", "\\boxed{(1, 2]}", "(1,2]", 1), ("math", "\\boxed{[1, 2]}", "(1,2]", 0),
    ("math", "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}",
     "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 1),
    ("math", "\\boxed{\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}}",
     "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 0),
    ("math", "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)",
     1),
    ("math", "\\boxed{x^2+2x+1}", "(x+1)^2", 1), ("math", "\\boxed{90^\\circ}", "90", 1),
    ("math", "\\boxed{\\text{(C)}}", "\\text{(C)}", 1),
          ("math", "\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 0),
    ("math", "\\boxed{7} and then \\boxed{\\frac{1}{2}", "7", 1), ("math", "\\boxed{{5}}", "5", 1),
    ("math", "\\fbox{5}", "5", 1), ("math", "$\\boxed 5$", "5", 1),
          ("math", "\\boxed{1\\,000}", "1000", 1),
    ("math", "x" * 200_000 + " \\boxed{42}", "42", 1),
          ("math", "\\boxed{" + "1" * 5000 + "}", "1", 0),
]


@pytest.mark.parametrize("name,completion,gold,expected", TRICKY,
                         ids=[f"{i}" for i in range(len(TRICKY))])
def test_tricky_math_cases(name, completion, gold, expected):
    latex_only = name == "math" and expected == 1 and math_mod.to_number(gold) is None \
        and math_mod.normalize(gold) != math_mod.normalize(math_mod.last_boxed(completion) or "")
    if latex_only and not HAS_MATH_VERIFY:
        pytest.skip("needs math-verify")
    assert get_reward(name)(completion, gold) == float(expected)


def test_extraction_helpers():
    assert len(TRICKY) >= 40
    assert math_mod.last_boxed("a \\boxed{\\frac{a}{b}} b \\boxed{x^{2}}") == "x^{2}"
    assert math_mod.last_boxed("\\boxed{1} \\boxed{2") == "1"  # truncated last box is skipped
    assert math_mod.last_boxed("no box") is None
    assert math_mod.last_number("from 3 to -1,234.5 then.") == "-1,234.5"
    assert math_mod.last_number("version2 x3") is None


def test_rewards_never_raise_and_stay_fast():
    rng = random.Random(0)
    alphabet = "\\{}$0123456789.,-+/^_()[]abx =\n\u2212\ud800\x00"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for fn, gold in ((gsm8k, "5"), (math_r, "\\frac{1}{2}"), (choice, "B")):
            assert fn(text, gold) in (0.0, 1.0)
    for bad in (None, 5, b"\\boxed{5}", ["x"]):
        assert gsm8k(bad, "5") == math_r(bad, "5") == choice(bad, "A") == code(bad,
                                                                               "assert True") == 0.0
    huge = ("\\boxed{" * 5000 + "1") * 20 + "9" * 1_000_000
    start = time.monotonic()
    assert gsm8k(huge, "5") == 0.0 and math_r(huge, "5") == 0.0 and choice(huge, "A") == 0.0
    assert time.monotonic() - start < 2.0


@needs_math_verify
def test_pathological_latex_is_cut_off_and_verifier_recovers_in_threads():
    start = time.monotonic()
    assert math_r("\\boxed{9^{9^{9^{9^{9}}}}}", "1") == 0.0
    assert time.monotonic() - start < math_mod.VERIFY_TIMEOUT_S + 1.5
    # signal.alarm only works in the main thread: the out-of-process verifier must work from any
    # thread
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda g: math_r("\\boxed{\\frac{\\sqrt{3}}{2}}", g),
                                ["\\frac{\\sqrt3}{2}"] * 8))
    assert results == [1.0] * 8


def test_fallback_without_math_verify_warns_and_compares_strings(monkeypatch):
    verifier = math_mod._Verifier()
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n,
                        *a: None if n == "math_verify" else real_find_spec(n, *a))
    monkeypatch.setattr(math_mod, "_verifier", verifier)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # string-equal
        assert math_r("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}") == 1.0
        # spaces ignored
        assert math_r("\\boxed{\\frac{ \\sqrt{3} }{2}}", "\\frac{\\sqrt{3}}{2}") == 1.0
        # needs the verifier
        assert math_r("\\boxed{\\frac{\\sqrt3}{2}}", "\\frac{\\sqrt{3}}{2}") == 0.0
        assert math_r("\\boxed{0.5}", "\\frac{1}{2}") == 1.0  # numbers never need it
    assert any("math-verify is not installed" in str(w.message) for w in caught)


# ------------------------------------------------------------------ choice

CHOICES = [
    ("The answer is (B)", "B", 1), ("B)", "B", 1), ("**B**", "B", 1), ("Answer: C", "C", 1),
    ("\\boxed{D}", "D", 1), ("\\boxed{(D)}", "D", 1), ("\\boxed{\\text{E}}", "E", 1),
           ("the answer is b", "B", 0),
    ("I think A dog would do it.", "A", 0),
           ("(A) is wrong, (C) is right. So the answer is C.", "C", 1),
    ("Options: A) x B) y. Final answer: **A**", "A", 1), ("E", "E", 1), ("A.", "A", 1),
           ("", "A", 0),
    ("Let me see... option (B) seems plausible but the answer is (D).", "D", 1),
           ("So the correct option is D.", "D", 1),
]


@pytest.mark.parametrize("completion,gold,expected", CHOICES)
def test_choice_letters(completion, gold, expected):
    assert choice(completion, gold) == float(expected)
    # reference forms are normalised
    assert choice(completion, f"({gold.lower()})") == float(expected)


def test_choice_reference_must_be_a_letter():
    with pytest.raises(ValueError, match="one letter"):
        choice("A", "maybe")
    assert extract_choice("nothing here") is None


# ------------------------------------------------------------------ code: correct programs


def block(src):
    return f"Here is my solution.\n```python\n{src}\n```\n"


def test_code_formats_pass_and_fail():
    add = "def add(a, b):\n    return a + b"
    # MBPP asserts
    assert code(block(add), ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]) == 1.0
    assert code(block("def add(a, b):\n    return a - b"), ["assert add(1, 2) == 3"]) == 0.0
    humaneval = {"tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
                 "entry_point": "add"}
    assert code(block(add), humaneval) == 1.0
    assert code(block("def add(a, b):\n    return 0"), humaneval) == 0.0
    kodcode = {"tests": "import pytest\nfrom solution import add\n\n"
                        "@pytest.mark.parametrize('a,b,c', [(1, 2, 3), "
                        "(0, 0, 0)])\ndef test_add(a, b, c):\n    assert add(a, b) == c\n\n"
                        "def test_type():\n"
                        "    with pytest.raises(TypeError):\n        add(1, 'x')\n"}
    if importlib.util.find_spec("pytest"):
        assert code(block(add), kodcode) == 1.0
        assert code(block("def add(a, b):\n    return a + b if a else 1"), kodcode) == 0.0
    io = {"cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5", "output": "10"}]}
    assert code(block("a, b = map(int, input().split())\nprint(a + b)"), io) == 1.0
    assert code(block("a, b = map(int, input().split())\nprint(a * b)"), io) == 0.0


def test_broken_sandbox_is_an_error_not_silent_zeros(monkeypatch):
    monkeypatch.setattr(code_mod, "_sandbox_checked", False)
    monkeypatch.setattr(code_mod, "run_python", lambda *a,
                        **k: run_python("raise ImportError('no python')",
                                                                            tests="pass",
                                                                           timeout=5))
    with pytest.raises(RuntimeError, match="cannot run even a correct program"):
        code(block("x = 1"), "assert x == 1")


def test_code_block_extraction():
    assert code_mod.extract_code("```python\nx = 1\n```\ntext\n```python\nx = 2\n```") == "x = 2\n"
    # labelled wins
    assert code_mod.extract_code("```python\nx = 1\n```\n```\nplain\n```") == "x = 1\n"
    assert code_mod.extract_code("```\nx = 3\n```") == "x = 3\n"
    assert code_mod.extract_code("```python\nx = 1\n```\n```python\nunclosed = True") == "x = 1\n"
    assert code_mod.extract_code("def f(): pass") is None
    assert code("no code block at all", "assert True") == 0.0
    with pytest.raises(ValueError, match="code reference"):
        code(block("x = 1"), {"nothing": 1})


# ------------------------------------------------------------------ code: adversarial programs

LIMIT = 2.0  # seconds of wall clock given to each adversarial run
SLACK = 2.5  # process start, kill and cleanup


def run_bad(src, tests="assert True", **kw):
    start = time.monotonic()
    result = run_python(src, tests=tests, timeout=LIMIT, **kw)
    elapsed = time.monotonic() - start
    assert not result.passed, result
    assert elapsed < LIMIT + SLACK, elapsed
    return result


def nobody_processes():
    """Processes of this process's sandbox runs (each run has its own uid in run_uids(), a slice of
    its own on each pytest worker)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            # not another trainer's on this machine
            if uid in run_uids() and belongs_to_us(pid):
                found.append(pid)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("src", [
    "while True:\n    pass",  # infinite loop
    "import time\ntime.sleep(1000)",
    "x = bytearray(10 ** 11)",  # huge allocation at once
    "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",  # growing allocation
    # fill the disk
    "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 10 ** 6)",
    "while True:\n    print('x' * 10000)",  # flood stdout
    "import os\nos._exit(0)",  # exit 0 before the tests run
    "import sys\nsys.exit(0)",
    # attack the harness
    "import signal, os\nos.kill(os.getppid(), signal.SIGKILL)\nraise SystemExit(0)",
], ids=["loop", "sleep", "alloc", "alloc_grow", "bigfile", "stdout_flood", "os_exit", "sys_exit",
        "kill_parent"])
def test_adversarial_programs_score_zero_in_bounded_time(src):
    run_bad(src)


def test_fork_bomb_is_contained_and_cleaned_up():
    before = set(nobody_processes())
    run_bad("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass")
    time.sleep(0.3)
    assert set(nobody_processes()) - before == set()
    # how many processes one run can hold at once: RLIMIT_NPROC (per uid nobody as root; per user
    # otherwise)
    counter = ("import os, time\nn = 0\nwhile n < 500:\n    try:\n        pid = os.fork()\n"
               "    except OSError:\n"
               "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
               "    n += 1\nCOUNT = n\n")
    result = run_python(counter, tests="assert COUNT >= 0\nprint('COUNT', COUNT)", timeout=LIMIT,
                        max_procs=16)
    assert result.passed, result.stderr
    assert int(result.stdout.split()[-1]) <= 16


@pytest.mark.parametrize("isolate", [True, False], ids=["sandbox", "no-namespaces"])
def test_escaped_background_process_is_killed(isolate):
    shared = tempfile.mkdtemp(prefix="gmts-escape-")
    # reachable by the run's uid (without bubblewrap; with it the folder is not there)
    os.chmod(shared, 0o777)
    beacon = os.path.join(shared, "beacon")
    src = (f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    while True:\n        try:\n"
           f"            with open({beacon!r}, 'a') as f:\n                f.write('x')\n"
           f"        except OSError:\n"
           f"            pass\n        time.sleep(0.05)\ntime.sleep(0.5)\n")
    before = set(nobody_processes())
    try:
        result = run_python(src, tests="assert True", timeout=LIMIT, isolate=isolate)
        assert result.passed  # the solution itself is fine; what it left behind must not survive
        size = os.path.getsize(beacon) if os.path.exists(beacon) else 0
        if not isolate:
            assert size > 0, "the background process never ran: the test proves nothing"
        time.sleep(0.5)
        assert (os.path.getsize(beacon) if os.path.exists(beacon) else 0) == size
        assert set(nobody_processes()) - before == set()
    finally:
        import shutil
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.skipif(os.getuid() != 0,
                    reason="file protection comes from dropping to uid nobody, which needs root")
def test_files_outside_the_sandbox_cannot_be_deleted_or_written(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.chmod(tmp_path, 0o755)
    os.chmod(victim, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    run_bad(f"import os, shutil\ntry:\n    os.remove({str(victim)!r})\nexcept OSError:\n    pass\n"
            f"open({str(victim)!r}, 'w').write('gone')")
    run_bad(f"import shutil\nshutil.rmtree({str(tmp_path)!r})")
    assert victim.read_text() == "keep"


def test_no_network():
    run_bad("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)")
    # the trainer's own loopback is out of reach (bwrap's namespace has a private `lo` of its own)
    import socket
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        run_bad(f"import socket\nc = socket.create_connection({server.getsockname()!r}, timeout=1)")
    assert sandbox_info()["net"] in ("namespace", "socket-patch")
    # the fallback when no network namespace can be made (e.g. a container without CAP_SYS_ADMIN)
    result = run_python("import socket\ntry:\n    socket.socket()\nexcept PermissionError as e:\n"
                        "    ERR = str(e)\n",
                        tests="assert 'disabled in the sandbox' in ERR", timeout=5, isolate=False)
    assert result.passed, result.stderr


SCAN = """import os
found = 'GMTS_TEST_SECRET' in os.environ
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            found = found or b'hunter2-gmts' in f.read()
    except OSError:
        pass
FOUND = found
"""


def test_trainer_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("GMTS_TEST_SECRET", "hunter2-gmts")
    scope = {}
    exec(SCAN, scope)  # noqa: S102
    assert scope["FOUND"]  # control: the scan does find the secret from the trainer's side
    scan = SCAN if os.getuid() == 0 else SCAN.split("for pid")[0] + "FOUND = found\n"
    # (without root the child is the trainer's user and can read /proc/<trainer>/environ: only
    # os.environ is checked)
    result = run_python(scan, tests="assert not FOUND, 'secret visible'", timeout=5)
    assert result.passed, result.stderr


def test_sandbox_reports_strength_and_cleans_its_directory():
    info = sandbox_info()
    if info["mode"] == "bwrap":
        assert info["caps"] == "0" * 16 and info["pid_namespace"] and info["net"] == "namespace"
        assert {"mnt", "pid", "net", "ipc", "uts", "user"} <= set(info["new_namespaces"])
    elif os.getuid() == 0:
        assert info["uid"] in run_uids() and info["pid_namespace"] and info["net"] == "namespace"
    ours = f"gmts-sandbox-{os.getpid()}-"        # not another pytest worker's
    before = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith(ours)}
    run_python("x = 1", tests="assert x == 1", timeout=5)
    run_python("x = 1", tests="assert x == 1", timeout=5, isolate=False)
    after = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith(ours)}
    assert after <= before


# ------------------------------------------------------------------ get_reward


def test_get_reward_options():
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("bleu")
    with pytest.raises(ValueError, match="takes no options"):
        get_reward("math", timeout=3)
    shaped = get_reward("math", format_bonus=0.1)
    assert shaped("\\boxed{3}", "4") == pytest.approx(0.1) and shaped("\\boxed{4}",
                                                                      "4") == pytest.approx(1.1)
    assert shaped("4", "4") == 0.0
    assert rewards.REWARD_NAMES == ("gsm8k", "math", "choice", "code")
    fast = get_reward("code", timeout=1.0)
    start = time.monotonic()
    assert fast(block("while True: pass"), "assert True") == 0.0
    assert time.monotonic() - start < 1.0 + SLACK


def test_score_batch_matches_one_by_one():
    good, bad = block("def add(a, b):\n    return a + b"), block("def add(a, b):\n    return a - b")
    names = ["code", "gsm8k", "code", "choice", "code", "math"]
    completions = [good, "so 12", bad, "(C)", good, "\\boxed{\\frac{1}{2}}"]
    references = [["assert add(2, 2) == 4"], "12", ["assert add(2, 2) == 4"], "C",
                  ["assert add(1, 1) == 2"], "0.5"]
    expected = [get_reward(n)(c, r) for n, c, r in zip(names, completions, references)]
    assert expected == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert rewards.score_batch(names, completions, references, workers=3) == expected
    with pytest.raises(ValueError, match="lengths differ"):
        rewards.score_batch(["math"], [], [])


def test_verifier_that_cannot_start_falls_back_with_a_warning(monkeypatch):
    verifier = math_mod._Verifier()
    # installed, as far as the parent can tell, but the helper dies at start
    verifier.available = True
    monkeypatch.setattr(math_mod.sys, "executable", "/bin/false")
    monkeypatch.setattr(math_mod, "_verifier", verifier)
    with pytest.warns(UserWarning, match="failed to start"):
        assert math_r("\\boxed{\\frac{\\sqrt3}{2}}", "\\frac{\\sqrt{3}}{2}") == 0.0
    assert verifier.available is False and math_r("\\boxed{\\sqrt{3}}", "\\sqrt{3}") == 1.0
