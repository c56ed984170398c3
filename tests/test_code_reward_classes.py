"""The code reward and the standard library's classes the tests pass to what the answer returned
(`isinstance(r, types.GeneratorType)`, `assertIsInstance(r, collections.abc.Iterator)`): the child
applies them, each class resolved before the solution is imported; the name of its type
(`type(r).__name__`) is read in the child through the real `type`. Expected verdicts are the real
pytest's (test_code_reward_round5)."""
import pytest
from test_code_reward_round5 import block, judged_as_pytest_says, scores

from gmts.rewards import testplan

CLASSES = {  # name: tests asking what kind of object the answer returned (a builtin class bound
    # to a name of the tests' too)
    "generator": ("import types\n\n\ndef test_a():\n"
                  "    assert isinstance(g(3), types.GeneratorType)\n"
                  "    assert list(g(3)) == [0, 1, 2]\n"),
    "iterator": ("import collections\nimport unittest\n\n\nclass T(unittest.TestCase):\n"
                 "    def test_a(self):\n"
                 "        self.assertIsInstance(g(3), collections.abc.Iterator)\n"
                 "        self.assertEqual(sum(g(4)), 6)\n"),
    "from_import": ("from collections.abc import Iterable\nfrom types import GeneratorType\n\n\n"
                    "def test_a():\n    assert isinstance(g(2), (GeneratorType, Iterable))\n"
                    "    assert not isinstance(g(2), list)\n"),
    "builtins_bound": ("def test_a():\n    kinds = (int, float)\n"
                       "    assert isinstance(h(2), kinds)\n"),
    "number": ("import numbers\n\n\ndef test_a():\n    assert isinstance(h(2), numbers.Number)\n"
               "    assert not isinstance(h(2), numbers.Integral)\n"),
}
ANSWERS = (
    "def g(n):\n    yield from range(n)\n\ndef h(x):\n    return x / 4\n",
    "def g(n):\n    return list(range(n))\n\ndef h(x):\n    return x // 4\n",
    "def g(n):\n    return iter(range(n))\n\ndef h(x):\n    return str(x / 4)\n",
)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_a_standard_library_class_is_applied_in_the_child(name):
    """A generator, an iterator and a list, a float, an int and a str: pytest's verdict in both
    modes, the trainer judging the whole file."""
    judged_as_pytest_says(CLASSES, ANSWERS, name)


def test_the_class_is_the_one_before_the_solution_ran():
    """An answer that rebinds `types.GeneratorType` to `list` at import and returns a list: the
    class was resolved before, the check fails (pytest, whose module is the answer's too, passes
    it)."""
    forged = ("import types\ntypes.GeneratorType = list\n\n"
              "def g(n):\n    return list(range(n))\n")
    tests = "import types\n\n\ndef test_a():\n    assert isinstance(g(3), types.GeneratorType)\n"
    assert testplan.build_plan(tests).harness is None
    assert scores(block(forged), tests) == (0.0, 0.0)
    assert scores(block(ANSWERS[0]), tests) == (1.0, 1.0)


TYPE_NAMES = {  # name: tests reading the name of the type of what the answer returned
    "type_name": "def test_a():\n    assert type(g(3)).__name__ == 'generator'\n",
    "class_name": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
                   "        r = g(3)\n"
                   "        self.assertEqual(r.__class__.__name__, 'generator')\n"),
    "assert_in": ("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
                  "        self.assertIn(type(h(2)).__qualname__, ['float', 'complex'])\n"),
    "module": ("def test_a():\n    assert type(h(1)).__module__ == 'builtins'\n"
               "    assert type(h(1)).__name__ != 'str'\n"),
    "each_item": ("def test_a():\n    kinds = [type(x).__name__ for x in g(2)]\n"
                  "    assert kinds == ['int', 'int'] and type(h(2)).__name__ == 'float'\n"),
}


@pytest.mark.parametrize("name", sorted(TYPE_NAMES))
def test_the_name_of_a_returned_values_type_is_read_in_the_child(name):
    """`type(r).__name__`, `r.__class__.__name__`, `__qualname__`, `__module__`, in a
    comprehension too: pytest's verdict in both modes, the trainer judging the whole file."""
    judged_as_pytest_says(TYPE_NAMES, ANSWERS, name)


@pytest.mark.parametrize("forged", [
    # a metaclass whose `__name__` is a str subclass equal to anything
    ("class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n\n"
     "class M(type):\n    @property\n    def __name__(cls):\n        return S('x')\n\n"
     "class G(metaclass=M):\n    pass\n\ndef g(n):\n    return G()\n"),
    # a class attribute `__class__` naming another class
    "import types\n\nclass G:\n    __class__ = types.GeneratorType\n\ndef g(n):\n    return G()\n"])
def test_a_type_name_is_the_real_types(forged):
    """The answer's type claims another name (pytest, whose `==` and `__class__` are the answer's,
    passes both): 0.0 in both modes, the name read through the real `type` and crossing as a str."""
    for tests in (TYPE_NAMES["type_name"], TYPE_NAMES["class_name"]):
        assert testplan.build_plan(tests).harness is None
        assert scores(block(forged), tests) == (0.0, 0.0)
        assert scores(block(ANSWERS[0]), tests) == (1.0, 1.0)
