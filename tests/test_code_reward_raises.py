"""An exception class of a module the tests import, named with a dot or imported by name
(`self.assertRaises(requests.HTTPError)`, `pytest.raises(json.JSONDecodeError)`, `from subprocess
import CalledProcessError`), judged by the trainer (issue 53): the child resolves the class before
the solution is imported and reports whether it is in the raised class's MRO, by identity. Each
case's verdict is the runner's own (unittest, pytest) with the tests' modules as they were before
the solution ran (test_verdicts_are_the_runners)."""
import contextlib
import importlib
import io
import subprocess
import sys
import textwrap
import unittest

import pytest
from test_code_reward_mocks import block, reference, scores
from test_code_reward_round5 import PLAIN_PYTEST

from gmts.rewards import testplan

HTTP = """
@patch('requests.get')
def test_status(self, mock_get):
    mock_get.return_value.raise_for_status.side_effect = requests.HTTPError('404')
    with self.assertRaises(requests.HTTPError):
        task_func('http://x')

@patch('requests.get')
def test_ok(self, mock_get):
    mock_get.return_value.json.return_value = {'k': 3}
    self.assertEqual(task_func('http://x'), 3)

@patch('requests.get', side_effect=requests.exceptions.ConnectionError('down'))
def test_down(self, mock_get):
    self.assertRaises(requests.exceptions.ConnectionError, task_func, 'http://x')
"""
HTTP_HEAD = "import requests\n"
HTTP_TAIL = "    return r.json()['k']\n"


def http(body: str, head: str = "") -> str:
    """task_func(u) around `body` (r = requests.get(u) bound), then returning r.json()['k']."""
    return (HTTP_HEAD + head + "def task_func(u):\n    r = requests.get(u, timeout=5)\n"
            + textwrap.indent(textwrap.dedent(body), "    ") + HTTP_TAIL)


CALLED = """
@patch('subprocess.check_output', side_effect=CalledProcessError(2, 'ls'))
def test_fails(self, m):
    with self.assertRaises(CalledProcessError):
        task_func('ls')

@patch('subprocess.check_output', return_value=b'a\\n')
def test_runs(self, m):
    self.assertEqual(task_func('ls'), 'a')
"""
CALLED_IMPORTS = "import subprocess\nfrom subprocess import CalledProcessError"

KODCODE = """import json
import pytest
from json import JSONDecodeError
from solution import parse

def test_bad():
    with pytest.raises(json.JSONDecodeError):
        parse('{bad')

def test_bad_by_name():
    with pytest.raises((JSONDecodeError, KeyError)):
        parse('[1')

def test_good():
    assert parse('{"a": 1}') == {'a': 1}
"""

# name -> (tests as a reference, the modules they import, solution, the runner's verdict)
CASES = {
    "http_honest": (reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
                    http("r.raise_for_status()\n"), 1.0),
    # a subclass of the expected class passes, as under unittest (issubclass)
    "http_subclass": (reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
                      http("try:\n    r.raise_for_status()\nexcept requests.HTTPError as e:\n"
                           "    raise Gone(str(e))\n",
                           "class Gone(requests.exceptions.HTTPError):\n    pass\n"), 1.0),
    # raises nothing: the bad status is swallowed
    "http_swallows": (reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
                      http("try:\n    r.raise_for_status()\nexcept requests.HTTPError:\n"
                           "    return None\n"), 0.0),
    # rebinds the module's name at import so that the ValueError it raises would be caught
    "http_rebinds_the_module_name": (
        reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
        http("try:\n    r.raise_for_status()\nexcept Exception:\n    raise ValueError('bad')\n",
             "requests.HTTPError = Exception\n"), 0.0),
    # a class of its own that merely shares the name
    "http_own_class_of_the_name": (
        reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
        http("try:\n    r.raise_for_status()\nexcept requests.HTTPError as e:\n"
             "    raise HTTPError(str(e))\n", "class HTTPError(Exception):\n    pass\n"), 0.0),
    # the parent class where the subclass is expected
    "http_parent_class": (
        reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
        http("try:\n    r.raise_for_status()\nexcept requests.HTTPError as e:\n"
             "    raise requests.RequestException(str(e))\n"), 0.0),
    # a BaseException that escapes assertRaises: an error under unittest
    "http_exits": (reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
                   http("try:\n    r.raise_for_status()\nexcept requests.HTTPError:\n"
                        "    raise SystemExit(1)\n"), 0.0),
    # a metaclass whose `__mro__` names HTTPError: issubclass reads the class's own MRO
    "http_metaclass_mro": (
        reference(HTTP, "import requests"), ("requests", "requests.exceptions"),
        http("try:\n    r.raise_for_status()\nexcept requests.HTTPError:\n    raise Fake('x')\n",
             "class M(type):\n    __mro__ = property(lambda c: (requests.HTTPError, "
             "BaseException, object))\nclass Fake(ValueError, metaclass=M):\n    pass\n"), 0.0),
    "called_honest": (reference(CALLED, CALLED_IMPORTS), ("subprocess",),
                      ("import subprocess\ndef task_func(cmd):\n"
                       "    return subprocess.check_output(cmd).decode().strip()\n"), 1.0),
    # catches the error and returns an empty string instead
    "called_swallows": (reference(CALLED, CALLED_IMPORTS), ("subprocess",),
                        ("import subprocess\ndef task_func(cmd):\n    try:\n"
                         "        return subprocess.check_output(cmd).decode().strip()\n"
                         "    except subprocess.CalledProcessError:\n        return ''\n"), 0.0),
    "called_rebinds_the_module_name": (
        reference(CALLED, CALLED_IMPORTS), ("subprocess",),
        ("import subprocess\nsubprocess.CalledProcessError = OSError\n"
         "def task_func(cmd):\n    try:\n        return subprocess.check_output(cmd).decode()"
         ".strip()\n    except Exception:\n        raise OSError('no')\n"), 0.0),
    "kodcode_honest": (KODCODE, ("json",), "import json\ndef parse(s):\n    return json.loads(s)\n",
                       1.0),
    "kodcode_parent_class": (KODCODE, ("json",), (
        "import json\ndef parse(s):\n    try:\n        return json.loads(s)\n"
        "    except json.JSONDecodeError as e:\n        raise ValueError(str(e))\n"), 0.0),
    "kodcode_rebinds_the_module_name": (KODCODE, ("json",), (
        "import json\njson.JSONDecodeError = ValueError\ndef parse(s):\n    try:\n"
        "        return json.loads(s)\n    except Exception:\n        raise ValueError('x')\n"),
        0.0),
    "kodcode_own_class_of_the_name": (KODCODE, ("json",), (
        "import json\nclass JSONDecodeError(ValueError):\n    pass\ndef parse(s):\n    try:\n"
        "        return json.loads(s)\n    except ValueError as e:\n"
        "        raise JSONDecodeError(str(e))\n"), 0.0),
    # the builtin KeyError named by a metaclass's `__mro__` (the builtins' check reads the class's
    # own MRO too)
    "kodcode_metaclass_mro_builtin": (KODCODE, ("json",), (
        "import json\nclass M(type):\n    __mro__ = property(lambda c: (KeyError, BaseException, "
        "object))\nclass Fake(ValueError, metaclass=M):\n    pass\ndef parse(s):\n"
        "    if s == '[1':\n        raise Fake('x')\n    return json.loads(s)\n"), 0.0),
    "kodcode_returns_none": (KODCODE, ("json",), (
        "import json\ndef parse(s):\n    try:\n        return json.loads(s)\n"
        "    except ValueError:\n        return None\n"), 0.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_judged_by_the_trainer(name):
    """The plan judges every case (no pytest harness, so trusted_only accepts it) and checks the
    raised class by its path; the verdict is the runner's, under both modes."""
    tests, _, solution, expected = CASES[name]
    ref = tests if isinstance(tests, str) else tests["tests"]
    plan = testplan.build_plan(ref, None if isinstance(tests, str) else tests["entry_point"])
    assert plan.harness is None and plan.untrusted == 0, plan.refusal
    assert any(origin == "module" for u in plan.units for c in u.checks
               for _, origin in c.exceptions)
    assert scores(block(solution), tests) == (expected, expected)


def restore(mods, kept):
    """Each module's attributes as `kept` holds them (what the solution rebound or added undone)."""
    for m, k in zip(mods, kept):
        for extra in set(vars(m)) - set(k):
            delattr(m, extra)
        for attr, value in k.items():
            if vars(m)[attr] is not value:
                setattr(m, attr, value)


@contextlib.contextmanager
def modules_kept(names):
    """The tests' modules as they were before the block: `restore()` (and the block's end) undoes
    the solution's rebinding, so that the tests' names are the ones they bound before it ran."""
    mods = [importlib.import_module(n) for n in names]
    kept = [dict(vars(m)) for m in mods]
    try:
        yield lambda: restore(mods, kept)
    finally:
        restore(mods, kept)


CONFTEST = """import importlib
kept = [(m, dict(vars(m))) for m in map(importlib.import_module, {names!r})]
import solution
for m, k in kept:
    vars(m).clear()
    vars(m).update(k)
"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_verdicts_are_the_runners(name, tmp_path):
    """Each verdict above is the real runner's on the same code: unittest on real mocks (in this
    process; the solutions touch nothing but their mocks and the modules restored here), pytest
    in a process of its own whose conftest imports the solution between a snapshot of the tests'
    modules and its restoration."""
    tests, modules, solution, expected = CASES[name]
    if isinstance(tests, str):
        (tmp_path / "solution.py").write_text(solution)
        (tmp_path / "test_kodcode.py").write_text(tests)
        (tmp_path / "conftest.py").write_text(CONFTEST.format(names=modules))
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-p", "no:xdist", str(tmp_path)], check=False,
                             cwd=tmp_path, env=PLAIN_PYTEST,
                             capture_output=True, text=True, timeout=120)
        assert (run.returncode == 0) == (expected == 1.0), run.stdout[-2000:]
        return
    with modules_kept(modules) as restore:
        solution_ns = {"__name__": "solution"}
        exec(solution, solution_ns)  # noqa: S102 - the cases above, written here
        restore()
        tests_ns = dict(solution_ns, __name__="raises_tests")
        exec(tests["tests"], tests_ns)  # noqa: S102
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(tests_ns["TestCases"])
        result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
    assert float(result.wasSuccessful()) == expected


def test_paths_are_bounded_and_the_tests_own():
    """Only a module the tests import, a chain of at most testplan.MAX_EXC_PATH names; a name the
    solution exports is the solution's class; otherwise the case goes to pytest, as before."""
    def refusal(raises: str, imports: str = "import requests") -> str:
        ref = reference(f"def test_x(self):\n    with self.assertRaises({raises}):\n"
                        "        task_func()\n", imports)
        return testplan.build_plan(ref["tests"], "task_func").refusal
    assert refusal("requests.HTTPError") == ""
    assert refusal("requests.a.b.c.d.e.f.HTTPError") == ""  # 8 names
    assert refusal("requests.a.b.c.d.e.f.g.HTTPError") != ""  # 9
    assert refusal("socket.timeout") != ""  # a module the tests do not import
    assert refusal("task_func.Error") != ""  # the solution's: not a module path


THROUGH_THE_MODULE = """import pytest
import solution as s

def test_bad():
    with pytest.raises(s.ParseError):
        s.parse('x')

def test_good():
    assert s.parse('1') == 1
"""
THE_TYPE_THROUGH_THE_MODULE = """import pytest
import solution as s

def test_bad():
    with pytest.raises(ValueError) as c:
        s.parse('x')
    assert c.type is s.ParseError

def test_good():
    assert s.parse('1') == 1
"""
PARSE_ERROR = "class ParseError(ValueError):\n    pass\n\n"
RAISING = "def parse(t):\n    if not t.isdigit():\n        raise {}(t)\n    return int(t)\n"


@pytest.mark.parametrize("tests,solution,expected", [
    (THROUGH_THE_MODULE, PARSE_ERROR + RAISING.format("ParseError"), 1.0),
    (THROUGH_THE_MODULE, PARSE_ERROR + "class Sub(ParseError):\n    pass\n\n"
     + RAISING.format("Sub"), 1.0),
    (THROUGH_THE_MODULE, PARSE_ERROR + RAISING.format("ValueError"), 0.0),  # its parent
    (THROUGH_THE_MODULE, "ParseError = ValueError\n\n" + RAISING.format("KeyError"), 0.0),
    (THROUGH_THE_MODULE, "ParseError = ValueError\n\n" + RAISING.format("ValueError"), 1.0),
    (THE_TYPE_THROUGH_THE_MODULE, PARSE_ERROR + RAISING.format("ParseError"), 1.0),
    (THE_TYPE_THROUGH_THE_MODULE, PARSE_ERROR + "class Sub(ParseError):\n    pass\n\n"
     + RAISING.format("Sub"), 0.0),
    (THE_TYPE_THROUGH_THE_MODULE, "ParseError = ValueError\n\n" + RAISING.format("ValueError"),
     1.0),
], ids=["own_class", "subclass", "parent", "other", "alias", "type_own", "type_subclass",
        "type_alias"])
def test_a_class_of_the_solution_named_through_its_module(tmp_path, tests, solution, expected):
    """`import solution as s` ... `pytest.raises(s.ParseError)` or `c.type is s.ParseError`: the
    class the solution's module binds to that name, judged by the trainer from the raised class's
    MRO, as pytest judges it."""
    (tmp_path / "solution.py").write_text(solution)
    (tmp_path / "test_through.py").write_text(tests)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(tmp_path)], check=False, cwd=tmp_path, env=PLAIN_PYTEST,
                         capture_output=True, text=True, timeout=120)
    assert (run.returncode == 0) == (expected == 1.0), run.stdout[-2000:]
    plan = testplan.build_plan(tests)
    assert plan.harness is None and plan.trusted == (2 if tests is THROUGH_THE_MODULE else 3)
    assert scores(block(solution), tests) == (expected, expected)


# ---------------------------------------------- a try in a test; the caught class of the solution's

RAISER = "def f(x):\n    if x < 0:\n        raise {}('neg')\n    return x\n"
OWN = "class E(ValueError):\n    pass\n\n\nclass F(E):\n    pass\n\n\n"
CAUGHT_ANSWERS = (
    RAISER.format("ValueError"),                          # the builtin the tests name
    RAISER.replace("'neg'", "'other'").format("ValueError"),  # another message
    "def f(x):\n    return x\n",                          # raises nothing
    RAISER.format("TypeError"),                           # another class
    OWN + RAISER.format("E"),                             # the solution's own class
    OWN + RAISER.format("F"),                             # a subclass of it
    OWN + RAISER.format("KeyError"),                      # a builtin of another family
    "E = ValueError\n\n" + RAISER.format("ValueError"),   # its name for a builtin
    "class _E(ValueError):\n    pass\n\n\nE = _E\n\n" + RAISER.format("E"),  # another name
)
TRY = {  # each the same test as `with pytest.raises(...) as c` then the handler reading c.value
    "assert_false_in_body": ("def test_a():\n    try:\n        f(-1)\n        assert False, 'no'\n"
                             "    except ValueError as e:\n        assert str(e) == 'neg'\n"),
    "fail_in_else": ("def test_a():\n    try:\n        f(-1)\n    except (ValueError, TypeError)"
                     " as e:\n        assert e.args[0] == 'neg'\n    else:\n"
                     "        raise AssertionError('no')\n"),
    "pytest_fail": ("import pytest\n\ndef test_a():\n    try:\n        f(-1)\n"
                    "        pytest.fail('no')\n    except Exception as e:\n"
                    "        assert 'neg' in str(e)\n"),
    "nothing_raised_passes_too": ("def test_a():\n    for x in (-1, 2):\n        try:\n"
                                  "            f(x)\n        except ValueError as e:\n"
                                  "            assert str(e) == 'neg'\n    assert f(3) == 3\n"),
    "in_a_loop": ("def test_a():\n    for bad in (-1, -2):\n        try:\n            f(bad)\n"
                  "            assert False\n        except ValueError:\n            pass\n"
                  "    assert f(3) == 3\n"),
    "solutions_class": ("def test_a():\n    try:\n        f(-1)\n        assert False\n"
                        "    except E as e:\n        assert str(e) == 'neg'\n"),
    "unittest_else_fail": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        for bad in (-1, -2):\n            with self.subTest(bad=bad):\n"
        "                try:\n                    f(bad)\n"
        "                except ValueError as err:\n"
        "                    self.assertIn('neg', str(err))\n                else:\n"
        "                    self.fail('no')\n"),
    "the_class_itself": ("import pytest\n\ndef test_a():\n    with pytest.raises(ValueError) as c:"
                         "\n        f(-1)\n    assert c.type is E\n"),
    "isinstance_of_the_value": ("import pytest\n\ndef test_a():\n    with pytest.raises(Exception)"
                                " as c:\n        f(-1)\n    assert isinstance(c.value, E)\n"),
    "issubclass_of_the_type": ("import pytest\n\ndef test_a():\n    with pytest.raises(Exception)"
                               " as c:\n        f(-1)\n"
                               "    assert issubclass(c.type, (E, IndexError))\n"),
    "unittest_type_equal": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        with self.assertRaises(ValueError) as cm:\n            f(-1)\n"
        "        self.assertEqual(type(cm.exception), E)\n"
        "        self.assertIsInstance(cm.exception, ValueError)\n"),
    "unittest_not_instance": (
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        with self.assertRaises(Exception) as cm:\n            f(-1)\n"
        "        self.assertNotIsInstance(cm.exception, E)\n"),
}
NEEDS_E = ("solutions_class", "the_class_itself", "isinstance_of_the_value",
           "issubclass_of_the_type", "unittest_type_equal", "unittest_not_instance")


@pytest.mark.parametrize("name", sorted(TRY))
def test_a_try_and_the_caught_class_judged_as_pytest_runs_them(name):
    """A test's `try: f(-1); assert False / except E as e: ...` (the failure in the body, where
    the except cannot catch it, or in `else:`), and the caught class compared with a class of the
    solution's (`c.type is E`, `isinstance(c.value, E)`, `assertEqual(type(cm.exception), E)`), E
    as the solution's module binds it when the step raised (an alias of a builtin, a class of
    another name); a try without a failure, its except judged only where the body raised: judged
    by the trainer, as pytest says."""
    from test_code_reward_round5 import judged_as_pytest_says
    judged_as_pytest_says(TRY, tuple(a for a in CAUGHT_ANSWERS if name not in NEEDS_E
                                     or "E = " in a or "class E(" in a), name)


TRY_LEFT = {  # not the same test as a raises block: pytest runs them
    "except_catches_the_failure": ("def test_a():\n    try:\n        f(-1)\n        assert False\n"
                                   "    except Exception:\n        pass\n"),
    "a_call_in_an_except_that_may_not_run": ("def test_a():\n    try:\n        f(-1)\n"
                                             "    except ValueError:\n"
                                             "        assert f(0) == 0\n"),
    "two_handlers": ("def test_a():\n    try:\n        f(-1)\n        assert False\n"
                     "    except ValueError:\n        pass\n    except TypeError:\n"
                     "        assert False\n"),
    "finally": ("def test_a():\n    try:\n        f(-1)\n        assert False\n"
                "    except ValueError:\n        pass\n    finally:\n        f(0)\n"),
}


@pytest.mark.parametrize("name", sorted(TRY_LEFT))
def test_a_try_of_another_meaning_is_left_to_pytest(name):
    """`except Exception` around the body's own `assert False` (it always passes), a call of the
    solution's in an except that may not run, two handlers, a `finally`: the harness runs it
    (default mode, pytest's verdict), trusted_only refuses it with the reason."""
    from test_code_reward_round5 import verdict
    plan = testplan.build_plan(TRY_LEFT[name])
    assert plan.harness is not None and ("try" in plan.refusal or "except" in plan.refusal)
    for answer in CAUGHT_ANSWERS[:4]:
        want = verdict(TRY_LEFT, CAUGHT_ANSWERS[:4], name, answer)
        assert scores(block(answer), TRY_LEFT[name]) == (want, 0.0), answer
