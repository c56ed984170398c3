"""The untrusted path is the real pytest (issue 30, kind 3): tests the trainer cannot judge itself
run under the installed pytest inside the sandbox (rewards/_pytest_runner.py), and its result is
read from a file the solution does not hold, marked with a token it does not know, against the tests
the trainer expects.

Each format as a class of cases: an honest solution scores 1.0, wrong ones 0.0; under trusted_only
the path is refused (0.0, not run). Then the forgeries: a fake result, exits, pytest or the plugin
patched, pytest-like output.
"""
import textwrap

import pytest

from gmts.rewards import code_stats, get_reward, sandbox, testplan
from gmts.rewards.sandbox import run_python

code = get_reward("code")
trusted_code = get_reward("code", trusted_only=True)
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = {"zero": "def add(a, b):\n    return 0\n",
         "off_by_one": "def add(a, b):\n    return a + b + (a == 2)\n",
         "exit": "import os\ndef add(a, b):\n    os._exit(0)\n"}


def block(src):
    return f"```python\n{src}\n```"


def t(src):
    return textwrap.dedent(src).strip() + "\n"


# Formats the trainer cannot judge itself (fixtures, setup hooks, pytest.param, marks, unittest by
# base, ...): each runs under pytest, and each tests add(2, 3) == 5 somewhere, so every wrong
# solution above fails it.
FORMATS = {
    "capsys_and_user_fixture": t("""
        import pytest
        @pytest.fixture
        def pair():
            return (2, 3)
        def test_printed(capsys, pair):
            print(add(*pair))
            assert capsys.readouterr().out == "5\\n"
        """),
    "setup_method_with_argument": t("""
        class TestAdd:
            def setup_method(self, method):
                self.name = method.__name__
                self.value = add(2, 3)
            def test_value(self):
                assert self.name == "test_value" and self.value == 5
        """),
    "setup_method_without_argument": t("""
        class TestAdd:
            def setup_method(self):
                self.value = add(2, 3)
            def test_value(self, request):
                assert self.value == 5
        """),
    "setup_class": t("""
        class TestAdd:
            @classmethod
            def setup_class(cls):
                cls.value = add(2, 3)
            def test_value(self, request):
                assert self.value == 5
            def test_again(self):
                assert add(1, 1) == 2
        """),
    "pytest_param_with_ids_and_marks": t("""
        import pytest
        @pytest.mark.parametrize("a, b, out", [
            pytest.param(2, 3, 5, id="small"),
            pytest.param(10, 20, 30, id="tens"),
            pytest.param(1, 1, 3, marks=pytest.mark.xfail(strict=True), id="wrong-on-purpose"),
        ])
        def test_add(a, b, out, capsys):
            assert add(a, b) == out
        """),
    "parametrize_keyword_arguments": t("""
        import pytest
        @pytest.mark.parametrize(argnames="a,b,out", argvalues=[(2, 3, 5), (0, 0, 0)],
                                 ids=["one", "two"])
        def test_add(a, b, out, tmp_path):
            assert add(a, b) == out
        """),
    "skip_and_xfail_marks": t("""
        import sys, pytest
        @pytest.mark.skip(reason="later")
        def test_later():
            assert add(2, 3) == 6
        @pytest.mark.skipif(sys.version_info < (3, 0), reason="py2")
        def test_now(capsys):
            assert add(2, 3) == 5
        @pytest.mark.xfail(reason="known")
        def test_known_bad(capsys):
            assert add(2, 2) == 5
        """),
    "isolated_asyncio_test_case": t("""
        import asyncio, unittest
        class AsyncAdd(unittest.IsolatedAsyncioTestCase):
            async def test_add(self):
                await asyncio.sleep(0)
                self.assertEqual(add(2, 3), 5)
        """),
    # a method of the class's own calling a builtin outside the safe list (the trainer judges
    # TestCases and inlines their helper methods: round 4's tests)
    "unittest_main_without_guard": t("""
        import unittest
        class Adding(unittest.TestCase):
            def setUp(self):
                self.value = self.compute()
            def compute(self):
                return add(2, 3) + hash(0)
            def test_add(self):
                self.assertEqual(self.value, 5)
        unittest.main()
        """),
    "redefined_test_replaces_the_earlier": t("""
        def test_add(request):
            assert add(2, 3) == 6
        def test_add(request):
            assert add(2, 3) == 5
        """),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_format_honest_scores_one_untrusted(fmt):
    plan = testplan.build_plan(FORMATS[fmt])
    assert plan.harness is not None and plan.harness_tests
    code_stats(reset=True)
    assert code(block(GOOD), FORMATS[fmt]) == 1.0
    assert trusted_code(block(GOOD), FORMATS[fmt]) == 0.0  # the untrusted path stays refused
    stats = code_stats()
    assert stats["untrusted_runs"] == 1 and stats["refused_runs"] == 1


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_format_wrong_scores_zero(fmt, wrong):
    assert code(block(WRONG[wrong]), FORMATS[fmt]) == 0.0
    assert trusted_code(block(WRONG[wrong]), FORMATS[fmt]) == 0.0


def test_redefined_trusted_test_replaces_the_earlier():
    # both definitions the trainer can judge itself: only the last is a test (as pytest collects it)
    tests = ("def test_add():\n    assert add(2, 3) == 6\n"
             "def test_add():\n    assert add(2, 3) == 5\n")
    assert testplan.build_plan(tests).harness is None
    assert code(block(GOOD), tests) == 1.0 and trusted_code(block(GOOD), tests) == 1.0
    assert code(block(WRONG["zero"]), tests) == 0.0


# a skip or xfail that does not come from the tests' own marks is a failure, whoever raised it
SKIPS = {
    "solution_skips": "import pytest\ndef add(a, b):\n    pytest.skip('no')\n",
    "solution_xfails": "import pytest\ndef add(a, b):\n    pytest.xfail('no')\n",
    "solution_unittest_skip": ("import unittest\ndef add(a, b):\n"
                               "    raise unittest.SkipTest('no')\n"),
    "skip_at_import": ("import pytest\npytest.skip('no', allow_module_level=True)\n"
                       "def add(a, b):\n    return 0\n"),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("skip", sorted(SKIPS))
def test_a_skip_the_solution_causes_scores_zero(fmt, skip):
    assert code(block(SKIPS[skip]), FORMATS[fmt]) == 0.0


def test_only_skipped_tests_is_not_a_pass():
    tests = t("""
        import pytest
        @pytest.mark.skip(reason="later")
        def test_later(capsys):
            assert add(2, 3) == 5
        """)
    assert code(block(GOOD), tests) == 0.0
    tests_in_code = ("import pytest\ndef test_now(capsys):\n"
                     "    pytest.skip('runtime skip in the tests')\n")
    assert code(block(GOOD), tests_in_code) == 0.0


HARNESS = FORMATS["capsys_and_user_fixture"]
FAKE_LINE = ('{"tests": {"gmts_tests.py::test_printed": "passed"}, "errors": 0, "collected": 1, '
             '"tampered": false, "exit": 0}')
FORGERIES = {
    "fake_result_on_every_fd": f"""
import os
line = ("0" * 32 + " " + {FAKE_LINE!r} + "\\n").encode()
for fd in range(3, 256):
    try:
        os.write(fd, line)
    except OSError:
        pass
def add(a, b):
    return 0
""",
    "fake_result_then_exit": f"""
import os
for fd in range(3, 256):
    try:
        os.write(fd, ({FAKE_LINE!r} + "\\n").encode())
    except OSError:
        pass
os._exit(0)
""",
    "exit_at_import": "import os\nos._exit(0)\n",
    "sys_exit_at_import": "import sys\nsys.exit(0)\n",
    "pytest_exit": "import pytest\ndef add(a, b):\n    pytest.exit('done', returncode=0)\n",
    "patch_runtest": ("import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
                      "def add(a, b):\n    return 0\n"),
    "patch_call_and_report": (
        "import _pytest.runner\n_orig = _pytest.runner.call_and_report\n"
        "def _fake(item, when, log=True, **kw):\n"
        "    return _orig(item, 'teardown' if when == 'call' else when, log, **kw)\n"
        "_pytest.runner.call_and_report = _fake\ndef add(a, b):\n    return 0\n"),
    "patch_report_outcome": (
        "import _pytest.reports\n_init = _pytest.reports.TestReport.__init__\n"
        "def _pass(self, *a, **k):\n    _init(self, *a, **k)\n    self.outcome = 'passed'\n"
        "_pytest.reports.TestReport.__init__ = _pass\ndef add(a, b):\n    return 0\n"),
    "register_a_plugin": (
        "import gc, pytest\n"
        "class P:\n"
        "    @pytest.hookimpl(wrapper=True, tryfirst=True)\n"
        "    def pytest_runtest_makereport(self, item, call):\n"
        "        call.excinfo = None\n"
        "        return (yield)\n"
        "for o in gc.get_objects():\n"
        "    if type(o).__name__ == 'PytestPluginManager':\n"
        "        o.register(P())\n"
        "def add(a, b):\n    return 0\n"),
    "patch_assertion_rewrite_builtins": ("import builtins\n"
                                         "builtins.AssertionError = type('E', (Exception,), {})\n"
                                         "def add(a, b):\n    return 0\n"),
    "pytest_like_output": ("import sys\nprint('1 passed in 0.01s')\nsys.stdout.flush()\n"
                           "def add(a, b):\n    print('=== 1 passed ===')\n    return 0\n"),
    "patch_the_runner_module": (
        "import sys\nsys.modules['__main__'].make_plugin = lambda *a: None\n"
        "def add(a, b):\n    return 0\n"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_forgeries_score_zero(forgery):
    assert code(block(FORGERIES[forgery]), HARNESS) == 0.0
    assert trusted_code(block(FORGERIES[forgery]), HARNESS) == 0.0


@pytest.mark.parametrize("forgery", ["patch_runtest", "patch_report_outcome", "register_a_plugin"])
def test_patching_pytest_makes_it_report_a_pass_and_is_seen(forgery):
    # the patch works (pytest reports the wrong solution's test passed), and the runner says it was
    # tampered with
    plan = testplan.build_plan(HARNESS)
    spec = {"solution": FORGERIES[forgery], "setup": "", "units": [u.steps for u in plan.units],
            "harness": {"source": sandbox.pytest_source(plan, ""), "token": "t" * 32}}
    run = sandbox.run_child(spec, parse=False)
    assert run.pytest.startswith("t" * 32 + " ")
    assert '"test_printed": "passed"' in run.pytest.replace("gmts_tests.py::", "")
    assert '"tampered": true' in run.pytest


THEIR_PATCH = {  # the tests replace a builtin for the test's time: under pytest, theirs to do
    "monkeypatch_by_name": ("def test_add(monkeypatch):\n"
                            "    monkeypatch.setattr('builtins.input', lambda *a: '3')\n"
                            "    assert add(2, int(input())) == 5\n"),
    "monkeypatch_of_the_module": ("import builtins\n\ndef test_add(monkeypatch):\n"
                                  "    monkeypatch.setattr(builtins, 'input', lambda *a: '3')\n"
                                  "    monkeypatch.setattr(builtins, 'print', lambda *a: None)\n"
                                  "    assert add(2, int(input())) == 5\n"),
    "a_patcher_started_in_setup": (
        "from unittest.mock import patch\n\nclass TestAdd:\n    def setup_method(self, m):\n"
        "        self.p = patch('builtins.input', return_value='3')\n        self.p.start()\n\n"
        "    def teardown_method(self, m):\n        self.p.stop()\n\n"
        "    def test_add(self):\n        assert add(2, int(input())) == 5\n"),
}
ANOTHER_BUILTIN = ("import builtins\ndef add(a, b):\n    builtins.bin = lambda *x: '0b0'\n"
                   "    return a + b\n")


@pytest.mark.parametrize("name", sorted(THEIR_PATCH))
def test_a_builtin_the_tests_replace_is_not_tampering(name):
    """A builtin the test file replaces itself (monkeypatch, undone only at teardown; a patcher
    started in setup_method) is the tests' to change: under the harness an honest answer passes,
    as under pytest; a builtin the tests do not replace, changed by the solution, is still
    tampering."""
    from test_code_reward_round5 import verdict
    tests = THEIR_PATCH[name]
    assert testplan.build_plan(tests).harness is not None
    answers = (GOOD, WRONG["zero"], ANOTHER_BUILTIN)
    assert [verdict(THEIR_PATCH, answers, name, a) for a in answers] == [1.0, 0.0, 1.0]
    assert [code(block(a), tests) for a in answers] == [1.0, 0.0, 0.0]


def test_the_result_needs_the_runs_token_and_every_expected_test():
    plan = testplan.build_plan(HARNESS)
    token = "a" * 32
    # a line per phase as reported, then the summary
    reports = "".join(f'{token} {{"report": ["gmts_tests.py::test_printed", "{when}", "passed"]}}\n'
                      for when in ("setup", "call", "teardown"))
    good = reports + token + " " + FAKE_LINE + "\n"
    assert testplan.pytest_verdict(plan, good, token)
    assert not testplan.pytest_verdict(plan, good, "b" * 32)  # another run's token
    assert not testplan.pytest_verdict(plan, good + good, token)  # two summaries
    # the summary alone, or one that says otherwise than the reports (a thread rewriting the
    # runner's records after the reports): the reports, written when made, decide
    assert not testplan.pytest_verdict(plan, token + " " + FAKE_LINE + "\n", token)
    failed = good.replace('"call", "passed"', '"call", "failed"')
    assert not testplan.pytest_verdict(plan, failed, token)
    for line in ('{"tampered": true}', '{"error": "gmts_tests.py"}'):  # written when found
        assert not testplan.pytest_verdict(plan, f"{token} {line}\n" + good, token)
    assert not testplan.pytest_verdict(plan, good.replace(token, "b" * 32, 1), token)
    verdict = testplan.pytest_verdict
    assert not verdict(plan, good.replace('"collected": 1', '"collected": 2'), token)
    assert not verdict(plan, good.replace("test_printed", "test_other"), token)  # extra
    assert not verdict(plan, good.replace('"tampered": false', '"tampered": true'), token)
    assert not testplan.pytest_verdict(plan, good.replace('"exit": 0', '"exit": 1'), token)
    assert not testplan.pytest_verdict(plan, good.replace('"passed"', '"failed"'), token)
    assert not testplan.pytest_verdict(plan, good[:-5] + "\n", token)  # unparsable
    missing = good.replace('{"gmts_tests.py::test_printed": "passed"}', "{}")
    missing = missing.replace('"collected": 1', '"collected": 0')
    assert not testplan.pytest_verdict(plan, missing, token)


def test_helpers_the_solution_names_test_are_not_collected():
    # a solution with its own test_* function and TestCase: the tests import every name of the
    # solution's, and pytest would collect them; they are not the tests' own and are deselected
    sol = GOOD + ("import unittest\ndef test_mine():\n    assert False\n"
                  "class MyTests(unittest.TestCase):\n    def test_x(self):\n        self.fail()\n")
    assert code(block(sol), HARNESS) == 1.0


def test_run_python_reports_the_run_untrusted():
    result = run_python(GOOD, tests=HARNESS)
    assert result.passed and not result.trusted and result.cases_untrusted >= 1


def test_what_the_tests_print_reaches_the_runs_stdout_and_failures_its_stderr():
    # the pytest path's output is the run's, as in a plain run: module-level prints of the tests
    # and the solution on stdout, what failed (the test and pytest's reason) on stderr
    tests = "import os\nprint('TESTS', os.getpid() > 0)\n" + HARNESS
    result = run_python(GOOD + "print('SOLUTION')\n", tests=tests)
    assert result.passed and not result.trusted
    assert result.stdout.split() == ["SOLUTION", "TESTS", "True"]
    assert result.stderr == ""
    wrong = run_python(WRONG["zero"], tests=HARNESS)
    assert not wrong.passed
    assert "test_printed call" in wrong.stderr and "assert" in wrong.stderr


def test_a_run_wholly_under_pytest_runs_the_solution_once():
    # nothing left for the child to evaluate: the solution is not run a second time (it would
    # spend the run's time again, and what it left behind, processes included, would meet itself)
    sol = GOOD + "import os\nwith open('ran.txt', 'a') as f:\n    f.write('x')\n"
    tests = HARNESS + "def test_once():\n    assert open('ran.txt').read() == 'x'\n"
    assert run_python(sol, tests=tests).passed
    twice = tests.replace("def test_once", "assert add(1, 1) == 2\ndef test_once")
    result = run_python(sol + "print(open('ran.txt').read())\n", tests=twice)
    assert result.stdout.split() == ["x", "xx"]  # the child runs it again for its own units
