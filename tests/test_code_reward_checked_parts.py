"""numpy.testing's asserts and the parts of a raised exception a test checks, judged by the trainer
under trusted_only (issue 53): each verdict is the real runner's on the same program (pytest on a
test file, unittest on a TestCase module, run here as the reference), in both modes; an answer that
fools that runner (an ndarray subclass's `__eq__`, a message that is a str subclass) scores 0.
"""
import subprocess
import sys

import pytest
from test_code_reward_round5 import block, scores

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
                         timeout=120)
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
    assert want == (0.0 if "wrong" in name or "outside" in name or name in {
        "array_equal_shape_that_broadcasts", "array_equal_nan_moved",
        "array_equal_nan_for_a_number", "allclose_default_tolerance"} else 1.0)
    assert scores(block(solution), tests) == (want, want)


@pytest.mark.parametrize("name", sorted(FOOLS_THE_RUNNER))
def test_numpy_values_that_fool_the_runner_score_0(tmp_path, name):
    tests, solution = FOOLS_THE_RUNNER[name]
    assert judged_here(tests)
    assert runner_passes(tmp_path, solution, tests)  # the runner is fooled
    assert scores(block(solution), tests) == (0.0, 0.0)


def test_other_numpy_testing_names_stay_with_pytest():
    """assert_raises calls what it is given (a solution's callable): not judged here."""
    tests = NP + "def test_f():\n    np.testing.assert_raises(ValueError, f, -1)\n"
    assert not judged_here(tests)
    honest = "def f(x):\n    if x < 0:\n        raise ValueError\n    return x\n"
    assert scores(block(honest), tests) == (1.0, 0.0)  # pytest's; refused under trusted_only
