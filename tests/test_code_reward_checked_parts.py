"""numpy.testing's asserts and the parts of a raised exception a test checks, judged by the trainer
under trusted_only (issue 53): each verdict is the real runner's on the same program (pytest on a
test file, unittest on a TestCase module, run here as the reference), in both modes; an answer that
fools that runner (an ndarray subclass's `__eq__`, a message that is a str subclass) scores 0.
"""
import subprocess
import sys

import pytest
from test_code_reward_round5 import PLAIN_PYTEST, block, scores

from gmts.rewards import testplan


def runner_passes(tmp_path, solution: str, tests: str) -> bool:
    """The real runner on the program (solution, then tests) in a file of its own: unittest for a
    TestCase module, else pytest."""
    path = tmp_path / "test_program.py"
    path.write_text(solution + "\n" + tests)
    if "unittest.TestCase" in tests:
        command = [sys.executable, "-m", "unittest", "test_program"]
    else:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                   "no:xdist", str(path)]
    run = subprocess.run(command, check=False, capture_output=True, text=True, cwd=tmp_path,
                         timeout=120, env=PLAIN_PYTEST)
    return run.returncode == 0


def judged_here(tests: str) -> bool:
    plan = testplan.build_plan(tests, None)
    return plan.harness is None and plan.untrusted == 0 and plan.trusted > 0


# ------------------------------------------------ numpy.testing's asserts

NP = "import numpy as np\n\n"
UT = "import unittest\nimport numpy as np\n\nclass TestCases(unittest.TestCase):\n"

# name -> (tests, solution): the runner's verdict is the expected one
NUMPY = {
    "array_equal_honest": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n",
        "import numpy as np\ndef f(n):\n    return np.arange(n)\n"),
    "array_equal_wrong": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n",
        "import numpy as np\ndef f(n):\n    return np.arange(1, n + 1)\n"),
    "array_equal_a_list": (  # a list against an array: numpy compares the values
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n",
        "def f(n):\n    return list(range(n))\n"),
    "array_equal_scalar_desired": (  # a scalar broadcasts, as numpy allows
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), 0)\n",
        "import numpy as np\ndef f(n):\n    return np.zeros(n)\n"),
    "array_equal_shape_that_broadcasts": (  # (3, 1) against (3,): a shape mismatch
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 0, 0]))\n",
        "import numpy as np\ndef f(n):\n    return np.zeros((n, 1), dtype=int)\n"),
    "array_equal_nan_positions": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(), [1.0, np.nan])\n",
        "def f():\n    return [1.0, float('nan')]\n"),
    "array_equal_nan_moved": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(), [1.0, np.nan])\n",
        "def f():\n    return [float('nan'), 1.0]\n"),
    "array_equal_nan_for_a_number": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(), [1.0, 2.0])\n",
        "def f():\n    return [1.0, float('nan')]\n"),
    # |actual - desired| <= atol + rtol * |desired|: 0.0005 <= 1e-3 * 1, 0.0015 <= 1e-3 * 2
    "allclose_inside": (
        NP + "def test_f():\n    np.testing.assert_allclose(f(), [1.0, 2.0], rtol=1e-3, atol=0)\n",
        "def f():\n    return [1.0005, 2.0015]\n"),
    # 0.0025 > 1e-3 * 2
    "allclose_outside": (
        NP + "def test_f():\n    np.testing.assert_allclose(f(), [1.0, 2.0], rtol=1e-3, atol=0)\n",
        "def f():\n    return [1.0005, 2.0025]\n"),
    # atol alone: |1e-9 - 0| <= 1e-8
    "allclose_atol": (
        NP + "def test_f():\n    np.testing.assert_allclose(f(), 0.0, atol=1e-8)\n",
        "import numpy as np\ndef f():\n    return np.full(4, 1e-9)\n"),
    # the default rtol=1e-7, atol=0: 1e-9 against 0 fails
    "allclose_default_tolerance": (
        NP + "def test_f():\n    np.testing.assert_allclose(f(), [0.0])\n",
        "def f():\n    return [1e-9]\n"),
    # decimal=2: |desired - actual| < 1.5 * 10**-2; 0.014 passes, 0.016 does not
    "array_almost_equal_inside": (
        NP + "def test_f():\n    np.testing.assert_array_almost_equal(f(), [1.0], decimal=2)\n",
        "def f():\n    return [1.014]\n"),
    "array_almost_equal_outside": (
        NP + "def test_f():\n    np.testing.assert_array_almost_equal(f(), [1.0], decimal=2)\n",
        "def f():\n    return [1.016]\n"),
    "almost_equal_scalar": (
        ("from numpy.testing import assert_almost_equal\n\n"
         "def test_f():\n    assert_almost_equal(f(), 3.14159265, decimal=7)\n"),
        "import math\ndef f():\n    return math.pi\n"),
    "almost_equal_scalar_wrong": (
        ("from numpy.testing import assert_almost_equal\n\n"
         "def test_f():\n    assert_almost_equal(f(), 3.14159265, decimal=7)\n"),
        "def f():\n    return 3.1416\n"),
    "assert_equal_nested": (
        ("import numpy.testing as npt\n\n"
         "def test_f():\n    npt.assert_equal(f(), {'a': [1, 2], 'b': float('nan')})\n"),
        "def f():\n    return {'a': [1, 2], 'b': float('nan')}\n"),
    "assert_equal_nested_wrong": (
        ("import numpy.testing as npt\n\n"
         "def test_f():\n    npt.assert_equal(f(), {'a': [1, 2], 'b': float('nan')})\n"),
        "def f():\n    return {'a': [1, 3], 'b': float('nan')}\n"),
    "from_import_inside_the_test": (
        ("def test_f():\n    from numpy.testing import assert_allclose\n"
         "    assert_allclose(f(2), [0.5, 0.25])\n"),
        "def f(n):\n    return [1 / 2 ** k for k in range(1, n + 1)]\n"),
    "import_numpy_testing": (
        ("import numpy.testing\n\n"
         "def test_f():\n    numpy.testing.assert_array_equal(f(2), [[1, 0], [0, 1]])\n"),
        "import numpy as np\ndef f(n):\n    return np.eye(n, dtype=int)\n"),
    "unittest_methods": (
        UT + "    def setUp(self):\n        self.expected = np.array([[1.0, 2.0], [3.0, 4.0]])\n"
        "    def test_close(self):\n"
        "        np.testing.assert_allclose(task_func(2), self.expected, rtol=1e-5)\n"
        "    def test_equal(self):\n"
        "        np.testing.assert_array_equal(task_func(1), np.array([[1.0]]))\n",
        ("import numpy as np\ndef task_func(n):\n"
         "    return np.arange(1, n * n + 1, dtype=float).reshape(n, n)\n")),
    "unittest_methods_wrong": (
        UT + "    def setUp(self):\n        self.expected = np.array([[1.0, 2.0], [3.0, 4.0]])\n"
        "    def test_close(self):\n"
        "        np.testing.assert_allclose(task_func(2), self.expected, rtol=1e-5)\n"
        "    def test_equal(self):\n"
        "        np.testing.assert_array_equal(task_func(1), np.array([[1.0]]))\n",
        ("import numpy as np\ndef task_func(n):\n"
         "    return np.arange(1, n * n + 1, dtype=float).reshape(n, n).T\n")),
    "object_array_honest": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(), np.array([1, 'a', None], "
        "dtype=object))\n",
        "import numpy as np\ndef f():\n    return np.array([1, 'a', None], dtype=object)\n"),
    "object_array_of_lists": (
        NP + "def test_f():\n    np.testing.assert_equal(f().shape, (2,))\n"
        "    np.testing.assert_equal(f()[1], [3, 4])\n",
        ("import numpy as np\ndef f():\n    a = np.empty(2, dtype=object)\n"
         "    a[0], a[1] = [1, 2], [3, 4]\n    return a\n")),
    # an array the tests pass in: rebuilt in the child by its numpy, one object for the test (an
    # in-place change is what the test reads afterwards, as under pytest)
    "array_input_not_changed": (
        NP + "def test_f():\n    x = np.array([3, 1, 2])\n"
        "    np.testing.assert_array_equal(f(x), np.array([1, 2, 3]))\n"
        "    np.testing.assert_array_equal(x, [3, 1, 2])\n",
        "import numpy as np\ndef f(x):\n    return np.sort(x)\n"),
    "array_input_sorted_in_place_wrong": (
        NP + "def test_f():\n    x = np.array([3, 1, 2])\n"
        "    np.testing.assert_array_equal(f(x), np.array([1, 2, 3]))\n"
        "    np.testing.assert_array_equal(x, [3, 1, 2])\n",
        "def f(x):\n    x.sort()\n    return x\n"),
    "array_input_changed_in_place": (
        NP + "def test_f():\n    x = np.array([[3.0, 1.0]])\n    f(x)\n"
        "    np.testing.assert_array_equal(x, [[1.0, 3.0]])\n",
        "def f(x):\n    x.sort()\n"),
    "array_input_changed_in_place_wrong": (
        NP + "def test_f():\n    x = np.array([[3.0, 1.0]])\n    f(x)\n"
        "    np.testing.assert_array_equal(x, [[1.0, 3.0]])\n",
        "import numpy as np\ndef f(x):\n    return np.sort(x)\n"),
    "unittest_array_inputs": (
        UT + "    def setUp(self):\n        self.data = np.array([[1.0, 2.0], [3.0, 4.0]])\n"
        "    def test_mean(self):\n        np.testing.assert_allclose(task_func(self.data), "
        "self.data.mean(axis=0))\n"
        "    def test_empty_rows(self):\n        np.testing.assert_array_equal("
        "task_func(np.zeros((1, 2))), [0.0, 0.0])\n",
        "import numpy as np\ndef task_func(a):\n    return a.mean(axis=0)\n"),
    "unittest_array_inputs_wrong": (
        UT + "    def setUp(self):\n        self.data = np.array([[1.0, 2.0], [3.0, 4.0]])\n"
        "    def test_mean(self):\n        np.testing.assert_allclose(task_func(self.data), "
        "self.data.mean(axis=0))\n",
        "import numpy as np\ndef task_func(a):\n    return a.mean(axis=1)\n"),
}

# answers that the runner passes although they are wrong: an ndarray subclass or an item whose
# comparison says equal, judged here on the data (a subclass or an object is not data: 0)
FOOLS_THE_RUNNER = {
    "ndarray_subclass_eq": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n",
        ("import numpy as np\nclass A(np.ndarray):\n    def __eq__(self, other):\n"
         "        return np.ones(self.shape, dtype=bool)\n"
         "def f(n):\n    return np.full(n, 7).view(A)\n")),
    "ndarray_subclass_ufunc": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n",
        ("import numpy as np\nclass A(np.ndarray):\n"
         "    def __array_ufunc__(self, ufunc, method, *args, **kwargs):\n"
         "        nan = ufunc in (np.isnan, np.isinf, np.isfinite, np.isnat)\n"
         "        return np.full(self.shape, not nan)\n"
         "def f(n):\n    return np.full(n, 7).view(A)\n")),
    "object_array_of_equal_to_all": (
        NP + "def test_f():\n    np.testing.assert_array_equal(f(3), np.array([0, 1, 2]))\n",
        ("import numpy as np\nclass Any:\n    def __eq__(self, other):\n        return True\n"
         "    __hash__ = None\n"
         "def f(n):\n    a = np.empty(n, dtype=object)\n    a[:] = [Any() for _ in range(n)]\n"
         "    return a\n")),
}


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_numpy_testing_as_the_runner_judges(tmp_path, name):
    tests, solution = NUMPY[name]
    assert judged_here(tests)
    want = 1.0 if runner_passes(tmp_path, solution, tests) else 0.0
    assert want == (0.0 if name.endswith(("wrong", "outside")) or name in {
        "array_equal_shape_that_broadcasts", "array_equal_nan_moved",
        "array_equal_nan_for_a_number", "allclose_default_tolerance"} else 1.0)
    assert scores(block(solution), tests) == (want, want)


@pytest.mark.parametrize("tests", [
    NP + "np.testing.assert_allclose(f(3), [0.0, 0.5, 1.0])\n",
    "from numpy.testing import assert_array_equal\n\nassert_array_equal(f(3), [0.0, 0.5, 1.0])\n",
])
def test_numpy_testing_at_module_level_as_a_script_runs(tests):
    """A module-level comparison (MBPP's harness runs the program): one case the trainer judges."""
    assert judged_here(tests)
    honest = "def f(n):\n    return [i / (n - 1) for i in range(n)]\n"
    wrong = "def f(n):\n    return [i / n for i in range(n)]\n"
    for solution, want in ((honest, 1.0), (wrong, 0.0)):
        ran = subprocess.run([sys.executable, "-c", solution + tests], capture_output=True,
                             timeout=120, check=False)
        assert (ran.returncode == 0) == (want == 1.0), ran.stderr
        assert scores(block(solution), tests) == (want, want)


def test_other_numpy_testing_names_stay_with_pytest():
    """assert_raises calls what it is given (a solution's callable): not judged here."""
    tests = NP + "def test_f():\n    np.testing.assert_raises(ValueError, f, -1)\n"
    assert not judged_here(tests)
    honest = "def f(x):\n    if x < 0:\n        raise ValueError\n    return x\n"
    assert scores(block(honest), tests) == (1.0, 0.0)  # pytest's; refused under trusted_only


# ------------------------------------------------ the caught exception's parts

NEG = "def f(x):\n    if x < 0:\n        raise ValueError(f'negative: {x}')\n    return x\n"
NEG_WRONG = NEG.replace("negative:", "below zero:")
RAISES = "import pytest\n\ndef test_neg():\n    with pytest.raises(ValueError) as excinfo:\n" \
         "        f(-1)\n"
SUB = "class Neg(ValueError):\n    pass\n" + NEG.replace("raise ValueError", "raise Neg")
ASSERT_RAISES = ("import unittest\n\nclass TestCases(unittest.TestCase):\n"
                 "    def test_neg(self):\n        with self.assertRaises(ValueError) as cm:\n"
                 "            f(-1)\n")
OSERR = ("import os\ndef g(path):\n    if not path.startswith('/'):\n"
         "        raise FileNotFoundError(2, os.strerror(2), path)\n    return path\n")
EXIT = "import sys\ndef main(args):\n    if not args:\n        sys.exit(2)\n    return 0\n"

NOTED = ("def f(x):\n    if x < 0:\n        err = ValueError(f'negative: {x}')\n"
         "        err.add_note('hint: use abs')\n        raise err\n    return x\n")
MATCH_HINT = ("import pytest\n\ndef test_neg():\n"
              "    with pytest.raises(ValueError, match='hint: use abs'):\n        f(-1)\n")
LONG = ("def check(rows):\n    bad = [r for r in rows if r < 0]\n    if bad:\n"
        "        raise ValueError('bad rows: ' + ', '.join(map(str, bad)))\n")
LONG_MATCH = ("import pytest\n\ndef test_many():\n"
              "    with pytest.raises(ValueError, match=r'^bad rows: -1, -2'):\n"
              "        check([-i for i in range(1, 5000)])\n")    # a message of 28,000 characters

# name -> (tests, solution); the runner's verdict is the expected one
CAUGHT = {
    "pytest_str_in": (RAISES + "    assert 'negative' in str(excinfo.value)\n", NEG),
    "pytest_str_in_wrong": (RAISES + "    assert 'negative' in str(excinfo.value)\n",
                            NEG_WRONG),
    "pytest_args": (RAISES + "    assert excinfo.value.args == ('negative: -1',)\n", NEG),
    "pytest_args_wrong": (RAISES + "    assert excinfo.value.args == ('negative: -1',)\n",
                          NEG.replace("{x}')", "{x}', x)")),
    "pytest_match_statement": (RAISES + "    excinfo.match(r'^negative: -\\d$')\n", NEG),
    "pytest_match_statement_wrong": (RAISES + "    excinfo.match(r'^negative: -\\d$')\n",
                                     NEG_WRONG),
    "pytest_match_asserted": (RAISES + "    assert excinfo.match('neg')\n", NEG),
    "pytest_repr": (RAISES + "    assert repr(excinfo.value) == \"ValueError('negative: -1')\"\n",
                    NEG),
    "pytest_repr_of_a_subclass_wrong": (
        RAISES + "    assert repr(excinfo.value) == \"ValueError('negative: -1')\"\n",
        "class Neg(ValueError):\n    pass\n" + NEG.replace("raise ValueError", "raise Neg")),
    "pytest_errno_filename": (
        ("import pytest\n\ndef test_missing():\n    with pytest.raises(OSError) as e:\n"
         "        g('missing')\n    assert e.value.errno == 2\n"
         "    assert e.value.filename == 'missing'\n"), OSERR),
    "pytest_errno_wrong": (
        ("import pytest\n\ndef test_missing():\n    with pytest.raises(OSError) as e:\n"
         "        g('missing')\n    assert e.value.errno == 2\n"),
        OSERR.replace("(2, os.strerror(2)", "(13, 'denied'")),
    "pytest_exit_code": (
        ("import pytest\n\ndef test_usage():\n    with pytest.raises(SystemExit) as e:\n"
         "        main([])\n    assert e.value.code == 2\n"), EXIT),
    "pytest_exit_code_wrong": (
        ("import pytest\n\ndef test_usage():\n    with pytest.raises(SystemExit) as e:\n"
         "        main([])\n    assert e.value.code == 2\n"), EXIT.replace("exit(2)", "exit(1)")),
    "pytest_two_blocks_one_name": (
        RAISES + "    assert str(excinfo.value) == 'negative: -1'\n"
        "    with pytest.raises(ValueError) as excinfo:\n        f(-2)\n"
        "    assert str(excinfo.value) == 'negative: -2'\n", NEG),
    # the raised class itself: `excinfo.type` against a builtin exception class, its typename
    "pytest_type_is": (RAISES + "    assert excinfo.type is ValueError\n", NEG),
    "pytest_type_is_a_subclass_wrong": (RAISES + "    assert excinfo.type is ValueError\n", SUB),
    "pytest_type_equal_reversed": (RAISES + "    assert ValueError == excinfo.type\n", NEG),
    "pytest_type_equal_a_subclass_wrong": (RAISES + "    assert ValueError == excinfo.type\n",
                                           SUB),
    "pytest_type_is_not": (RAISES + "    assert excinfo.type is not KeyError\n", NEG),
    "pytest_type_is_not_wrong": (RAISES + "    assert excinfo.type is not ValueError\n", NEG),
    "pytest_typename": (RAISES + "    assert excinfo.typename == 'ValueError'\n", NEG),
    "pytest_typename_of_a_subclass_wrong": (RAISES + "    assert excinfo.typename == "
                                            "'ValueError'\n", SUB),
    "pytest_typename_of_a_subclass": (RAISES + "    assert excinfo.typename == 'Neg'\n", SUB),
    # the caught exception's class: type() compared, isinstance, assertIsInstance
    "pytest_issubclass": (RAISES + "    assert issubclass(excinfo.type, ValueError)\n", SUB),
    "pytest_issubclass_a_tuple": (RAISES + "    assert issubclass(excinfo.type, (KeyError, "
                                  "ArithmeticError, Exception))\n", NEG),
    "pytest_issubclass_wrong": (RAISES + "    assert issubclass(excinfo.type, LookupError)\n",
                                SUB),
    "pytest_type_of_the_value": (RAISES + "    assert type(excinfo.value) is ValueError\n", NEG),
    "pytest_type_of_the_value_a_subclass_wrong": (RAISES + "    assert type(excinfo.value) is "
                                                  "ValueError\n", SUB),
    "pytest_isinstance_a_tuple": (RAISES + "    assert isinstance(excinfo.value, (KeyError, "
                                  "ValueError))\n", SUB),
    "pytest_isinstance_wrong": (RAISES + "    assert isinstance(excinfo.value, KeyError)\n", NEG),
    "unittest_type_equal": (ASSERT_RAISES + "        self.assertEqual(type(cm.exception), "
                            "ValueError)\n", NEG),
    "unittest_type_equal_a_subclass_wrong": (ASSERT_RAISES + "        self.assertEqual(type("
                                             "cm.exception), ValueError)\n", SUB),
    "unittest_type_is": (ASSERT_RAISES + "        self.assertIs(type(cm.exception), "
                         "ValueError)\n", NEG),
    "unittest_is_instance": (ASSERT_RAISES + "        self.assertIsInstance(cm.exception, "
                             "ValueError)\n", SUB),
    "unittest_not_is_instance_wrong": (ASSERT_RAISES + "        self.assertNotIsInstance("
                                       "cm.exception, ValueError)\n", NEG),
    "unittest_assert_true_isinstance": (
        ASSERT_RAISES.replace("assertRaises(ValueError)", "assertRaises(LookupError)")
        + "        self.assertTrue(isinstance(cm.exception, LookupError))\n",
        NEG.replace("raise ValueError", "raise KeyError")),
    "unittest_str_equal": (ASSERT_RAISES + "        self.assertEqual(str(cm.exception), "
                           "'negative: -1')\n", NEG),
    "unittest_str_equal_wrong": (ASSERT_RAISES + "        self.assertEqual(str(cm.exception), "
                                 "'negative: -1')\n", NEG_WRONG),
    "unittest_assert_in": (ASSERT_RAISES + "        self.assertIn('negative', "
                           "str(cm.exception))\n", NEG),
    "unittest_args_item": (ASSERT_RAISES + "        self.assertEqual(cm.exception.args[0], "
                           "'negative: -1')\n", NEG),
    "unittest_args_item_wrong": (ASSERT_RAISES + "        self.assertEqual(cm.exception.args[0], "
                                 "'negative: -1')\n", NEG.replace("f'negative: {x}'", "x")),
    "unittest_regex_as": (
        ("import unittest\n\nclass TestCases(unittest.TestCase):\n    def test_neg(self):\n"
         "        with self.assertRaisesRegex(ValueError, 'neg') as cm:\n            f(-1)\n"
         "        self.assertEqual(cm.exception.args, ('negative: -1',))\n"), NEG),
    "unittest_key_error_str": (
        ("import unittest\n\nclass TestCases(unittest.TestCase):\n    def test_k(self):\n"
         "        with self.assertRaises(KeyError) as cm:\n            h({}, 'k')\n"
         "        self.assertEqual(str(cm.exception), \"'k'\")\n"),
        "def h(d, k):\n    return d[k]\n"),
    # PEP 678's notes: pytest's `match` searches the message and its notes (stringify_exception),
    # unittest's assertRaisesRegex the message alone
    "pytest_match_a_note": (MATCH_HINT, NOTED),
    "pytest_match_a_note_wrong": (MATCH_HINT, NEG),
    "pytest_match_a_note_not_a_str_wrong": (MATCH_HINT, NOTED.replace("('hint: use abs')",
                                                                      "(('hint: use abs',))")),
    "pytest_excinfo_match_a_note": (RAISES + "    excinfo.match('use abs$')\n", NOTED),
    "unittest_regex_reads_no_note_wrong": (
        ("import unittest\n\nclass TestCases(unittest.TestCase):\n    def test_neg(self):\n"
         "        with self.assertRaisesRegex(ValueError, 'hint'):\n            f(-1)\n"), NOTED),
    "unittest_regex_callable_reads_no_note_wrong": (
        ("import unittest\n\nclass TestCases(unittest.TestCase):\n    def test_neg(self):\n"
         "        self.assertRaisesRegex(ValueError, 'hint', f, -1)\n"), NOTED),
    "unittest_regex_callable": (
        ("import unittest\n\nclass TestCases(unittest.TestCase):\n    def test_neg(self):\n"
         "        self.assertRaisesRegex(ValueError, 'negative', f, -1)\n"), NOTED),
    # a long message (a value listed in it), matched as a short one
    "pytest_match_a_long_message": (LONG_MATCH, LONG),
    "pytest_match_a_long_message_wrong": (LONG_MATCH, LONG.replace("'bad rows: '", "'rows: '")),
    "unittest_exit_code_wrong": (
        ("import unittest\n\nclass TestCases(unittest.TestCase):\n    def test_usage(self):\n"
         "        with self.assertRaises(SystemExit) as cm:\n            main([])\n"
         "        self.assertEqual(cm.exception.code, 2)\n"), EXIT.replace("exit(2)", "exit('2')")),
}

# a message, or an item of args, that is a str subclass saying "equal" and "contains" to all: the
# runner is fooled; the trainer gets no str (only exact types cross) and fails the test
LIAR = ("class S(str):\n    def __eq__(self, other):\n        return True\n"
        "    def __contains__(self, other):\n        return True\n    __hash__ = str.__hash__\n")
CAUGHT_FOOLS_THE_RUNNER = {
    # a class of the solution's bound to the builtin's name: in one program the tests' name is it
    "a_class_named_alike": (
        ASSERT_RAISES.replace("assertRaises(ValueError)", "assertRaises(Exception)")
        + "        self.assertIsInstance(cm.exception, ValueError)\n",
        "class ValueError(Exception):\n    pass\n" + NEG),
    "dunder_str": (RAISES + "    assert 'negative' in str(excinfo.value)\n",
                   LIAR + "class E(ValueError):\n    def __str__(self):\n"
                   "        return S('wrong')\n"
                   + NEG_WRONG.replace("raise ValueError", "raise E")),
    "str_property": (ASSERT_RAISES + "        self.assertEqual(str(cm.exception), "
                     "'negative: -1')\n",
                     LIAR + "class E(ValueError):\n"
                     "    __str__ = property(lambda self: lambda: S('wrong'))\n"
                     + NEG_WRONG.replace("raise ValueError", "raise E")),
    "args_item": (ASSERT_RAISES + "        self.assertEqual(cm.exception.args[0], "
                  "'negative: -1')\n", LIAR + NEG_WRONG.replace("f'below", "S(f'below")
                  .replace("{x}')", "{x}'))")),
    "args_property": (RAISES + "    assert excinfo.value.args == ('negative: -1',)\n",
                      LIAR + "class E(ValueError):\n"
                      "    args = property(lambda self: (S('wrong'),))\n"
                      + NEG_WRONG.replace("raise ValueError", "raise E")),
}

# uses of the caught exception the trainer does not judge: pytest's (refused under trusted_only)
CAUGHT_REFUSED = {
    "type_a_subclass_of_a_class_not_an_exception": RAISES + "    assert issubclass(excinfo.type, "
                                                   "object)\n",
    "type_against_a_class_not_builtin": ("import pytest\nimport json\n\ndef test_neg():\n"
                                         "    with pytest.raises(ValueError) as excinfo:\n"
                                         "        f(-1)\n"
                                         "    assert excinfo.type is json.JSONDecodeError\n"),
    "name_of_the_type": ASSERT_RAISES + "        self.assertEqual(type(cm.exception).__name__, "
                        "'ValueError')\n",
    "isinstance_of_a_class_not_an_exception": ASSERT_RAISES + "        self.assertIsInstance("
                                              "cm.exception, object)\n",
    "the_info_itself": RAISES + "    assert 'negative' in str(excinfo)\n",
    "private_attribute": RAISES + "    assert excinfo.value.__cause__ is None\n",
    "an_object_inside": RAISES + "    assert excinfo.value.args.x.y == 1\n",
    "passed_to_the_solution": RAISES + "    assert f(len(str(excinfo.value))) == 12\n",
}


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_caught_exception_as_the_runner_judges(tmp_path, name):
    tests, solution = CAUGHT[name]
    assert judged_here(tests), testplan.build_plan(tests, None).refusal
    want = 1.0 if runner_passes(tmp_path, solution, tests) else 0.0
    assert want == (0.0 if name.endswith("wrong") else 1.0)
    assert scores(block(solution), tests) == (want, want)


@pytest.mark.parametrize("name", sorted({**FOOLS_THE_RUNNER, **CAUGHT_FOOLS_THE_RUNNER}))
def test_values_that_fool_the_runner_score_0(tmp_path, name):
    """numpy values and caught exceptions that pass under the real runner, wrongly."""
    tests, solution = {**FOOLS_THE_RUNNER, **CAUGHT_FOOLS_THE_RUNNER}[name]
    assert judged_here(tests)
    assert runner_passes(tmp_path, solution, tests)  # the runner is fooled
    assert scores(block(solution), tests) == (0.0, 0.0)


@pytest.mark.parametrize("name", sorted(CAUGHT_REFUSED))
def test_other_uses_of_the_caught_exception_are_refused(tmp_path, name):
    tests = CAUGHT_REFUSED[name]
    assert not judged_here(tests)
    want = 1.0 if runner_passes(tmp_path, NEG, tests) else 0.0
    assert scores(block(NEG), tests) == (want, 0.0)  # pytest's verdict; refused under trusted_only
