"""Split a code problem's tests into what the sandbox computes and what the trainer judges.

build_plan(tests, entry_point, setup) parses the tests (MBPP asserts, HumanEval's `def
check(candidate)`, KodCode's `from solution import f` + `test_*` functions with
@pytest.mark.parametrize tables) into units, one per test case:
- unit.steps go to the sandbox: only the solution's own callables applied to INPUTS, e.g. {"eval":
  "add(1, 2)"}. Every input is computed here and sent as a literal; the child never evaluates a
  builtin, a module or a name of the tests' (it could rebind them: `gcd(n, 0) == n` with the
  solution setting n = 0 through its caller's frame).
- unit.checks stay here: the test's own expression around those calls, with each call replaced by
  the value the sandbox sent back (plain data of exact types, rebuilt by `decode`): ==, `is None`,
  math.isclose, pytest.approx (pytest's own), pytest.raises, and methods such as `.startswith` on a
  returned str, all evaluated here.
- plan.mocks: unittest.mock's mocks the tests make (`@patch`, `with patch(...)`), as a recipe of
  data; the child's patch steps put stubs in their targets, which ask the trainer's own mocks over
  a channel while the run goes on (rewards/mocks.py); their asserts are checks here.
The reference alone decides the plan (never the solution), so a policy cannot make a test less
trusted. What cannot be split so (loops, helpers defined by the tests, fixtures, identity between
two computed values, test classes, ...) stays in `plan.harness`: the tests' source minus the
converted units, run inside the sandbox under the installed pytest (rewards/_pytest_runner.py;
pytest_verdict reads its result), so its verdict is untrusted. What can be neither judged nor run (a
`check(candidate)` with no entry point, a file with no test case at all) is `plan.unjudged`: such a
run scores 0 and is counted, never passed by default.
"""
import ast
import builtins
import collections
import collections.abc
import copy
import decimal
import datetime
import dis
import fractions
import itertools
import math
import operator
import random
import re
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from functools import lru_cache


# Builtins the trainer evaluates itself (real builtins, whatever the solution redefines). Every
# other builtin (print, id, iter, getattr, ...) makes its test case untrusted: it would have to run
# inside the sandbox.
SAFE_NAMES = frozenset("""abs all any ascii bin bool bytes chr complex dict divmod enumerate filter
float format frozenset hex int isinstance len list map max min oct ord pow range repr reversed round
set slice sorted str sum tuple type zip bytearray object next callable""".split())  # noqa: SIM905
BUILTIN_NAMES = frozenset(dir(builtins))
MODULES = {"math": math, "collections": collections}
# Modules the tests may import (`import random` inside a HumanEval check): the trainer evaluates
# them itself, as it does math; pure computation only (no files, no global state a test could change
# here)
IMPORTABLE = ("math", "cmath", "collections", "copy", "string", "itertools", "functools",
              "operator", "enum", "types", "numbers", "collections.abc",
              "fractions", "decimal", "statistics", "heapq", "bisect", "re", "random", "datetime",
              "json", "hashlib", "base64", "binascii", "textwrap", "unicodedata", "struct",
              "calendar")
# imported only where the tests import it (HumanEval+'s `assertion` helper uses np.allclose); its
# global random functions are a RandomState of the plan's (_plan_numpy)
LAZY_IMPORTABLE = ("numpy", "numpy.testing", "pandas", "pandas.testing")  # after those it lies in
# libraries whose objects never cross as data and whose names the tests apply only to the answer's
# objects (`isinstance(ax, plt.Axes)`, `plt.close()`): the tests' imports of them run in the child,
# their names are the child's (as `import solution`'s)
CHILD_MODULES = ("matplotlib", "seaborn", "tempfile", "shutil")
# numpy.testing's and pandas.testing's comparisons, called here on the returned values rebuilt as
# arrays and frames (the library's own semantics: shapes, dtypes, NaN positions, `|a - b| <= atol +
# rtol * |b|`, `decimal`); not their other names (`assert_raises` calls a callable...)
LIBRARY_ASSERTS = {
    "numpy.testing": frozenset("""assert_equal assert_almost_equal assert_approx_equal
assert_array_equal assert_array_almost_equal assert_allclose assert_array_less assert_string_equal
assert_array_almost_equal_nulp assert_array_max_ulp""".split()),  # noqa: SIM905
    "pandas.testing": frozenset("""assert_frame_equal assert_series_equal assert_index_equal
assert_extension_array_equal""".split())}  # noqa: SIM905
# what the tests' own helper functions may name besides the tests' names (_trainer_definitions):
# the safe builtins and the exception classes (`raise ValueError`, `except TypeError`)
HELPER_BUILTINS = SAFE_NAMES | {n for n in BUILTIN_NAMES if isinstance(getattr(builtins, n), type)
                                and issubclass(getattr(builtins, n), BaseException)}
_ENUM_BASES = ("Enum", "IntEnum", "StrEnum", "Flag", "IntFlag")
# attributes of the plain data a value crosses as: a method the tests call on a returned value
# runs here only if plain data has it (`greet(x).startswith(...)`); a helper of the tests' reads
# only these of its values (and `dtype`: HumanEval+'s is_floats asks it of a numpy array)
PLAIN_ATTRS = frozenset(a for t in (int, float, complex, str, bytes, bytearray, list, tuple, dict,
                                    set, frozenset, bool, fractions.Fraction, decimal.Decimal,
                                    type({}.keys()), type({}.values()), type({}.items()),
                                    collections.Counter, collections.OrderedDict,
                                    collections.defaultdict, collections.deque, range,
                                    datetime.date, datetime.datetime, datetime.time,
                                    datetime.timedelta)
                        for a in dir(t) if not a.startswith("_")) | {"name", "value"}
# what a test reads of a returned value's type (`type(r).__name__`): strings (_Unit.type_name)
TYPE_NAMES = frozenset(("__name__", "__qualname__", "__module__"))
# the modules C code (and the libraries' own code) imports on first use in a check's frame:
# numpy's and pandas' helpers, datetime.strptime's `_strptime` and what it reads
LATE_IMPORTS = frozenset("""numpy pandas dateutil pytz zoneinfo _strptime time locale calendar
""".split())  # noqa: SIM905


def _late_import(name, globals=None, locals=None, fromlist=(), level=0):
    """The import C code runs in a check's frame (numpy's `arr.mean()` imports its helpers on first
    call, `datetime.strptime` its `_strptime`, through the frame's builtins): LATE_IMPORTS only."""
    if level or name.split(".")[0] not in LATE_IMPORTS:
        raise ImportError(f"no import of {name} in a check")
    return builtins.__import__(name, globals, locals, fromlist, level)


# (no name of a check reads `__import__`: parent_expr allows only SAFE_NAMES)
_SAFE_BUILTINS = {name: getattr(builtins, name) for name in SAFE_NAMES} | {
    "__import__": _late_import}
# Calls that iterate over their argument: a generator (or any iterator) the solution returns there
# is materialised into a list in the sandbox, and the call itself runs here on that list (list(gen)
# == list(list(gen)) exactly).
ITERATING = frozenset(
    "list tuple set frozenset sorted sum min max any all dict enumerate".split())  # noqa: SIM905
# os.path's questions about files (`os.path.exists(p)`): asked in the child, of os.stat as it was
# before the solution ran (_sandbox_child._FILE_QUESTIONS); its text functions are the trainer's
FILE_QUESTIONS = frozenset("exists isfile isdir getsize".split())  # noqa: SIM905
PATH_TEXT = ("join", "basename", "dirname", "splitext", "split", "normpath", "isabs", "sep")
# os's functions on files, in a test (`os.makedirs(d)`, `os.listdir(d)`): run in the child, where
# the answer reads and writes its files (_Unit.files_in_child)
OS_FILES = frozenset("""makedirs mkdir remove unlink rmdir removedirs rename replace listdir walk
chdir getcwd chmod""".split())  # noqa: SIM905
_CHILD_OS = "__gmts_os"  # os in the child, for OS_FILES
# numpy's, pandas' and json's readers of files in a test (`pd.read_csv(out)`): run in the child, on
# the files there (what they read crosses as data); pandas': every `read_*`
READS = {"numpy": frozenset({"load", "loadtxt", "genfromtxt", "fromfile"}), "pandas": None,
         "json": frozenset({"load"})}
# Builtins applied in the child when their argument is a value of the solution's (the result crosses
# as data)
CHILD_BUILTINS = frozenset("len str repr bool isinstance abs next callable".split())  # noqa: SIM905
# items stay what they are
_KEEPS = frozenset("sorted list tuple set frozenset reversed min max".split())  # noqa: SIM905
# methods applied here to data a value crossed as (a numpy array's and a pandas DataFrame's or
# Series', with PLAIN_ATTRS): a method_step's on what it got back, and a method of what the test
# computes from returned values (`(f(x) == want).all()`); they compute on the data (none writes a
# file or reads the solution's code)
DATA_METHODS = frozenset("""all any argmax argmin argsort astype clip conj copy cumprod cumsum
diagonal dot flatten item max mean min nonzero prod ptp ravel repeat reshape round squeeze std sum
swapaxes take tolist trace transpose var
to_list to_numpy to_dict equals count nunique unique value_counts isna isnull notna notnull head
tail sort_values sort_index reset_index set_index describe dropna fillna idxmax idxmin abs between
drop duplicated drop_duplicates median mode quantile rank shift diff pct_change corr cov nlargest
nsmallest isin where mask rename get keys items select_dtypes cummax cummin eq ne lt le gt ge
apply map agg aggregate transform filter pivot pivot_table melt merge join stack unstack explode
groupby get_group first last nth size rolling expanding resample interpolate reindex set_axis
droplevel swaplevel rename_axis asfreq infer_objects convert_dtypes to_frame to_records iterrows
itertuples kurt skew sem corrwith assign pipe ffill bfill compare add_prefix add_suffix sub mul
div truediv floordiv mod pow radd rsub rmul rdiv align combine first_valid_index last_valid_index
""".split()) | PLAIN_ATTRS  # noqa: SIM905
# pandas' names the tests' checks may use here (`pd.DataFrame(...)`, `pd.testing`'s asserts);
# none reads or writes a file (read_csv, to_pickle: pytest)
PANDAS_NAMES = frozenset("""DataFrame Series Index RangeIndex DatetimeIndex TimedeltaIndex
Categorical CategoricalDtype Timestamp Timedelta NaT NA isna isnull notna notnull to_datetime
to_timedelta to_numeric date_range timedelta_range concat merge testing api array Int64Dtype
Float64Dtype StringDtype BooleanDtype cut qcut crosstab pivot_table get_dummies unique factorize
""".split())  # noqa: SIM905
# methods that write (or read) a file, a clipboard or a database: never called here
WRITES = frozenset("""to_csv to_excel to_pickle to_parquet to_hdf to_sql to_feather to_stata
to_clipboard to_json to_html to_latex to_markdown to_xml to_orc to_gbq to_string tofile dump save
savez savez_compressed savetxt load loadtxt genfromtxt fromfile memmap savefig plot hist boxplot
""".split())  # noqa: SIM905
# `x is None`: exact on rebuilt values (decode returns these objects)
SINGLETONS = (None, True, False, Ellipsis)


def _singleton(node) -> bool:
    """A literal None, True, False or ...: `x is <it>` means the same here and in the child."""
    return isinstance(node, ast.Constant) and any(node.value is s for s in SINGLETONS)


TO_DATA = frozenset(("tolist", "item"))  # numpy's conversions of a returned array to plain data
_IN = (ast.In, ast.NotIn)
# the methods that change a list, dict or set in place
_MUTATORS = frozenset("""append extend insert remove pop clear sort reverse update setdefault
popitem add discard difference_update intersection_update
symmetric_difference_update""".split())  # noqa: SIM905
# more functions and methods that change their list in place (heapq's, bisect's, a deque's)
_IN_PLACE = frozenset("""heappush heappop heapify heapreplace heappushpop insort insort_left
insort_right popleft appendleft extendleft rotate""".split())  # noqa: SIM905
# characters of an exception message (and of its notes) matched against pytest.raises(match=...);
# longer: fail (the search runs under the judge's deadline: rewards/_judge.py)
MAX_MESSAGE = 1 << 16
# an exception class of a module the tests import (`requests.exceptions.HTTPError`): at most this
# many names, this many characters; longer: pytest
MAX_EXC_PATH = (8, 200)
MAX_DEPTH = 100  # nesting of a returned value (the child sends at most 64 levels)
# rounds of the tests' for-loops the trainer unrolls into steps, in all (nested loops: every inner
# round), per plan: HumanEval+'s checks loop over up to some thousand inputs; each round costs the
# plan's build ~1 ms here (the judge's deadline grows by twice the build time)
MAX_UNROLL = 20_000
_ROUNDS = threading.local()  # .left: the rounds the plan being built may still unroll
_UNSET = object()
# distinct values with one hash in a result: more is a forged hash-collision attack
MAX_SAME_HASH = 32
# elements hashed while decoding one result (~1 s); a 1M-item honest result needs ~2M
MAX_HASH_WORK = 1 << 24


@lru_cache(maxsize=1)
def _os_for_tests() -> types.ModuleType:
    """`os` as the tests' checks see it here: only `os.path`'s text functions (PATH_TEXT), which
    compute on strings; any other name of os is the harness's (parent_expr refuses it)."""
    import posixpath
    path = types.ModuleType("os.path")
    for name in PATH_TEXT:
        setattr(path, name, getattr(posixpath, name))
    module = types.ModuleType("os")
    module.path = path
    return module


def _importable() -> dict:
    """The IMPORTABLE modules for one plan. `random` is the module's functions on a Random of the
    plan's own, seeded 0 (as is a `random.Random()` the tests make without a seed): the inputs the
    tests draw are the same in the trainer and in the judge helper, which builds the plan again, and
    the caller's global random is neither read nor advanced."""
    import importlib
    import random
    import types

    class SeededRandom(random.Random):
        def __init__(self, x=0):
            super().__init__(x)

        def seed(self, a=0, version=2):
            super().seed(a, version)

    rng = SeededRandom()
    # the module's functions: its Random's methods
    draws = {n: getattr(rng, n) for n in random.__all__
             if isinstance(getattr(getattr(random, n), "__self__", None), random.Random)}
    seeded = types.SimpleNamespace(**draws, Random=SeededRandom)
    return _Imports({n: seeded if n == "random" else importlib.import_module(n)
                     for n in IMPORTABLE})


class _Imports(dict):
    """A plan's importable modules (its own `random`, numpy's global random functions on a
    RandomState of its own: _plan_numpy), and `seeds`: which of those global states the tests
    seeded (`random.seed(42)`), the state the child was last given (_Unit.sync_draws)."""

    def __init__(self, modules):
        super().__init__(modules)
        # "random" / "numpy" -> {"sent": the child's state were the answer to draw nothing,
        # "answer": whether the answer ran since it was given}
        self.seeds = {}

    def generator(self, name):
        """The plan's generator behind `random`'s or numpy's global functions; None if not
        imported."""
        module = self.get(name)
        draw = getattr(module, "random", None) if name == "random" else getattr(
            getattr(module, "random", None), "rand", None)
        return getattr(draw, "__self__", None)

    def state(self, name) -> tuple:
        """The plan's global state `name` now, as plain data: (key, position, rest) with key the
        Mersenne Twister's 624 words (rest: random's gauss_next; numpy's kind, has_gauss,
        cached_gaussian)."""
        if name == "random":
            version, internal, gauss = self.generator(name).getstate()
            return internal[:-1], internal[-1], (version, gauss)
        kind, key, pos, has_gauss, cached = self.generator(name).get_state()
        return tuple(key.tolist()), int(pos), (kind, int(has_gauss), float(cached))


def draws_digest(key, pos, rest) -> str:
    """A global random state's digest, as the child computes it of its own (_sandbox_child's
    draws_digest, the same text)."""
    import hashlib
    return hashlib.sha256(repr((list(key), pos, list(rest))).encode()).hexdigest()


class _Steps(list):
    """A unit's steps: `before` sees each step before it is appended (_Unit.before_step)."""

    def __init__(self, steps, before):
        super().__init__(steps)
        self.before = before

    def append(self, step):
        self.before(step)
        super().append(step)


class _Returned(Exception):
    """A test function's `return`, reached: its later statements do not run."""


class _Break(Exception):
    """A `break` reached in a loop the trainer unrolls (_Unit.unroll)."""


class _Continue(Exception):
    """A `continue` reached in a loop the trainer unrolls."""


_TEST_ENDS = ast.Pass()  # in a TestCase unit's statements: the test method's end, tearDown's start


class Unconvertible(Exception):
    """This test case cannot be judged outside the sandbox: it goes to the harness."""


def _approx(*args, **kwargs):
    """pytest's own approx (inf, abs-only tolerance, nan_ok, sequences and dicts exactly as pytest
    has them), imported on first use so that a trainer without approx in its tests does not import
    pytest."""
    import pytest
    return pytest.approx(*args, **kwargs)


class _Pytest:
    approx = staticmethod(_approx)


# The test's expression runs here over values the solution chose, so the solution sets its cost (`3
# ** f(x)`, `math.gcd` of two huge ints, `sum(lists, [])`): verdicts are made in helper processes
# under a deadline and a memory limit (rewards/_judge.py), not here.
# a test's `n += v`, `d[k] = v`, `del d[k]` as the trainer runs them (_Unit.augmented,
# _Unit.item_statement): operator's functions (an in-place one: a list extended in place, an int
# rebound, as Python does), "setitem" and "delitem" returning the container they changed
IN_PLACE_OP = "__gmts_in_place"
_AUGMENTED_OPS = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.Div: "itruediv",
                  ast.FloorDiv: "ifloordiv", ast.Mod: "imod", ast.Pow: "ipow",
                  ast.LShift: "ilshift", ast.RShift: "irshift", ast.BitOr: "ior",
                  ast.BitXor: "ixor", ast.BitAnd: "iand", ast.MatMult: "imatmul"}


def _in_place(op: str, target, *args):
    if op not in _AUGMENTED_OPS.values() and op not in ("setitem", "delitem"):
        raise ValueError(op)
    result = getattr(operator, op)(target, *args)
    return target if op in ("setitem", "delitem") else result


_PARENT_GLOBALS = {"__builtins__": _SAFE_BUILTINS, **MODULES, "pytest": _Pytest,
                   IN_PLACE_OP: _in_place}


def _scope(names: dict) -> dict:
    """Globals for evaluating a test's expression here: the names also as globals, so that a
    comprehension or generator in it sees them (`''.join(choice(letters) for _ in range(n))`)."""
    return {**_PARENT_GLOBALS, **names, "__builtins__": _SAFE_BUILTINS}


# `from pytest import raises`: only ever the context of a with-statement (raises_block)
_RAISES = object()
_FROM_PYTEST = {"approx": _approx, "raises": _RAISES}


def attribute_chain(node) -> tuple:
    """`a.b.c` -> (the node of `a`, ["b", "c"]); any other node -> (node, [])."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return node, parts


# ---------------------------------------------------------------- unittest.mock's names
# What a plan reads of unittest.mock statically; the mocks themselves are the trainer's, made and
# served in rewards/mocks.py.

def unittest_mock():
    """unittest.mock, imported where a plan has mocks (not by every trainer)."""
    from unittest import mock
    return mock


# the operators a stub in the child forwards to the trainer's mock (mocks.OPERATIONS applies them)
MOCK_OPERATORS = frozenset((
    "__enter__", "__exit__", "__getitem__", "__len__", "__bool__", "__eq__", "__ne__", "__str__",
    "__int__", "__float__", "__contains__", "__lt__", "__gt__", "__le__", "__ge__", "__fspath__",
    "__next__"))
MOCK_KINDS = ("MagicMock", "Mock", "mock_open")  # the mocks a test may make
CLEANUP = "__gmts_add_cleanup"  # `self.addCleanup` in a TestCase's unit (patcher_statement)
# A side effect function of the tests' (`m.side_effect = lambda url: ...`) runs in the trainer's
# Session on the solution's arguments, live: only what costs at most linear time and memory in
# them (each argument is one line of at most 1 MiB): these builtins, these methods, `+`/`-`,
# comparisons, `if`, subscripts, f-strings without a format spec; no loop, comprehension, `*`,
# `%` or `**` (`'x' * n`, `2 ** n`), no other call, no mutation of anything but its own locals.
# (not set, dict: hash-colliding arguments would make them quadratic; not round: round(n, -10**9);
# not join: an argument as the separator of another, `sep.join(xs)`, is |sep| x len(xs))
EFFECT_BUILTINS = frozenset("""len str int float bool isinstance abs min max sorted list tuple any
all""".split())  # noqa: SIM905
EFFECT_METHODS = frozenset("""startswith endswith lower upper strip lstrip rstrip split rsplit
splitlines get keys values items find rfind count index isdigit isalpha isalnum isspace encode
decode pop""".split())  # noqa: SIM905
# `next(it)` over `it = iter([...])` in a side effect: the trainer's mocks run it on the list
NEXT_ITEM = "__gmts_next"
_EFFECT_NODES = (ast.If, ast.Return, ast.Pass, ast.Assign, ast.Constant, ast.Name, ast.Attribute,
                 ast.Compare, ast.BoolOp, ast.UnaryOp, ast.IfExp, ast.Subscript, ast.Slice,
                 ast.Tuple, ast.List, ast.Dict, ast.Set, ast.JoinedStr, ast.FormattedValue,
                 ast.BinOp, ast.Call, ast.keyword, ast.Raise, ast.Load, ast.Store, ast.cmpop,
                 ast.boolop, ast.Not, ast.USub, ast.UAdd, ast.Add, ast.Sub, ast.arguments,
                 ast.arg, ast.Expr, ast.FunctionDef, ast.Lambda)


class MockRef:
    """A name of the test's bound to the recipe's mock `id` (in the plan's env)."""

    def __init__(self, id_: int):
        self.id = id_

    def __repr__(self):
        return f"MockRef({self.id})"


class ValueRef:
    """A check's name bound to the recipe's value `id` (a mutable value configuring a mock),
    read from the run's mocks while judging: what the solution did to it is unittest's too."""

    def __init__(self, id_: int):
        self.id = id_

    def __repr__(self):
        return f"ValueRef({self.id})"


class MockApi:
    """unittest.mock's names in the plan's env (`patch`, `MagicMock`...): markers the plan reads
    statically; evaluating one here is not a mock."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr):
        if self.name == "patch" and attr in ("object", "dict", "stopall"):
            return MockApi(f"patch.{attr}")
        raise AttributeError(attr)

    def __call__(self, *args, **kwargs):
        raise Unconvertible(f"unittest.mock: {self.name}(...) where the trainer cannot make it")


def mock_namespace() -> dict:
    """What `from unittest.mock import X` binds for the plan: markers, and the real `call`,
    `ANY`, `DEFAULT` and `sentinel` (values the tests' asserts compare with)."""
    out = {n: MockApi(n) for n in ("patch", "MagicMock", "Mock", "mock_open")}
    mock = unittest_mock()
    out.update(call=mock.call, ANY=mock.ANY, DEFAULT=mock.DEFAULT, sentinel=mock.sentinel)
    return out


class MockModule:
    """`from unittest import mock`: `mock.patch`, `mock.call`..."""

    def __init__(self):
        for k, v in mock_namespace().items():
            setattr(self, k, v)

    def __getattr__(self, attr):
        raise AttributeError(attr)


# ---------------------------------------------------------------- plain data across the boundary


def decode(value):
    """The child's tagged JSON back to the exact Python value (see _sandbox_child.encode). Only
    plain types can come out of json.loads, so no object with its own __eq__ can reach a comparison
    here. The cost is linear in the report: nesting is bounded, and a result holding many distinct
    values of one hash (which would make building or comparing sets quadratic, here or in the test's
    own `set(result)`) is refused."""
    decoder = _Decoder()
    out = decoder.decode(value, 0)
    _check_collisions(decoder.hashable)
    return out


# ints below this hash to themselves: distinct ones never collide (but -1 and -2 do)
_SMALL_INT = 1 << 60


class _Decoder:
    def __init__(self):
        # values whose hash a solution can steer: big ints, floats, complex, tuples, frozensets
        self.hashable = []
        self.nodes = 0  # values decoded so far
        self.work = 0  # elements hash() will visit: a tuple re-hashes its nested tuples every time

    def decode(self, value, depth):
        self.nodes += 1
        if depth > MAX_DEPTH:
            raise ValueError("result nested too deep")
        if isinstance(value, list):
            return self.items(value, depth)
        if isinstance(value, dict):
            if len(value) != 1:
                raise ValueError(f"malformed result {str(value)[:100]}")
            (tag, inner), = value.items()
            if tag == "int":  # big ints travel in hex: linear both ways, and no 4,300-digit limit
                return self.steerable(int(inner, 16))
            if tag in ("tuple", "set", "frozenset"):
                first = self.nodes
                items = self.items(inner, depth)
                if tag == "tuple":
                    return self.steerable(tuple(items), cost=self.nodes - first)
                # before the set is built: building it is the quadratic part
                _check_collisions(items)
                made = set(items) if tag == "set" else frozenset(items)
                return made if tag == "set" else self.steerable(made)  # a frozenset caches its hash
            if tag == "dict":
                pairs = [(self.decode(k, depth + 1), self.decode(v, depth + 1)) for k, v in inner]
                _check_collisions([k for k, _ in pairs])
                return dict(pairs)
            if tag in ("Counter", "OrderedDict", "defaultdict", "deque", "namedtuple",
                       *_WRAPPERS):
                return self.stdlib(tag, inner, depth)
            if tag == "float" and inner in ("inf", "-inf", "nan"):
                return float(inner)
            if tag == "bytes":
                return bytes.fromhex(inner)
            if tag in _EXACT:
                return self.exact(tag, inner, depth)
            if tag == "complex":
                return self.steerable(complex(self.decode(inner[0], depth + 1),
                                              self.decode(inner[1], depth + 1)))
            if tag == "sub":
                return self.subclass(inner, depth)
            if tag in ("frame", "series", "pdindex", "pdrange", "pdmulti"):
                return self.pandas(tag, inner, depth)
            raise ValueError(f"unknown result tag {tag!r}")
        if type(value) is int:
            return value if -_SMALL_INT < value < _SMALL_INT else self.steerable(value)
        if type(value) is float:
            return self.steerable(value)
        # str hashes are salted per process: no forged collisions
        if type(value) in (type(None), bool, str):
            return value
        raise ValueError(f"malformed result of type {type(value).__name__}")

    def stdlib(self, tag, inner, depth):
        """collections' value types, rebuilt as what they are (a namedtuple as one of ours, same
        fields)."""
        def pairs(items):
            made = [(self.decode(k, depth + 1), self.decode(v, depth + 1)) for k, v in items]
            _check_collisions([k for k, _ in made])
            return made
        if tag == "Counter":
            return collections.Counter(dict(pairs(inner)))
        if tag == "OrderedDict":
            return collections.OrderedDict(pairs(inner))
        if tag == "defaultdict":
            factory, items = inner
            if factory not in _FACTORIES:
                raise ValueError(f"defaultdict factory {factory!r}")
            return collections.defaultdict(_FACTORIES[factory], pairs(items))
        if tag in _WRAPPERS:
            data = self.decode(inner, depth + 1)
            if tag == "ChainMap":
                if type(data) is not list or not all(type(m) is dict for m in data):
                    raise ValueError("malformed ChainMap")
                return collections.ChainMap(*data)
            if type(data) is not _WRAPPERS[tag]:
                raise ValueError(f"malformed {tag}")
            return getattr(collections, tag)(data)
        if tag == "deque":
            items, maxlen = inner
            if maxlen is not None and type(maxlen) is not int:
                raise ValueError("deque maxlen")
            return collections.deque(self.items(items, depth), maxlen)
        name, fields, items = inner
        return self.steerable(_namedtuple(name, tuple(fields))(*self.items(items, depth)))

    def subclass(self, inner, depth):
        """A value of a subclass of the solution's (`class Stack(list)`): its base's data, rebuilt
        as an object of a plain subclass of ours of that name (equal as the base compares, `type(r)
        is list` false as under pytest; none of the solution's code)."""
        if type(inner) is not list or len(inner) != 2 or type(inner[0]) is not str or not (
                inner[0].replace(".", "_").isidentifier()):
            raise ValueError("malformed subclass value")
        name, value = inner[0], self.decode(inner[1], depth + 1)
        base = type(value)
        if base not in _SUBCLASSABLE and not (base.__bases__ == (tuple,)
                                              and hasattr(base, "_fields")):
            raise ValueError(f"a subclass of {base.__name__}")
        cls = _plain_subclass(base, name)
        if base is collections.defaultdict:
            return cls(value.default_factory, value)
        if base is collections.deque:
            return cls(value, value.maxlen)
        if base is collections.ChainMap:
            return cls(*value.maps)
        return cls._make(value) if base not in _SUBCLASSABLE else cls(value)

    def exact(self, tag, inner, depth):
        """bytearray, Fraction, Decimal, dict views and enum members, rebuilt as what they are (an
        enum member as an _EnumMember: equal to a member of the same class and name, and, where the
        member was an int or str (IntEnum, StrEnum), to its value, as Python compares them)."""
        if tag == "bytearray":
            return bytearray.fromhex(inner)
        if tag == "Fraction":
            num, den = (int(x, 16) for x in inner)
            return self.steerable(fractions.Fraction(num, den))
        if tag == "sympy":  # sympy's Integer or Rational, made by sympy here
            num, den = (int(x, 16) for x in inner)
            if den <= 0:
                raise ValueError("malformed sympy number")
            import sympy
            return self.steerable(sympy.Integer(num) if den == 1 else sympy.Rational(num, den))
        if tag == "Decimal":
            if type(inner) is not str or len(inner) > 10_000:
                raise ValueError("malformed Decimal")
            return self.steerable(decimal.Decimal(inner))
        if tag == "enum":
            cls, name, value, like_value = inner
            if type(cls) is not str or type(name) is not str or type(like_value) is not bool:
                raise ValueError("malformed enum member")
            return self.steerable(_EnumMember(cls, name, self.decode(value, depth + 1),
                                              like_value))
        if tag in ("range", "date", "datetime", "time", "timedelta", "ndarray", "npscalar",
                   "path"):
            return self.other(tag, inner, depth)
        items = self.items(inner, depth)
        if tag == "dict_items":
            if not all(type(p) is tuple and len(p) == 2 for p in items):
                raise ValueError("malformed dict items")
            _check_collisions([k for k, _ in items])
            return dict(items).items()
        if tag == "dict_keys":
            _check_collisions(items)
            return dict.fromkeys(items).keys()
        return dict(enumerate(items)).values()

    def other(self, tag, inner, depth):
        """range, datetime's values, pathlib's paths, numpy arrays and scalars, rebuilt here from
        their data."""
        if tag == "path":
            if not (type(inner) is list and len(inner) == 2 and inner[0] in _PATHS
                    and type(inner[1]) is str and len(inner[1]) <= 65_536):
                raise ValueError("malformed path")
            import pathlib
            return self.steerable(getattr(pathlib, _PATHS[inner[0]])(inner[1]))
        if tag == "range":
            parts = [self.decode(v, depth + 1) for v in inner]
            if len(parts) != 3 or not all(type(p) is int for p in parts):
                raise ValueError("malformed range")
            return range(*parts)
        if tag == "timedelta":
            if type(inner) is not list or len(inner) != 3 or not all(type(p) is int
                                                                     for p in inner):
                raise ValueError("malformed timedelta")
            return self.steerable(datetime.timedelta(*inner))
        if tag in ("date", "datetime", "time"):
            if type(inner) is not str or len(inner) > 64:
                raise ValueError(f"malformed {tag}")
            return self.steerable(getattr(datetime, tag).fromisoformat(inner))
        if tag == "npscalar":  # np.True_ is not True, np.int64 is no int: as under pytest
            dtype, item = inner
            item = self.decode(item, depth + 1)
            if type(dtype) is not str or not _DTYPE.fullmatch(dtype) or type(item) not in (
                    (str,) if "U" in dtype else (bool, int, float, complex)):
                raise ValueError("malformed numpy scalar")
            import numpy
            return self.steerable(numpy.dtype(dtype).type(item))
        if type(inner) is not list or len(inner) not in (3, 4):
            raise ValueError("malformed array")
        dtype, shape, items, *sub = inner
        if type(dtype) is not str or not (_DTYPE.fullmatch(dtype) or dtype == "|O") or (
                type(shape) is not list) or not all(type(n) is int and n >= 0 for n in shape) or (
                len(shape) > MAX_DEPTH) or sub and not (type(sub[0]) is str and
                                                        sub[0].isidentifier()):
            raise ValueError("malformed array")
        import numpy  # only where a solution returned an array
        if dtype == "|O":
            return _object_array(self.decode(items, depth + 1), shape)
        array = numpy.array(self.decode(items, depth + 1), dtype=numpy.dtype(dtype))
        if list(array.shape) != shape:
            raise ValueError("malformed array: its items do not have its shape")
        # a subclass of the solution's: the data as ndarray holds it, under a class of its name
        return array.view(_array_subclass(sub[0])) if sub else array

    def pandas(self, tag, inner, depth):
        """A DataFrame, Series or Index rebuilt with the trainer's pandas from its data
        (_sandbox_child._pandas_value): columns' dtypes, values, index and names."""
        import pandas
        if type(inner) is not list or len(inner) != {"pdrange": 4, "pdindex": 3, "series": 3,
                                                     "frame": 3, "pdmulti": 3}[tag]:
            raise ValueError(f"malformed {tag}")
        if tag == "pdmulti":
            levels = [self.pandas_index(v, depth) for v in inner[0]]
            codes = [self.decode(c, depth + 1) for c in inner[1]]
            names = [self.pandas_name(n, depth) for n in inner[2]]
            if not (levels and len(levels) == len(codes) == len(names) and all(
                    _is_array(c) and c.ndim == 1 and c.dtype.kind == "i" for c in codes)):
                raise ValueError("malformed MultiIndex")
            return pandas.MultiIndex(levels=levels, codes=codes, names=names,
                                     verify_integrity=True)
        if tag == "pdrange":
            *parts, name = inner
            if not all(type(p) is int for p in parts) or parts[2] == 0:
                raise ValueError("malformed RangeIndex")
            return pandas.RangeIndex(*parts, name=self.pandas_name(name, depth))
        if tag == "pdindex":
            values, dtype = self.pandas_array(inner[0], depth)
            index = pandas.Index(values, dtype=dtype, name=self.pandas_name(inner[1], depth))
            if inner[2] is None:
                return index
            if type(inner[2]) is not str or len(inner[2]) > 40 or dtype.kind not in "Mm":
                raise ValueError("malformed index frequency")
            return type(index)(index, freq=inner[2])  # checked against the dates by pandas
        index = self.pandas_index(inner[1], depth)
        if tag == "series":
            values, dtype = self.pandas_array(inner[0], depth)
            if len(values) != len(index):
                raise ValueError("malformed Series: its index has another length")
            return pandas.Series(values, index=index, dtype=dtype,
                                 name=self.pandas_name(inner[2], depth))
        columns = self.pandas_index(inner[0], depth)
        if type(inner[2]) is not list or len(inner[2]) != len(columns):
            raise ValueError("malformed DataFrame: one array per column")
        frame = pandas.DataFrame(index=index)
        for i, data in enumerate(inner[2]):
            values, dtype = self.pandas_array(data, depth)
            if len(values) != len(index):
                raise ValueError("malformed DataFrame: a column of another length")
            frame[i] = pandas.Series(values, index=index, dtype=dtype)
        frame.columns = columns
        return frame

    def pandas_name(self, name, depth):
        """A Series' or an Index's name: a hashable plain value."""
        name = self.decode(name, depth + 1)
        hash(name)
        return name

    def pandas_index(self, data, depth):
        if type(data) is not dict or len(data) != 1 or not set(data) <= {"pdindex", "pdrange",
                                                                          "pdmulti"}:
            raise ValueError("malformed pandas index")
        (tag, inner), = data.items()
        return self.pandas(tag, inner, depth + 1)

    def pandas_array(self, data, depth):
        """The values and dtype of a column or an index (_sandbox_child._pandas_array)."""
        import numpy
        import pandas
        if type(data) is not dict or len(data) != 1:
            raise ValueError("malformed pandas array")
        (tag, inner), = data.items()
        if tag == "np":
            values = self.decode(inner, depth + 1)
            if not _is_array(values) or values.ndim != 1:
                raise ValueError("malformed pandas array")
            return values, values.dtype
        if tag == "np64":
            if not (type(inner) is list and len(inner) == 2 and type(inner[0]) is str
                    and _DATES.fullmatch(inner[0])):
                raise ValueError("malformed dates")
            ints = self.decode(inner[1], depth + 1)
            if not _is_array(ints) or ints.ndim != 1 or ints.dtype != numpy.int64:
                raise ValueError("malformed dates")
            values = ints.view(numpy.dtype(inner[0]))
            return values, values.dtype
        if tag == "cat":
            if not (type(inner) is list and len(inner) == 3 and type(inner[2]) is bool):
                raise ValueError("malformed categories")
            categories = self.pandas_index(inner[0], depth)
            codes = self.decode(inner[1], depth + 1)
            if not _is_array(codes) or codes.ndim != 1 or codes.dtype.kind != "i":
                raise ValueError("malformed categories")
            values = pandas.Categorical.from_codes(codes, categories=categories,
                                                   ordered=inner[2])
            return values, values.dtype
        if tag == "ext":
            if not (type(inner) is list and len(inner) == 2 and type(inner[0]) is str):
                raise ValueError("malformed pandas array")
            try:
                dtype = pandas.api.types.pandas_dtype(inner[0])
            except TypeError:
                raise ValueError(f"malformed pandas dtype {inner[0][:40]!r}") from None
            items = self.decode(inner[1], depth + 1)
            if type(dtype).__name__ not in _PD_EXTENSIONS or not _is_array(items) or (
                    items.ndim != 1):
                raise ValueError("malformed pandas array")
            return pandas.array(items, dtype=dtype), dtype
        raise ValueError(f"unknown pandas array tag {tag!r}")

    def items(self, values, depth) -> list:
        """A list's items. Fast path, at C speed, for the common flat list of one scalar type
        (json.loads made it already): small ints, strs, floats (their hashes recorded)."""
        if type(values) is not list:
            raise ValueError(f"malformed result items of type {type(values).__name__}")
        kinds = set(map(type, values))
        if len(kinds) == 1 and (kinds <= {str, bool, type(None)}
                                or (kinds == {int} and -_SMALL_INT < min(values)
                                                                   and max(values) < _SMALL_INT)):
            self.nodes += len(values)
            return values
        if kinds == {float}:
            self.nodes += len(values)
            self.work += len(values)
            self.hashable += values
            return values
        return [self.decode(v, depth + 1) for v in values]

    def steerable(self, value, cost=1):
        self.work += cost
        if self.work > MAX_HASH_WORK:
            raise ValueError("result too costly to hash (deeply nested tuples)")
        self.hashable.append(value)
        return value


_EXACT = ("bytearray", "Fraction", "Decimal", "sympy", "enum", "dict_keys", "dict_values",
          "dict_items", "range", "date", "datetime", "time", "timedelta", "ndarray", "npscalar",
          "path")
# a pathlib path crosses as its text, rebuilt as the pure path of its flavour (nothing here touches
# a file): equal to a path of the same text, as pathlib compares them
_PATHS = {"PosixPath": "PurePosixPath", "PurePosixPath": "PurePosixPath",
          "WindowsPath": "PureWindowsPath", "PureWindowsPath": "PureWindowsPath"}
_DTYPE = re.compile(r"[<>|=]?[biufcU]\d{1,2}")  # a numpy array's dtype.str (numbers, bools, strs)
# numpy's dates and durations in a pandas column (their int64 data crosses)
_DATES = re.compile(r"[<>=]?[Mm]8\[(s|ms|us|ns)\]")
# pandas' extension dtypes of plain items (_sandbox_child._PD_EXTENSIONS)
_PD_EXTENSIONS = ("Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype", "UInt8Dtype",
                  "UInt16Dtype", "UInt32Dtype", "UInt64Dtype", "Float32Dtype", "Float64Dtype",
                  "BooleanDtype", "StringDtype")


def _object_array(items, shape: list):
    """An object array of `shape` from its tolist(): the first len(shape) levels of lists are the
    array's, what lies below them its items (a list item stays one object)."""
    import numpy
    level = [items]
    for n in shape:
        if not all(type(v) is list and len(v) == n for v in level):
            raise ValueError("malformed array: its items do not have its shape")
        level = [x for v in level for x in v]
    array = numpy.empty(len(level), dtype=object)
    for i, v in enumerate(level):
        array[i] = v
    return array.reshape(shape)


class _EnumMember:
    """An enum member a solution returned, here: its class's name, its name, its value."""
    __slots__ = ("cls", "like_value", "name", "value")

    def __init__(self, cls, name, value, like_value):
        self.cls, self.name, self.value, self.like_value = cls, name, value, like_value

    def __eq__(self, other):
        if type(other) is _EnumMember:
            return (self.cls, self.name) == (other.cls, other.name)
        return self.like_value and self.value == other

    def __hash__(self):
        return hash(self.value) if self.like_value else hash((self.cls, self.name))

    def __repr__(self):
        return f"<{self.cls}.{self.name}: {self.value!r}>"


_FACTORIES = {None: None,
              **{n: getattr(builtins, n) for n in ("list", "int", "set", "dict", "str", "float",
                                                                 "tuple", "bool")}}


@lru_cache(maxsize=1024)
def _namedtuple(name: str, fields: tuple):
    """A namedtuple class of ours (namedtuple refuses names and fields that are not identifiers)."""
    if type(name) is not str or not all(type(f) is str for f in fields) or len(fields) > 255:
        raise ValueError("malformed namedtuple")
    return collections.namedtuple(name, fields)


def _hash(value):
    try:
        return hash(value)
    except TypeError:  # a tuple holding a list: cannot go into a set either
        return None


def _both_nan(a, b) -> bool:
    return a != a and b != b  # noqa: PLR0124 - only nan differs from itself


def _check_collisions(values):
    """Refuse more than MAX_SAME_HASH distinct values sharing one hash. Numbers, and tuples of them,
    hash alike in every process, so a solution can make thousands collide (a 2-tuple's hash can be
    steered to any value through its second item). Counting hashes runs at C speed; only a hash seen
    that often (an honest result repeating one value) is looked at value by value."""
    hashes = list(map(_hash, values))
    hot = {h for h, n in collections.Counter(hashes).items() if n > MAX_SAME_HASH and h is not None}
    for key in hot:
        distinct = []
        for h, v in zip(hashes, values):
            if h == key and not any(type(d) is type(v) and (d == v or _both_nan(d, v))
                                    for d in distinct):
                distinct.append(v)
                if len(distinct) > MAX_SAME_HASH:
                    raise ValueError(f"more than {MAX_SAME_HASH} distinct values share the hash "
                                     f"{key}")


# characters of an input sent as source; a bigger one travels as data (encode_input)
MAX_LITERAL = 100_000


def encode_input(value):
    """An input the trainer computed, as the child's tagged JSON (the format of its results; the
    child's decode_input rebuilds it): flat lists of small ints, strs or finite floats as they
    are."""
    kind = type(value)
    if kind is list and value:
        kinds = set(map(type, value))
        if kinds in ({str},
                     {bool}) or (kinds == {int} and -(1 << 62) < min(value)
                                 and max(value) < 1 << 62) or (
                kinds == {float} and all(map(math.isfinite, value))):
            return value
    if kind is int and value.bit_length() > 62:
        return {"int": hex(value)}
    if kind in (type(None), bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [encode_input(v) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode_input(v) for v in value]}
    if kind is dict:
        return {"dict": [[encode_input(k), encode_input(v)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [encode_input(value.real), encode_input(value.imag)]}
    raise Unconvertible(f"input of type {kind.__name__} cannot be sent as data")


def render(value) -> str:
    """A plain value as Python source the child can evaluate (an INPUT the trainer computed)."""
    kind = type(value)
    if kind in (type(None), bool, str, bytes, complex):
        return repr(value)
    if kind is int:  # hex: repr() refuses ints over 4,300 digits
        return repr(value) if value.bit_length() < 4000 else hex(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else f"float({repr(value)!r})"
    if kind is list:
        return "[" + ", ".join(map(render, value)) + "]"
    if kind is tuple:
        return "(" + "".join(render(v) + ", " for v in value) + ")"
    if kind is dict:
        return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in value.items()) + "}"
    if kind in (set, frozenset):
        return f"{kind.__name__}([" + ", ".join(map(render, value)) + "])"
    if kind in (fractions.Fraction, decimal.Decimal):  # exact, from the child's own module
        module = kind.__module__
        args = (f"{render(value.numerator)}, {render(value.denominator)}"
                if kind is fractions.Fraction else repr(str(value)))
        return f"__gmts_builtins['__import__']({module!r}).{kind.__name__}({args})"
    if kind is range:
        return f"__gmts_builtins['range']({value.start!r}, {value.stop!r}, {value.step!r})"
    if _is_array(value):  # numbers, bools or strs, rebuilt in the child by its numpy
        if value.dtype.kind not in "biufcU" or value.size > MAX_LITERAL // 10:
            raise Unconvertible("an array input of objects, dates or over 10,000 items")
        return (f"__gmts_builtins['__import__']('numpy').array({render(value.tolist())}, "
                f"dtype={value.dtype.str!r}).reshape({render(tuple(value.shape))})")
    if kind is datetime.timedelta:
        parts = f"{value.days!r}, {value.seconds!r}, {value.microseconds!r}"
        return f"__gmts_builtins['__import__']('datetime').timedelta({parts})"
    if kind in (datetime.date, datetime.datetime, datetime.time) and (
            getattr(value, "tzinfo", None) in (None, datetime.timezone.utc)):
        return (f"__gmts_builtins['__import__']('datetime').{kind.__name__}"
                f".fromisoformat({value.isoformat()!r})")
    if _is_pandas(value):
        return _render_pandas(value)
    if kind.__module__ == "numpy" and getattr(value, "dtype", None) is not None and (
            value.dtype.kind in "biufc"):  # a numpy scalar (`list(arr)`'s items): its dtype kept
        return (f"__gmts_builtins['__import__']('numpy').dtype({value.dtype.str!r})"
                f".type({render(value.item())})")
    if isinstance(value, type) and getattr(builtins, value.__name__, None) is value:
        return f"__gmts_builtins[{value.__name__!r}]"  # `t = int`: as before the solution ran
    path = stdlib_class(value) if isinstance(value, type) else None
    if path is not None:  # resolved in the child before the solution runs (resolve_stdlib)
        return f"__gmts_classes[{path!r}]"
    raise Unconvertible(f"input of type {kind.__name__} cannot be sent as a literal")


# modules whose classes the tests may pass to the answer's values (`isinstance(r, types.X)`)
STDLIB_CLASSES = ("types", "collections.abc", "collections", "numbers", "datetime", "decimal",
                  "fractions", "enum", "io", "pathlib", "re")


def stdlib_class(value) -> str | None:
    """`module:Name` of a class of STDLIB_CLASSES (`types:GeneratorType`), or None."""
    import importlib
    for module in STDLIB_CLASSES:
        names = vars(importlib.import_module(module))
        name = next((n for n, v in names.items() if v is value and not n.startswith("_")), None)
        if name is not None:
            return f"{module}:{name}"
    return None


_PANDAS = ("DataFrame", "Series", "Index", "RangeIndex", "DatetimeIndex", "TimedeltaIndex",
           "MultiIndex")


def _is_pandas(value) -> bool:
    """A pandas DataFrame, Series or Index (exactly: not a subclass), recognised without importing
    pandas."""
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ in _PANDAS and (module == "pandas" or module.startswith("pandas."))


def _render_pandas(value) -> str:
    """A DataFrame, Series or Index the tests pass in, as source the child's pandas rebuilds it
    from: each column's dtype and items, the index, the names (up to 10,000 items)."""
    pd = "__gmts_builtins['__import__']('pandas')"
    name = type(value).__qualname__
    if name == "RangeIndex":
        return (f"{pd}.RangeIndex({value.start!r}, {value.stop!r}, {value.step!r}, "
                f"name={render(value.name)})")
    if name == "MultiIndex":
        levels = ", ".join(_render_pandas(v) for v in value.levels)
        codes = render([c.tolist() for c in value.codes])
        return (f"{pd}.MultiIndex(levels=[{levels}], codes={codes}, "
                f"names={render(list(value.names))})")
    if name != "DataFrame":
        values = _render_pandas_array(value, pd)
        if name == "Series":
            return (f"{pd}.Series({values}, name={render(value.name)})"
                    f".set_axis({_render_pandas(value.index)})")
        freq = getattr(value, "freqstr", None) if name != "Index" else None
        return (f"{pd}.Index({values}, name={render(value.name)})" if freq is None else
                f"{pd}.{name}({values}, name={render(value.name)}, freq={freq!r})")
    if value.size > MAX_LITERAL // 10:
        raise Unconvertible("a DataFrame input of over 10,000 items")
    columns = ", ".join(f"{i}: {_render_pandas_array(value.iloc[:, i], pd)}"
                        for i in range(value.shape[1]))
    return (f"{pd}.DataFrame({{{columns}}}).set_axis({_render_pandas(value.index)})"
            f".set_axis({_render_pandas(value.columns)}, axis=1)")


def _render_pandas_array(values, pd: str) -> str:
    """The values of a column or an index as source (their dtype kept); Unconvertible for a dtype
    the child's data cannot carry (time zones, periods, intervals, objects that are no data)."""
    if len(values) > MAX_LITERAL // 10:
        raise Unconvertible("a pandas input of over 10,000 items")
    dtype = values.dtype
    module, kind = type(dtype).__module__, type(dtype).__name__
    if module.startswith("numpy") and dtype.kind in "biufcO":
        items = values.to_numpy().tolist()
        return f"{pd}.array({render(items)}, dtype={str(dtype)!r})"
    if module.startswith("numpy") and _DATES.fullmatch(dtype.str):
        ints = render(values.to_numpy().view("i8").tolist())
        return (f"__gmts_builtins['__import__']('numpy').array({ints}, dtype='i8')"
                f".view({dtype.str!r})")
    if kind == "CategoricalDtype":
        codes = render(values.array.codes.tolist())
        return (f"{pd}.Categorical.from_codes({codes}, categories="
                f"{_render_pandas(values.array.categories)}, ordered={dtype.ordered is True!r})")
    if kind in _PD_EXTENSIONS:
        items = render(values.to_numpy(dtype=object, na_value=None).tolist())
        return f"{pd}.array({items}, dtype={str(dtype)!r})"
    raise Unconvertible(f"a pandas input of dtype {str(dtype)[:40]}")


# collections' wrappers, and the type of what each wraps
_WRAPPERS = {"UserList": list, "UserDict": dict, "UserString": str, "ChainMap": list}
# the plain types whose subclasses of the solution's cross as their data
# (_sandbox_child._subclassed)
_SUBCLASSABLE = (int, float, complex, str, bytes, bytearray, list, tuple, set, frozenset, dict,
                 collections.Counter, collections.OrderedDict, collections.defaultdict,
                 collections.deque, collections.UserList, collections.UserDict,
                 collections.UserString, collections.ChainMap)


@lru_cache(maxsize=256)
def _plain_subclass(base: type, name: str) -> type:
    """A plain subclass of `base` named as the solution's class (`isinstance(r, list)` holds,
    `type(r) is list` does not, as under pytest; none of its code)."""
    return type(name.rpartition(".")[2], (base,), {"__module__": "solution", "__qualname__": name})


@lru_cache(maxsize=64)
def _array_subclass(name: str) -> type:
    """A plain subclass of numpy.ndarray named as the solution's (`isinstance(r, np.ndarray)`
    holds, `type(r) is np.ndarray` does not, as under pytest; none of its code)."""
    import numpy
    return type(name, (numpy.ndarray,), {"__module__": "solution"})


def _is_array(value) -> bool:
    """A numpy array (exactly: not a subclass), recognised without importing numpy."""
    kind = type(value)
    return kind.__name__ == "ndarray" and kind.__module__ == "numpy"


def _is_generator_of_draws(value) -> bool:
    """A random.Random, or numpy's RandomState or Generator (the plan's global ones among them)."""
    numpy = sys.modules.get("numpy")
    return isinstance(value, random.Random) or numpy is not None and isinstance(
        value, (numpy.random.RandomState, numpy.random.Generator))


def _is_mutable(value) -> bool:
    """Does the value hold a list, dict, set or numpy array anywhere (an argument the solution
    could change in place)?"""
    if type(value) in (list, dict, set) or _is_array(value) or _is_pandas(value):
        return True
    if type(value) in (tuple, frozenset):
        return any(_is_mutable(v) for v in value)
    return False


def _changeable(value) -> bool:
    """Could the tests change the value in place (_is_mutable, a deque, a bytearray)?"""
    return _is_mutable(value) or isinstance(value, (collections.deque, bytearray))


def _more_items_than(value, limit: int) -> bool:
    """Does `value` hold more than `limit` items, nested ones counted (stops counting past the
    limit)?"""
    stack, seen = [value], 0
    while stack:
        v = stack.pop()
        if type(v) in (list, tuple, set, frozenset, dict):
            seen += len(v)
            if seen > limit:
                return True
            if not _flat(v):
                stack.extend(v.items() if type(v) is dict else v)
    return False


_SCALAR_TYPES = {int, str, float, bool, type(None), bytes, complex}


def _flat(value) -> bool:
    """A container of scalars only (checked at C speed)."""
    return set(map(type, value.keys() if type(value) is dict else value)) <= _SCALAR_TYPES and (
        type(value) is not dict or set(map(type, value.values())) <= _SCALAR_TYPES)


def _contains(value, targets: set) -> bool:
    """Is one of the objects with ids `targets` part of `value` (identity, not equality)?"""
    if id(value) in targets:
        return True
    if not targets or type(value) not in (list, tuple, set, frozenset, dict) or _flat(value):
        return False
    if type(value) in (list, tuple, set, frozenset):
        return any(_contains(v, targets) for v in value)
    if type(value) is dict:
        return any(_contains(v, targets) for v in value.values())
    return False


def _returns_in(node) -> bool:
    """Does the statement hold a `return` of its own function (not of a def or lambda in it)?"""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            return True
        stack += [c for c in ast.iter_child_nodes(n)
                  if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                        ast.ClassDef))]
    return False


# the builtin classes that catch a failure marker's exception (AssertionError; pytest.fail's)
_CATCH_ASSERT = frozenset(("AssertionError", "Exception", "BaseException"))


def _try_as_raises(stmt: ast.Try) -> list:
    """`try: S; <fail> except E as e: H` (or the fail in `else:`), <fail> one of `assert False`,
    `pytest.fail(...)`, `raise AssertionError(...)` (`self.fail` is `assert False` by then): the
    same test as `with pytest.raises(E) as c: S` then H reading `c.value` for `e` (raises_block),
    where E cannot catch the fail itself. Without a fail, S may also end normally: the with-block
    is marked `gmts_optional` (H then counts only where S raised). Any other try:
    Unconvertible."""
    def fail(s):
        if isinstance(s, ast.Assert):
            return "AssertionError" if isinstance(s.test, ast.Constant) and not s.test.value else ""
        if isinstance(s, ast.Raise) and s.cause is None and s.exc is not None:
            exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
            return "AssertionError" if ast.unparse(exc) == "AssertionError" else ""
        return "BaseException" if (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                                   and ast.unparse(s.value.func) == "pytest.fail") else ""
    if len(stmt.handlers) != 1 or stmt.finalbody or stmt.handlers[0].type is None:
        raise Unconvertible("a try other than one `except E` and no finally")
    handler = stmt.handlers[0]
    body, caught = stmt.body, handler.type
    in_body = fail(body[-1]) if len(body) > 1 else ""
    in_else = len(stmt.orelse) == 1 and fail(stmt.orelse[0])
    if stmt.orelse and not in_else:
        raise Unconvertible("a try whose else is more than a failure")
    if in_body:
        body = body[:-1]
        names = {ast.unparse(e) for e in (caught.elts if isinstance(caught, ast.Tuple)
                                          else [caught])}
        if names & (_CATCH_ASSERT if in_body == "AssertionError" else {"BaseException"}):
            raise Unconvertible("a try whose except catches its own failure")
    var = f"__caught_{handler.name}" if handler.name else None
    raises = ast.Call(func=ast.Attribute(value=ast.Name(id="pytest", ctx=ast.Load()),
                                         attr="raises", ctx=ast.Load()),
                      args=[caught], keywords=[])
    item = ast.withitem(context_expr=raises,
                        optional_vars=ast.Name(id=var, ctx=ast.Store()) if var else None)

    class Caught(ast.NodeTransformer):  # `e` -> `c.value`
        def visit_Name(self, node):
            if node.id != handler.name:
                return node
            if not isinstance(node.ctx, ast.Load):
                raise Unconvertible(f"the caught {handler.name!r} rebound")
            return ast.Attribute(value=ast.Name(id=var, ctx=ast.Load()), attr="value",
                                 ctx=ast.Load())
    after = [Caught().visit(s) for s in handler.body] if var else handler.body
    block = ast.fix_missing_locations(ast.copy_location(ast.With(items=[item], body=body), stmt))
    block.gmts_optional = not (in_body or in_else)
    return [block, *after]


def _side_effect_functions(method) -> set:
    """The ids of the lambdas and local function definitions (and what they hold) in `method`
    that serve only as a mock's side effect (`m.side_effect = lambda p: ...`, `def fake(url):
    ...` then `m.side_effect = fake`, `patch(..., side_effect=fake)`), which _Unit.side_effect
    judges; any other use of a name a local def binds: none of its."""
    uses, defs, out = {}, {}, set()
    for n in ast.walk(method):
        if isinstance(n, ast.FunctionDef) and n is not method:
            defs[n.name] = n
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            uses.setdefault(n.id, []).append(n)
    effect = set()  # the ids of the values given as side effects
    for n in ast.walk(method):
        if isinstance(n, ast.keyword) and n.arg == "side_effect" or (
                isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(
                    n.targets[0], ast.Attribute) and n.targets[0].attr == "side_effect"):
            effect.add(id(n.value))
    for n in ast.walk(method):
        if isinstance(n, ast.Lambda) and id(n) in effect:
            out.update(id(x) for x in ast.walk(n))
    for name, fn in defs.items():
        if uses.get(name) and all(id(u) in effect for u in uses[name]):
            out.update(id(x) for x in ast.walk(fn))
    return out


def _inner_ids(value) -> set:
    """The ids of the mutable objects inside `value` (not its own)."""
    out, stack = set(), [value]
    while stack:
        v = stack.pop()
        items = v.values() if type(v) is dict else v if type(v) in (list, tuple, set) else ()
        for x in items:
            if type(x) in (list, dict, set, bytearray):
                out.add(id(x))
            if type(x) in (list, dict, tuple):
                stack.append(x)
    return out


def _code_names(code) -> set:
    """The names a compiled check reads (its nested code objects' too: a comprehension's)."""
    out, stack = set(), [code]
    while stack:
        c = stack.pop()
        out.update(c.co_names, c.co_varnames)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return out


def _once(value) -> bool:
    """Every mutable object inside `value` appears once (rendered for the child, a list held
    twice would become two)."""
    seen = set()

    def walk(v):
        if _is_array(v):
            if id(v) in seen:
                return False
            seen.add(id(v))
        if type(v) not in (list, tuple, dict, set, frozenset) or _flat(v):
            return True
        if _is_mutable(v):
            if id(v) in seen:
                return False
            seen.add(id(v))
        return all(walk(x) for x in (v.values() if type(v) is dict else v))
    return walk(value)


# ---------------------------------------------------------------- plan


@dataclass
class Check:
    # "assert": expr over placeholders | "bind": names = expr | "raises": step `step` raised
    # | "run": expr evaluated, passes unless it raises (a helper of the tests' with its asserts)
    # `exceptions`
    kind: str
    expr: object = None
    env: dict = field(default_factory=dict)
    step: int = -1
    exceptions: tuple = ()  # ((name, origin), ...): origin "builtins" or "solution"
    match: str | None = None
    names: tuple = ()  # "bind": the target names (a tuple target is unpacked)
    at: int = -1  # the unit's steps before it: a check reading a mock comes after every call
    # names read from the run's mocks (ValueRef in env) -> the objects the test bound them to
    plan_values: dict = field(default_factory=dict)
    # "raises" with `as name` (names): "pytest" (name.value) or "unittest" (name.exception)
    info: str = ""
    optional: bool = False  # "raises" of a test's try without a failure: not raising passes too
    if_raised: int = -1  # a check of that try's `except`: judged only where step if_raised raised


@dataclass
class Unit:
    steps: list  # sent to the child
    checks: list  # kept here
    name: str = ""


@dataclass
class Plan:
    units: list
    harness: str | None  # tests source still to run inside (untrusted), or None
    trusted: int  # test cases judged here
    untrusted: int  # test cases left to the harness
    unjudged: int = 0  # test cases that can be neither judged nor run: the run scores 0
    # the tests the harness must report as run ("test_x", "TestC.test_y", "check")
    harness_tests: tuple = ()
    # what the harness passes to check(): the entry point, or check(add)'s
    check_candidate: str | None = None
    # seconds the plan took to build here: the judge builds it again (the tests' cost, not the
    # solution's: HumanEval+'s hundreds of inputs), so its deadline grows by that
    build_seconds: float = 0.0
    # why the first part left to the harness could not be judged here ("" when none was): what
    # a refusal under trusted_only says
    refusal: str = ""
    # unittest.mock's mocks the tests make and configure, as data (rewards/mocks.py): ["new", id,
    # kind, {keyword: value}] and ["set", id, attribute path, value]
    mocks: list = field(default_factory=list)


def _names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound_inside(node) -> set:
    """Names bound by comprehensions and lambdas inside an expression (local to it)."""
    bound = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            bound |= _names(n.target)
        elif isinstance(n, ast.Lambda):
            a = n.args
            bound |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]
                      if x}
    return bound


def _stored(node) -> set:
    """Names a statement assigns (a test's locals)."""
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _last_name(node) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node,
                                                                              ast.Attribute) else ""


def _in_place_call(op: str, *args) -> ast.Call:
    """`__gmts_in_place(op, *args)` (IN_PLACE_OP)."""
    return ast.Call(func=ast.Name(id=IN_PLACE_OP, ctx=ast.Load()), keywords=[],
                    args=[ast.Constant(value=op), *args])


def _root(node):
    """The node an item or attribute chain starts from (`d['a'].x[0]` -> `d`)."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node


def _target_names(target) -> list:
    """The names an assignment or loop target binds: a name or (nested) tuples of names."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _target_names(t)]
    if isinstance(target, ast.Starred):  # `a, *rest = ...`
        return _target_names(target.value)
    raise Unconvertible("assignment to something other than names")


def _unpack(target, value) -> list:
    """(name, value) pairs as Python binds `target = value` (a starred target: the sandbox's)."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    starred = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
    try:
        values = list(iter(value) if starred else itertools.islice(iter(value),
                                                                     len(target.elts) + 1))
    except TypeError:
        raise Unconvertible("unpacking a value that is not iterable") from None
    if starred:  # `a, *rest, z = v`: the starred name a list of what the others leave
        k, after = starred[0], len(target.elts) - starred[0] - 1
        if len(starred) > 1 or len(values) < len(target.elts) - 1:
            raise Unconvertible("unpacking of the wrong length")
        values = [*values[:k], values[k:len(values) - after], *values[len(values) - after:]]
        target = ast.Tuple(elts=[t.value if isinstance(t, ast.Starred) else t
                                 for t in target.elts], ctx=ast.Store())
    if len(values) != len(target.elts):
        raise Unconvertible("unpacking of the wrong length")
    return [pair for t, v in zip(target.elts, values) for pair in _unpack(t, v)]


class _Unit:
    """Converts one test case's statements; raises Unconvertible at the first thing it cannot judge
    outside.

    Names live in one of three places. env: values computed here (literals, parametrize rows,
    child-free assignments). child: names bound in the sandbox (the solution's; results assigned by
    the test; mutable inputs once passed to the solution, since it may change them in place).
    deferred: names the test assigned from an expression mixing both, computed here while judging.
    `objects` are the child names holding instances of the solution's classes (`s = Stack()`): their
    methods and attributes are the solution's code and run there."""

    def __init__(self, env: dict, child: set, prelude: list, modules=frozenset(), imports=None,
                 functions=frozenset(), module_level=frozenset(), setup=frozenset()):
        self.env, self.child = dict(env), set(child)
        self.setup = setup  # the problem's setup's functions and classes (the expected side's)
        # the test module's own names (not the test's locals): a mutable one, once the solution
        # gets it, is one object for every later test too, as in pytest
        self.module_level = module_level
        self.functions = functions  # capitalised names that are functions at run time
        self.returns = False  # a test function's body: `return` ends it (_Returned)
        self.solution_names = set(child)  # the solution's own names (and check's candidate)
        self.results = set()  # names bound in the child to what a call of the solution's returned
        self.made = itertools.count()  # the names of values a check's calls made now (made_now)
        self.imports = imports if imports is not None else _importable()
        # `import solution`: its attributes are the solution's
        self.objects, self.deferred = set(modules), set()
        self.solution_modules = frozenset(modules)  # `import solution [as s]`: its names
        self.steps = _Steps([{"run": s} for s in prelude], self.before_step)
        self.moved = []  # (value, child name): containers bound in the child (kept: their ids)
        self.moved_paths = {}  # id of each mutable value inside those: its path in the child
        self.first = len(self.steps)  # the test's own steps start here
        self.checks = []
        # unittest.mock allowed (a TestCase's unit): the plan's recipe, appended to (mocks.py)
        self.mock_recipe = None
        # names bound to a mock's attribute path before the solution ran (`conn =
        # m.return_value.__enter__.return_value`): configuring through them configures that path
        self.mock_aliases = {}
        # the mutable values configuring the plan's mocks, shared by its units (mocks.Session's
        # values): id -> (value id, the object, the _Unit that gave it, ids of the mutable
        # objects inside it)
        self.mock_values = {}
        # patchers started by hand (`self.p = patch(...)`, `p.start()`): name -> (call, kind);
        # the ones started, in order (the child's patches: a stop undoes the last); the ones a
        # cleanup stops (addCleanup(p.stop)), True for all (addCleanup(patch.stopall))
        self.patchers, self.started, self.cleanups = {}, [], set()
        self.local_functions = {}  # `def fake(url): ...` in a test: a side effect (mock_value)
        self.effect_names = set()  # the names side effects read (bound when configured)
        # names of values configuring mocks that the solution may have changed by now
        # (defer_mock_values): checks read them from the run's mocks; computed here (an input,
        # an `if`), the object as the test bound it
        self.value_names = set()
        self.module_paths = {}  # names of modules (and their classes) the tests import: paths
        # `with pytest.raises(E) as name` / `assertRaises(E) as name`: name -> (its step,
        # "value" or "exception")
        self.raised = {}

    def before_step(self, step: dict):
        """Before a step joins the unit: a seed (`random.seed(42)`) starts a record of that global
        state; a step of the answer's code is preceded by sync_draws."""
        seeds = self.imports.seeds if isinstance(self.imports, _Imports) else {}
        if "seed" in step:
            seeds[step["seed"]] = {"sent": self.imports.state(step["seed"]), "answer": False}
            return
        if not seeds or {"bind", "capsys", "tmp_path"} & set(step):  # no code of the answer's
            return
        self.sync_draws()
        for seed in seeds.values():
            seed["answer"] = True

    def sync_draws(self, end: bool = False):
        """pytest runs the tests' draws and the answer's on one stream: where the tests drew from a
        seeded state since the child was last given it, a step ("draws") asks the child whether
        its state is still that one (the answer drew nothing since), and gives it the plan's now,
        so that the answer's next draws follow the tests'. A state the answer moved: the tests'
        draws since were not pytest's, and the unit is judged by pytest (sandbox.run_python;
        trusted_only: refused). end: the unit ends; asked only if the answer ran since."""
        seeds = self.imports.seeds if isinstance(self.imports, _Imports) else {}
        for name, seed in seeds.items():
            now = self.imports.state(name)
            if now == seed["sent"] or end and not seed["answer"]:
                continue
            key, pos, rest = now
            # the key changes only once every 624 words drawn: else the position alone
            list.append(self.steps, {"draws": name, "expect": draws_digest(*seed["sent"]),
                                     "key": list(key) if key != seed["sent"][0] else None,
                                     "pos": pos, "rest": list(rest)})
            seed["sent"], seed["answer"] = now, False

    def finished(self, name: str) -> "Unit":
        """The unit, once its last statement is planned (sync_draws at its end)."""
        self.sync_draws(end=True)
        return Unit(self.steps, self.checks, name)

    # ------------------------------------------------ what is whose

    def fixtures(self, fn, defined: set):
        """pytest's fixtures among the test's parameters (_FIXTURES; one of the tests' own of that
        name: Unconvertible), each made by a step of the child's before the test's own."""
        params = [a.arg for a in fn.args.args]
        for name in _FIXTURES:
            if name not in params:
                continue
            if name in defined:
                raise Unconvertible(f"a fixture of the tests' named {name}")
            if name in ("capsys", "capfd"):
                self.capsys(fn, name)
            elif name == "monkeypatch":  # its setattr calls are patch blocks by now
                self.env[_MP_PATCH] = mock_namespace()["patch"]
                self.child.discard(_MP_PATCH)
            else:  # tmp_path: a new empty folder in the child, a pathlib.Path of the child's
                self.child.add(name)
                self.objects.add(name)
                self.steps.append({"tmp_path": True})

    def capsys(self, fn, name: str = "capsys"):
        """pytest's capsys fixture (capfd: the file descriptors too): the child captures what the
        test's steps print from here on, and `capsys.readouterr()` is a step whose CaptureResult
        crosses as data (a namedtuple: `.out`, `.err`); any other use of it, or both fixtures in
        one test (pytest refuses that): Unconvertible."""
        if {"capsys", "capfd"} <= {a.arg for a in fn.args.args}:
            raise Unconvertible("capsys and capfd in one test")
        parents = {id(c): n for n in ast.walk(fn) for c in ast.iter_child_nodes(n)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id == name:
                up = parents.get(id(node))
                call = parents.get(id(up))
                if not (isinstance(up, ast.Attribute) and up.attr == "readouterr"
                        and isinstance(call, ast.Call) and call.func is up and not call.args
                        and not call.keywords and isinstance(node.ctx, ast.Load)):
                    raise Unconvertible(f"{name} other than {name}.readouterr()")
        self.child.add(name)
        self.steps.append({"capsys": True, "name": name, **({"fd": True} if name == "capfd"
                                                            else {})})

    def uses_child(self, node) -> bool:
        return bool(_names(node) & self.child)

    def is_object(self, node) -> bool:
        """An instance of the solution's classes: a name bound to one, or `Cls(...)` for a
        capitalised solution callable (the naming convention decides, from the tests alone). An
        attribute of an object is a value: `Greeting(x).text.startswith(...)` runs startswith here,
        on the text sent back (read_attrs in the child still walks `obj.left.val` through the
        solution's own nodes)."""
        if isinstance(node, ast.Name):
            return node.id in self.objects
        if isinstance(node, ast.BinOp):  # `v1 + v2`, `tmp_path / 'a.txt'`: what it makes, too
            return (self.is_object(node.left) or self.is_object(node.right)) and (
                self.child_evaluable(node))
        if isinstance(node, ast.Call) and self.is_builtin(node.func) and node.func.id == "open":
            # `open(path).read()` on a path of the child's: the file, read there
            return self.uses_child(node) and self.child_evaluable(node)
        if isinstance(node, ast.Call):
            name = _last_name(node.func)
            return (self.is_callee(node.func) and name[:1].isupper()
                    and name not in self.functions)
        return False

    def is_callee(self, node) -> bool:
        """A callable of the solution's: one of its names, a method or attribute of one of its
        objects or of a name of its own (`Cls.static(x)`), what a call of the solution's returned
        (`make_adder(2)(3)`), or a numpy conversion to plain data of a value the solution returned
        (`f(3).tolist()`, `.item()`: it runs in the child, and its result crosses as data)."""
        if isinstance(node, ast.Name):
            return node.id in self.child
        if isinstance(node, ast.Call):
            return self.is_callee(node.func)
        if isinstance(node, ast.Attribute):
            if node.attr in TO_DATA and self.is_child_value(node.value):
                return True
            return self.is_object(node.value) or (isinstance(node.value, ast.Name)
                                                  and node.value.id in self.solution_names)
        return False

    def is_child_value(self, node) -> bool:
        """Evaluated wholly in the sandbox: a child name, a call of a solution callable, an
        attribute, item or method of a solution object, or an operator or builtin applied to one
        (applies_to_object). A method of a RETURNED value (`greet(x).startswith(...)`) is not: the
        value comes back as plain data and the method runs here, so a str subclass gains nothing."""
        if isinstance(node, ast.Name):
            return node.id in self.child
        if isinstance(node, ast.Call) and self.is_callee(node.func):
            return True
        if isinstance(node, (ast.Attribute, ast.Subscript)) and self.is_object(node.value):
            return True
        if self.file_question(node):
            return True
        return self.applies_to_object(node) or self.calls_over_data(node)

    def calls_over_data(self, node) -> bool:
        """`[f(x) for x in inputs]`, `{k: f(k) for k in keys}`: a list, set or dict comprehension
        over values the trainer computes whose items are calls of the solution's on the loop's
        names, the tests' values and literals: the child makes it whole (calls_source), as it
        makes `f(x)`. Not a generator (`all(...)` stops at its first false item; a list built
        whole would call on)."""
        if not (isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp))
                and len(node.generators) == 1):
            return False
        loop = node.generators[0]
        call = node.value if isinstance(node, ast.DictComp) else node.elt
        if (loop.is_async or self.uses_child(loop.iter) or self.deferred & _names(node)
                or not (isinstance(call, ast.Call) and self.is_callee(call.func))
                or any(self.uses_child(c) for c in loop.ifs)):
            return False
        try:
            bound = set(_target_names(loop.target))
        except Unconvertible:
            return False
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return not any(
            isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                           ast.NamedExpr, ast.Await, ast.Starred))
            or isinstance(n, ast.Name) and not (n.id in bound or n.id in self.child
                                                or n.id in self.env or self.is_builtin(n))
            for p in [*parts, *loop.ifs] for n in ast.walk(p))

    def calls_source(self, node) -> str:
        """The child's source of a calls_over_data comprehension: its iterable and the tests'
        values as the child sees them (literal), builtin functions the real ones."""
        loop, unit = node.generators[0], self
        bound = set(_target_names(loop.target))

        class Inline(ast.NodeTransformer):
            def visit_Name(self, n):
                return n if n.id in bound or n.id in unit.child else unit._inline(n)
        node = copy.deepcopy(node)
        node.generators[0].iter = ast.parse(self.child_source(loop.iter), mode="eval").body
        node.generators[0].ifs = [Inline().visit(c) for c in node.generators[0].ifs]
        if isinstance(node, ast.DictComp):
            node.key, node.value = Inline().visit(node.key), Inline().visit(node.value)
        else:
            node.elt = Inline().visit(node.elt)
        return ast.unparse(node)

    def file_question(self, node) -> str | None:
        """`os.path.exists(p)` (isfile, isdir, getsize; `from os.path import exists` too) about a
        path of the child's, or its join (`os.path.join(tmp_path, 'a.txt')`): the function's name,
        called in the child; else None."""
        path = self.dotted(node.func) if isinstance(node, ast.Call) else None
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith(f"{_CHILD_OS}.path."):
            path = f"os.path.{node.func.attr}"  # `os.path.exists('out.csv')`: files_in_child
        if path is None or path.rpartition(".")[0] != "os.path" or node.keywords or any(
                str(s.get("patch", "")).startswith(("os.", "posixpath.", "genericpath."))
                for s in self.steps):  # a test patching os: its own calls meet its mocks
            return None
        name = path.rpartition(".")[2]
        asks = name in FILE_QUESTIONS and len(node.args) == 1 or name == "join" and node.args
        return name if asks and not any(isinstance(a, ast.Starred) for a in node.args) and (
            self.uses_child(node)) and self.child_evaluable(node) else None

    def is_helper_call(self, node) -> bool:
        """A call of a helper of the tests' that the trainer runs (_trainer_definitions), of a
        unittest assert or of numpy.testing's comparisons (`np.testing.assert_allclose`). A
        solution's callable passed to it cannot cross as data: such a call stays the sandbox's."""
        fn = self.named(node.func) if isinstance(node, ast.Call) else None
        if not callable(fn) or not (getattr(fn, "__module__", None) == "tests"
                                    or getattr(fn, "__self__", None) is _TESTCASE is not None
                                    or _library_assert(fn)):
            return False
        if any(isinstance(a, ast.Attribute) and self.is_callee(a)
               or isinstance(a, ast.Name) and a.id in self.solution_names
               for a in [*node.args, *(k.value for k in node.keywords)]):
            raise Unconvertible("a solution's callable passed to a helper of the tests'")
        return True

    def named(self, node):
        """What a name of the tests' holds, or a chain of public attributes of modules from one
        (_named)."""
        return _named(node, self.env, self.imports)

    def exception_classes(self, node) -> list | None:
        """The classes `node` names (one, or a tuple of them), each a builtin exception class
        (`ValueError`: "builtins.ValueError") or the solution's (`from solution import E`, `s.E`:
        "solution.E", the class its module binds to that name), or None."""
        keys = []
        for e in (node.elts if isinstance(node, ast.Tuple) else [node]):
            own = self.solution_class(e)
            if own is not None:
                keys.append(f"solution.{own}")
                continue
            cls = getattr(builtins, e.id, None) if self.is_builtin(e) else None
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                return None
            keys.append(f"builtins.{e.id}")
        return keys or None

    def names_to_resolve(self, var: str, keys: list):
        """The solution's names among `keys` ("solution.E"): the child resolves them when the
        step `var` caught raises (_sandbox_child.raised's "names")."""
        step = self.steps[self.raised[var][0]]
        for key in keys:
            origin, _, name = key.partition(".")
            if origin == "solution" and name not in step.setdefault("exc_names", []):
                step["exc_names"].append(name)

    def solution_class(self, node) -> str | None:
        """The name of the solution's that `node` reads (`E` from the solution, `s.E` after
        `import solution as s`), or None."""
        if isinstance(node, ast.Name) and node.id in self.child and node.id not in self.objects:
            return node.id
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in self.solution_modules and node.value.id not in self.env):
            return node.attr
        return None

    def class_of_the_raised(self, var, exc, call, further, of_type=False) -> bool:
        """The caught exception `exc` (`cm.exception`, `excinfo.value`) tested for its class
        against builtin exception classes or the solution's (exception_classes), rewritten in place
        to read the raised class's MRO (_ExceptionInfo, _RaisesContext): `type(exc) == E` (`!=`,
        `is`, `is not`, `self.assertEqual(type(exc), E)`) as `var.raised_is('builtins.E')`;
        `isinstance(exc, E)` and `self.assertIsInstance(exc, E)` (`NotIsInstance`) as
        `var.raised_a('builtins.E')`; with of_type, `exc` is `excinfo.type` and
        `issubclass(exc, E)` is `var.raised_a(...)`. False where the use is none of these."""
        owner = ast.Name(id=var, ctx=ast.Load())
        if not (isinstance(call, ast.Call) and call.args and call.args[0] is exc
                and not call.keywords and isinstance(call.func, ast.Name)):
            return False
        if of_type:
            if not (call.func.id == "issubclass" and self.is_builtin(call.func)
                    and len(call.args) == 2):
                return False
            names = self.exception_classes(call.args[1])
            if names is None:
                raise Unconvertible("issubclass of the raised class against a class that is no "
                                    "builtin exception or the solution's")
            call.func = ast.Attribute(value=owner, attr="raised_a", ctx=ast.Load())
            call.args = [ast.Constant(value=n) for n in names]
            self.names_to_resolve(var, names)
            return True
        if call.func.id == "type" and self.is_builtin(call.func) and len(call.args) == 1:
            if isinstance(further, ast.Compare):
                self.type_as_builtin_name(ast.Attribute(value=owner, attr="type"), further,
                                          call)
                return True
            if (isinstance(further, ast.Call) and isinstance(further.func, ast.Name)
                    and further.func.id in ("__unittest_assertEqual",
                                            "__unittest_assertNotEqual")
                    and len(further.args) == 2 and not further.keywords):
                other = further.args[1] if further.args[0] is call else further.args[0]
                names = self.exception_classes(other)
                if names is None or len(names) != 1 or isinstance(other, ast.Tuple):
                    raise Unconvertible("type() of the caught exception against a class that is "
                                        "no builtin exception or the solution's")
                self.names_to_resolve(var, names)
                further.args = [_call(owner, "raised_is", names[0]), ast.Constant(value=True)]
                return True
            raise Unconvertible("type() of the caught exception other than compared")
        instance = (call.func.id == "isinstance" and self.is_builtin(call.func)) or (
            call.func.id in ("__unittest_assertIsInstance", "__unittest_assertNotIsInstance"))
        if not (instance and len(call.args) == 2):
            return False
        names = self.exception_classes(call.args[1])
        if names is None:
            raise Unconvertible("isinstance of the caught exception against a class that is no "
                                "builtin exception or the solution's")
        self.names_to_resolve(var, names)
        test = ast.Call(func=ast.Attribute(value=owner, attr="raised_a", ctx=ast.Load()),
                        args=[ast.Constant(value=n) for n in names], keywords=[])
        if call.func.id == "isinstance":
            call.func, call.args = test.func, test.args
        else:
            call.func = ast.Name(id="__unittest_assertTrue" if call.func.id == (
                "__unittest_assertIsInstance") else "__unittest_assertFalse", ctx=ast.Load())
            call.args = [test]
        return True

    def type_as_builtin_name(self, node, compare, operand=None):
        """`excinfo.type is E` (`is not`, `==`, `!=`, either side; E a builtin exception class or
        the solution's), rewritten in place as `excinfo.raised_is('builtins.E') == True` (`!=`):
        the raised class is that class (_ExceptionInfo); any other use of `excinfo.type`:
        Unconvertible."""
        ops = {ast.Is: ast.Eq, ast.Eq: ast.Eq, ast.IsNot: ast.NotEq, ast.NotEq: ast.NotEq}
        if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1
                and type(compare.ops[0]) in ops):
            raise Unconvertible("excinfo.type other than compared with an exception class")
        operand = node if operand is None else operand     # `type(exc)`: the node compared
        other = compare.comparators[0] if compare.left is operand else compare.left
        names = self.exception_classes(other)
        if names is None or isinstance(other, ast.Tuple):
            raise Unconvertible("excinfo.type other than compared with a builtin exception or "
                                "the solution's")
        self.names_to_resolve(node.value.id, names)
        compare.left = _call(node.value, "raised_is", names[0])
        compare.ops = [ops[type(compare.ops[0])]()]
        compare.comparators = [ast.Constant(value=True)]

    def is_builtin(self, node) -> bool:
        return (isinstance(node, ast.Name) and node.id in BUILTIN_NAMES
                and node.id not in self.child
                and node.id not in self.env)

    def holds_object(self, node) -> bool:
        """The value may be (or hold) an object of the solution's: an object, an arithmetic operator
        on one (`v1 + v2`), a display of them (`[Card(2), Card(1)]`), `sorted`/`min`/`max`... of
        them. It cannot cross as data: what the test applies to it runs in the child."""
        if self.is_object(node):
            return True
        if isinstance(node, ast.BinOp):
            return self.holds_object(node.left) or self.holds_object(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.holds_object(node.operand)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return any(self.holds_object(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(self.holds_object(e) for e in node.keys + node.values if e is not None)
        if isinstance(node, ast.Call) and self.is_builtin(node.func) and node.func.id in _KEEPS:
            return any(self.holds_object(a) for a in node.args)
        return False

    def applies_to_object(self, node) -> bool:
        """An operator or a builtin the test applies to an object of the solution's (`Vector(1, 2) +
        Vector(3, 4) == Vector(4, 6)`, `list(LinkedList(...))`, `Point(1, 2) in points`, dataclass
        equality): a step on the solution's object, run in the child, its result crossing as data.
        Such a check is as strong as under pytest: the object's own methods (`__eq__`) decide it."""
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp):
            operands = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            operands = [node.operand]
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            operands = node.elts
        elif isinstance(node, ast.Call) and self.is_builtin(node.func):
            operands = [*node.args, *(k.value for k in node.keywords)]
        else:
            return False
        return any(self.holds_object(o) for o in operands) and self.child_evaluable(node)

    def child_method_call(self, node) -> bool:
        """A call of a method no plain data has on what a method of an object of the solution's
        returned (`Counter(1).inc().inc()`): the call runs in the child, as the first one does.
        Not on a value a function returned (`f(3).mean()`: an ndarray subclass's own method would
        decide), nor on what an operator made (`(f(3) == want).all()`)."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr not in PLAIN_ATTRS and not node.func.attr.startswith("_")
                and self.child_evaluable(node)):
            return False
        root = node.func.value
        while not self.is_object(root):
            if isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute):
                root = root.func.value
            elif isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            else:
                return False
        return True

    def method_step(self, node) -> dict | None:
        """Methods (and attributes) no plain data has, called with the trainer's data on a value of
        the child's (`f(3).mean()`, `f(3).astype(float).tolist()`, `f()['a'].sum()`,
        `make_node(1).get_val()`): a step whose `ops` the child applies while its value cannot
        cross as data (an object: as pytest calls it), the rest applied here on the data (an
        array, a subclass of a plain type: DATA_METHODS only, so an ndarray subclass's own
        `mean` never decides). None where the receiver or an argument is of another kind."""
        ops, base = [], node
        while not (self.is_child_value(base) or self.child_path(base)):
            if isinstance(base, ast.Attribute):
                ops.insert(0, base.attr)
                base = base.value
                continue
            if not (isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute)):
                return None
            args = [*base.args, *(k.value for k in base.keywords)]
            if any(isinstance(a, ast.Starred) for a in base.args) or any(
                    k.arg is None for k in base.keywords) or any(
                    self.uses_child(a) or self.deferred & _names(a) for a in args):
                return None
            try:
                call = ["()", base.func.attr, [_op_arg(self.parent_eval(a)) for a in base.args],
                        {k.arg: _op_arg(self.parent_eval(k.value)) for k in base.keywords}]
            except (Unconvertible, ValueError, TypeError):
                return None
            ops.insert(0, call)
            base = base.func.value
        if not ops or any((op if type(op) is str else op[1]).startswith("_") for op in ops):
            return None
        # the child applies the calls up to the last one the trainer does not make on data
        # (`df.query(...)`: pandas', as pytest calls it), the rest only while the value is no data
        data_from = max((i + 1 for i, op in enumerate(ops)
                         if type(op) is not str and op[1] not in DATA_METHODS), default=0)
        return {"eval": self.child_source(base), "ops": ops,
                **({"data_from": data_from} if data_from else {})}

    def returned(self, node) -> bool:
        """What the solution returned, read whole: a call of its callable (not of the problem's
        setup: the expected side), a name bound to one (`p = make(1, 2)`), or a list or tuple of
        those and literals; no input carried to it read outside its calls (such an input is judged
        as it was before the call: before_the_call)."""
        if isinstance(node, ast.Name):
            return node.id in self.results
        if isinstance(node, (ast.List, ast.Tuple)):  # short: a literal's items are never read
            return len(node.elts) <= _MAX_SHOWN and any(self.returned(e) for e in node.elts) and (
                all(self.returned(e) or isinstance(e, ast.Constant) for e in node.elts))
        return (isinstance(node, ast.Call) and self.is_callee(node.func)
                and not self.setup & _names(node.func)  # the setup's: the expected side
                and self.child_evaluable(node) and not self.in_calls(node, False))

    def compare_step(self, node) -> dict | None:
        """A comparison of two values the solution returned (`assert p == make(1, 2)`,
        `assertEqual(p, make(1, 2))`, `f(1) != f(2)`, `make(1, 2) in pairs(3)`, `assertIn`): one
        step, whose operands cross as data where both can (each encoded when evaluated; the
        trainer compares them), and which the child compares where one cannot (an object of the
        answer's: its `__eq__` decides, as in pytest, which is as weak as pytest: both sides are
        the answer's). Else None; in a unit with mocks (a mock returned compares with the
        trainer's) None too."""
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            op, operands = _COMPARISONS.get(type(node.ops[0])), [node.left, node.comparators[0]]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in _ASSERT_COMPARES and len(node.args) == 2 and not node.keywords):
            op, operands = _ASSERT_COMPARES[node.func.id], node.args
        else:
            return None
        if op is None or not all(isinstance(o, (ast.Call, ast.List, ast.Tuple)) or isinstance(
                o, ast.Name) and o.id in self.results for o in operands) or (
                self.mock_recipe is not None or any("patch" in s for s in self.steps)
                or not all(self.returned(o) for o in operands)):
            return None
        return {"eval": self.child_source(operands[0]), "compare": op,
                "right": self.child_source(operands[1])}

    def child_comprehension(self, node) -> str | None:
        """A comprehension reading items of a child value (`[n.val for n in f()]`, `sorted(c.n for
        c in cs)`, `{c.name: c.n for c in cs}`; one `for`): the child's source making its list (a
        generator's items too), set or dict, each element the loop's name, an item or public
        attribute of it, a method of it called with literals (`[p.get_height() for p in
        ax.patches]`), a tuple of those, one `is None` or a builtin of CHILD_BUILTINS applied to
        one; its `if`s such elements, compared with literals (`if n.val > 0`), under `and`, `or`,
        `not`. Its items cross as data; what the test computes from them runs here. Else None."""
        if not (isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))
                and len(node.generators) == 1):
            return None
        loop = node.generators[0]
        if (loop.is_async or not isinstance(loop.target, ast.Name)
                or not (self.is_child_value(loop.iter) or self.child_path(loop.iter)
                        or self.child_attrs(loop.iter))):
            return None
        name = loop.target.id

        def element(e) -> bool:
            if isinstance(e, ast.Name):
                return e.id == name
            if self.type_of(e) is not None:  # `type(n).__name__`: read through the real `type`
                return element(self.type_of(e))
            if isinstance(e, ast.Attribute):
                return not e.attr.startswith("_") and element(e.value)
            if isinstance(e, ast.Subscript):
                return isinstance(e.slice, ast.Constant) and element(e.value)
            if isinstance(e, ast.Tuple):
                return all(element(x) for x in e.elts)
            if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
                # `p.get_height()`: a method of the item, called with literals, as pytest calls it
                return (not e.func.attr.startswith("_") and not e.keywords
                        and all(isinstance(a, ast.Constant) for a in e.args)
                        and element(e.func.value))
            if isinstance(e, ast.Compare):  # `n is not None`: identity with a singleton
                return (len(e.ops) == 1 and isinstance(e.ops[0], (ast.Is, ast.IsNot))
                        and element(e.left) and _singleton(e.comparators[0]))
            return (isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
                    and e.func.id in CHILD_BUILTINS and e.func.id not in self.env
                    and e.func.id not in self.child and not e.keywords and len(e.args) == 1
                    and element(e.args[0]))

        def condition(e) -> bool:  # an `if` of the loop: `n.val > 0`, `p.ok and not p.hidden`
            if isinstance(e, ast.BoolOp):
                return all(condition(v) for v in e.values)
            if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
                return condition(e.operand)
            if isinstance(e, ast.Compare) and len(e.ops) == 1 and not element(e):
                sides = (e.left, e.comparators[0])
                return (not isinstance(e.ops[0], (ast.Is, ast.IsNot))
                        and any(element(x) for x in sides)
                        and all(element(x) or isinstance(x, ast.Constant) for x in sides))
            return element(e)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        if not all(element(e) for e in parts) or not all(condition(c) for c in loop.ifs):
            return None
        parts = [ast.unparse(self._inline_builtins(self.real_type(e))) for e in parts]
        loop_source = f"for {name} in {self.child_source(loop.iter)}" + "".join(
            f" if {ast.unparse(self._inline_builtins(self.real_type(c)))}" for c in loop.ifs)
        if isinstance(node, ast.DictComp):
            return f"{{{parts[0]}: {parts[1]} {loop_source}}}"
        if isinstance(node, ast.SetComp):
            return f"{{{parts[0]} {loop_source}}}"
        return f"[{parts[0]} {loop_source}]"

    def comprehension_items(self, node):
        """`all(p.get_height() > 0 for p in ax.patches)`: a comprehension over a value of the
        child's that child_comprehension cannot read there whole: the parts of its items it reads
        (`p.get_height()`, child_comprehension's elements) are read in the child, one tuple per
        item its `if`s keep, crossing as data; the rest (`> 0`, `all`) runs here over them, the
        same comprehension with those parts as names. None where it uses the loop's name or a
        value of the child's otherwise."""
        if not (isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))
                and len(node.generators) == 1):
            return None
        loop, counter = node.generators[0], None
        if (isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2
                and all(isinstance(t, ast.Name) for t in loop.target.elts)
                and isinstance(loop.iter, ast.Call) and self.is_builtin(loop.iter.func)
                and loop.iter.func.id == "enumerate" and len(loop.iter.args) == 1
                and not loop.iter.keywords and not loop.ifs):
            # `for i, p in enumerate(ax.patches)`: p's parts read there, i counted here
            counter = loop.target.elts[0]
            loop = ast.comprehension(target=loop.target.elts[1], iter=loop.iter.args[0], ifs=[],
                                     is_async=0)
        if not isinstance(loop.target, ast.Name):
            return None
        name, bare = loop.target.id, ast.comprehension(target=loop.target, iter=loop.iter, ifs=[],
                                                       is_async=0)
        parts, unit = [], self

        class Parts(ast.NodeTransformer):
            def visit(self, n):
                if isinstance(n, ast.expr) and name in _names(n) and unit.child_comprehension(
                        ast.ListComp(elt=n, generators=[bare])) is not None:
                    parts.append(n)  # read in the child
                    return ast.Name(id=f"__gmts_item{len(parts) - 1}", ctx=ast.Load())
                return super().visit(n)
        keyed = isinstance(node, ast.DictComp)
        outs = [Parts().visit(copy.deepcopy(e)) for e in ((node.key, node.value) if keyed
                                                          else (node.elt,))]
        if not parts or any(name in _names(e) or self.uses_child(e) for e in outs):
            return None
        source = self.child_comprehension(ast.ListComp(
            elt=ast.Tuple(elts=parts, ctx=ast.Load()), generators=[loop]))
        if source is None:
            return None
        target = ast.Tuple(elts=[ast.Name(id=f"__gmts_item{i}", ctx=ast.Store())
                                 for i in range(len(parts))], ctx=ast.Store())
        rows = self.placeholder({"eval": source})
        if counter is not None:
            target = ast.Tuple(elts=[counter, target], ctx=ast.Store())
            rows = ast.Call(func=ast.Name(id="enumerate", ctx=ast.Load()), args=[rows],
                            keywords=[])
        rows = [ast.comprehension(target=target, iter=rows, ifs=[], is_async=0)]
        if keyed:
            return ast.DictComp(key=outs[0], value=outs[1], generators=rows)
        return type(node)(elt=outs[0], generators=rows)

    def real_type(self, node):
        """A copy of `node` with each `x.__class__.__name__` read as `type(x).__name__`."""
        unit = self

        class Real(ast.NodeTransformer):
            def visit_Attribute(self, n):
                of = unit.type_of(n)
                if of is None:
                    return self.generic_visit(n)
                call = ast.Call(func=ast.Name(id="type", ctx=ast.Load()), args=[self.visit(of)],
                                keywords=[])
                return ast.Attribute(value=call, attr=n.attr, ctx=ast.Load())
        return Real().visit(copy.deepcopy(node))

    @staticmethod
    def _inline_builtins(node):
        """A builtin called in the child: the real one, as it was before the solution ran."""
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                n.func = ast.parse(f"__gmts_builtins[{n.func.id!r}]", mode="eval").body
        return node

    def path_step(self, node) -> dict | None:
        """A child_path whose keys the trainer computes (`f()[0].val`, `r[1:3]`): a step whose
        `ops` the child applies while its value cannot cross as data (a list of the answer's
        objects, a DataFrame: as pytest reads them), the rest applied here on the data (a list
        subclass's own `__getitem__` never answers). None for a key of the child's."""
        ops, base = [], node
        while not (self.is_child_value(base) or self.child_method_call(base)):
            if isinstance(base, ast.Attribute):
                ops.insert(0, base.attr)
            elif isinstance(base.slice, ast.Slice):
                parts = [base.slice.lower, base.slice.upper, base.slice.step]
                if any(p is not None and (self.uses_child(p) or self.deferred & _names(p))
                       for p in parts):
                    return None
                try:
                    ops.insert(0, ["[:]", *[None if p is None else encode_input(
                        self.parent_eval(p)) for p in parts]])
                except (Unconvertible, ValueError, TypeError):
                    return None
            else:
                key = base.slice
                if self.uses_child(key) or self.deferred & _names(key):
                    return None
                try:
                    ops.insert(0, ["[]", encode_input(self.parent_eval(key))])
                except (Unconvertible, ValueError, TypeError):
                    return None
            base = base.value
        return {"eval": self.child_source(base), "ops": ops}

    def child_path(self, node) -> bool:
        """Items (and attributes) read from a child value, every key the trainer's or the child's:
        `f()[0].val`, `r[1]`, `tree(x).children[0]`. A path of attributes only is read_attrs'."""
        base, items = node, False
        while isinstance(base, (ast.Attribute, ast.Subscript)) and not self.is_child_value(base):
            if isinstance(base, ast.Attribute) and base.attr.startswith("_"):
                return False
            items = items or isinstance(base, ast.Subscript)
            base = base.value
        return items and (self.is_child_value(base) or self.child_method_call(base)) and (
            self.child_evaluable(node))

    def child_evaluable(self, node) -> bool:
        """Every name is the child's, a builtin, or inside a part the trainer computes and inlines;
        nothing the trainer binds only while judging, no comprehension or lambda over child
        values."""
        if self.deferred & _names(node) or isinstance(node, ast.Starred):
            return False
        if not self.uses_child(node):
            return True
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp,
                             ast.NamedExpr, ast.Await)):
            return False
        if isinstance(node, ast.Name):
            return node.id in self.child
        return all(self.child_evaluable(c) for c in ast.iter_child_nodes(node)
                   if isinstance(c, ast.expr))

    def applies_builtin(self, node) -> bool:
        """A builtin of CHILD_BUILTINS applied to a value of the solution's (and otherwise to
        inputs): it runs in the child on the real builtin (as it was before the solution ran) and
        returns plain data, so an object of the solution's (`len(stack)`, `str(node)`,
        `list(custom_iterable)`) meets it as in pytest."""
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in CHILD_BUILTINS
                and node.func.id not in self.child and node.func.id not in self.env
                and not node.keywords and not self.library_isinstance(node)
                and any(self.is_child_value(a) or self.child_path(a) or self.child_attrs(a)
                        or self.child_comprehension(a) is not None for a in node.args)
                and all(self.is_child_value(a) or self.child_path(a) or self.child_attrs(a)
                        or self.child_comprehension(a) is not None or not self.uses_child(a)
                        for a in node.args))

    def child_attrs(self, node) -> bool:
        """Public attributes, literal items and methods called with literals, read from a child
        value (`ax.patches`, `matplotlib.axes.Axes`, `ax.get_lines()[0]`): the child reads them
        where a builtin of CHILD_BUILTINS or a comprehension runs there."""
        if not isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            return False
        while True:
            if (isinstance(node, ast.Attribute) and not node.attr.startswith("_")
                    or isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)):
                node = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and not node.func.attr.startswith("_") and not node.keywords
                  and all(isinstance(a, ast.Constant) for a in node.args)):
                node = node.func.value
            else:
                return False
            if self.is_child_value(node):
                return True

    def library_isinstance(self, node) -> bool:
        """`isinstance(df, pd.DataFrame)`, `isinstance(a, np.ndarray)`: a class of numpy's or
        pandas', whose values cross as data: asked here of the value rebuilt (an object that cannot
        cross fails the test)."""
        classes = node.args[1] if node.func.id == "isinstance" and len(node.args) == 2 else None
        classes = classes.elts if isinstance(classes, ast.Tuple) else [classes]
        found = [self.named(c) for c in classes if c is not None]
        return bool(found) and len(found) == len(classes) and all(
            isinstance(c, type) and str(c.__module__).split(".")[0] in ("numpy", "pandas")
            for c in found)

    # ------------------------------------------------ the child's side

    def literal(self, node):
        """A child-free subexpression of a call's arguments, as the child will see it: a literal
        computed here, or (a bare mutable input) the name itself, bound once in the child and from
        then on the child's."""
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, ast.Name) and node.id in self.env and _is_mutable(self.env[node.id]):
            value = self.env[node.id]
            self.refuse_mock_value(value)
            path = self.path_in_child(value) or self.move_holders(value, node.id)
            self.bind_in_child(node.id, path or self.source(value))
            # `arr = original`: one list, two names; both are the child's from now on, as in pytest
            for other in [n for n, v in self.env.items() if v is value]:
                self.bind_in_child(other, node.id)
            if any(_contains(v, {id(value)}) for v in self.env.values()) or path and _contains(
                    value, {id(v) for v in self.env.values() if _is_mutable(v)}):
                raise Unconvertible("a mutable input is also held inside another value of the "
                                    "test's")
            return node
        if isinstance(node, ast.Lambda) and _names(node) <= BUILTIN_NAMES | _bound_inside(node):
            # `key=lambda x: -x`: code, not data; it only shapes the solution's own input
            return node
        if isinstance(node, ast.Name) and node.id in BUILTIN_NAMES - set(self.env) and isinstance(
                getattr(builtins, node.id), type):
            return node  # a type as an argument (`convert(x, int)`)
        value = self.parent_eval(node)
        path = self.path_in_child(value) if _is_mutable(value) else None
        if path is not None:  # inside a holder moved before (`f(*inp)`, a loop over `inputs`)
            for n in [n for n, v in self.env.items() if id(v) in self.moved_paths
                      and _contains(v, {id(value)})]:  # `inp`, `d = inputs[0]`: the child's
                self.bind_in_child(n, self.moved_paths[id(self.env[n])])
            return ast.Name(id=f"({path})", ctx=ast.Load())
        # an expression that reads a value of the tests' (not one making a new value: a call, a
        # comprehension) may hand over an object the tests hold
        reads = isinstance(node, (ast.Subscript, ast.Attribute, ast.Name, ast.IfExp, ast.BoolOp))
        aliases = [n for n, v in self.env.items() if v is value] if reads else []
        if _is_mutable(value) and aliases and not any(
                v is not value and _contains(v, {id(value)}) for v in self.env.values()):
            return self.literal(ast.Name(id=aliases[0], ctx=ast.Load()))  # `g(d or e)`: d
        if reads and _is_mutable(value) and any(_contains(v, {id(value)})
                                                for v in self.env.values()):
            # `g(DATA[0])`: an item of a value of the tests', handed as the object pytest hands
            # (its holders move to the child; a later read of them sees what the solution did)
            self.refuse_mock_value(value)
            path = self.move_holders(value, "")
            for other in aliases:  # `d = DATA[0]`: d is the child's object too
                self.bind_in_child(other, path)
            if any(_contains(v, {id(value)}) for v in self.env.values()):
                raise Unconvertible("a mutable input is also held inside another value of the "
                                    "test's")
            return ast.Name(id=f"({path})", ctx=ast.Load())
        mutable = {id(v) for v in self.env.values() if _is_mutable(v)}
        if _contains(value, mutable):
            raise Unconvertible("a mutable input reached the solution inside another value")
        # the literal's source, verbatim: a Name node unparses to its id as it is (an ast.Constant
        # would unparse an int over 4,300 digits with repr(), which refuses it); parenthesised, so
        # no operator binds into it
        return ast.Name(id=f"({self.source(value)})", ctx=ast.Load())

    def bind_in_child(self, name: str, source: str):
        """`name = source` in the child: from then on the name is the child's (a module-level one
        kept for every later test, "share")."""
        self.env.pop(name, None)
        self.results.discard(name)
        self.steps.append({"run": f"{name} = {source}", "binds": [name],
                           "share": name in self.module_level})
        self.child.add(name)

    def refuse_mock_value(self, value):
        """The run's mocks hold `value` (mocks.Session.values): a copy in the child would be a
        second object where unittest has one."""
        if any(e[1] is value or id(value) in e[3] for e in self.mock_values.values()):
            raise Unconvertible("unittest.mock: a value configuring a mock given to the solution")

    def path_in_child(self, value) -> str | None:
        """`CASES[1][0]`: where a value of the tests' lies inside a container already bound in the
        child (move_holders), as the child's expression; None if in none."""
        return self.moved_paths.get(id(value))

    def index_moved(self, held, name: str):
        """Each mutable value inside `held` (bound in the child as `name`), by id: its path there,
        the first found (the trainer keeps `held`, so the ids stay its values')."""
        stack = [(held, name, 0)]
        while stack:
            value, path, depth = stack.pop()
            if depth > MAX_DEPTH or type(value) not in (list, tuple, dict) or _flat(value):
                continue
            items = value.items() if type(value) is dict else enumerate(value)
            inner = [(v, f"{path}[{k!r}]") for k, v in items if type(k) in (int, str)]
            for v, p in inner:
                if _is_mutable(v):
                    self.moved_paths.setdefault(id(v), p)
            stack += [(v, p, depth + 1) for v, p in reversed(inner)]

    def move_holders(self, value, name: str) -> str | None:
        """An input held inside other values of the tests' (`for xs, want in self.CASES:
        f(xs)`): those holders are bound in the child, one object each as in unittest (a later
        read of them is the child's, mutations included), and the input is the path into one;
        None when nothing holds it. A holder inside another (`inp` in `inputs`) becomes the path
        into it. Unconvertible where the child's copy could not be the same object graph (a
        mutable object twice)."""
        holders = [n for n, v in self.env.items()
                   if n != name and v is not value and _contains(v, {id(value)})]
        if not holders:
            return None
        found = {id(self.env[h]): self.env[h] for h in holders}
        # the outermost holders move (`inputs`); one inside another (`inp`, an item of inputs,
        # for `f(*inp)`) is then the path into it
        objects = {i: v for i, v in found.items()
                   if not any(_contains(o, {i}) for j, o in found.items() if j != i)}
        if not _once(tuple(objects.values())):  # one object in two holders: two in the child
            raise Unconvertible("a mutable input is also held inside another value of the test's")
        for held in objects.values():
            names = [n for n, v in self.env.items() if v is held]
            self.bind_in_child(names[0], self.source(held))
            for other in names[1:]:  # `__self_x = __cls_C_x`: one object, two names
                self.bind_in_child(other, names[0])
            self.moved.append((held, names[0]))
            self.index_moved(held, names[0])
        for i, held in found.items():
            if i not in objects:
                inner = self.path_in_child(held)
                if inner is None:
                    raise Unconvertible("a mutable input inside a value the child cannot index")
                for n in [n for n, v in self.env.items() if v is held]:
                    self.bind_in_child(n, inner)
        path = self.path_in_child(value)
        if path is None:
            raise Unconvertible("a mutable input inside a value the child cannot index")
        return path

    def source(self, value) -> str:
        """An input as the child will read it: its literal, or for a big one (a 5-million-item list
        would not compile in the child's memory) a name the child binds from data sent beside the
        steps."""
        text = None if _more_items_than(value, MAX_LITERAL // 10) else render(value)
        if text is not None and len(text) <= MAX_LITERAL:
            return text
        name = f"__gmts_in{len(self.steps)}"
        self.steps.append({"bind": name, "data": encode_input(value)})
        return name

    def child_source(self, node) -> str:
        """Source of a child expression with every child-free subexpression computed here and
        inlined."""
        return ast.unparse(self._inline(copy.deepcopy(node)))

    def _inline(self, node):
        if self.calls_over_data(node):  # `[f(x) for x in inputs]`
            return ast.parse(self.calls_source(node), mode="eval").body
        if self.is_builtin(node) and isinstance(getattr(builtins, node.id), type(len)):
            # a builtin function the child applies (`sorted(cards, key=len)`): the real one, as it
            # was before the solution ran
            return ast.parse(f"__gmts_builtins[{node.id!r}]", mode="eval").body
        if (isinstance(node, ast.expr) and not isinstance(node, (ast.Starred, ast.Slice))
                and not self.uses_child(node)):
            return self.literal(node)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in TO_DATA and not node.args and not node.keywords
                and self.is_child_value(node.func.value)):
            # `f(3).tolist()`: numpy's own conversion of an array (an ndarray subclass's
            # `tolist` does not run), the value's method for anything else
            return ast.Call(func=ast.Name(id="__gmts_to_data", ctx=ast.Load()),
                            args=[self._inline(node.func.value),
                                  ast.Constant(value=node.func.attr)], keywords=[])
        question = self.file_question(node)
        if question is not None:  # answered by os.stat as it was before the solution ran
            node.func = ast.parse(f"__gmts_files[{question!r}]", mode="eval").body
            node.args = [self._inline(a) for a in node.args]
            return node
        if isinstance(node, ast.Call):
            node.args = [e for a in node.args for e in self.spread(a)]
        module = self.module_of(node.func) if isinstance(node, ast.Call) else None
        # `candidate(copy.deepcopy(encoded))`: applied in the child to its value
        if module is not None:
            node.func = ast.parse(f"__gmts_builtins['__import__']({module!r}).{node.func.attr}",
                                  mode="eval").body
            node.args = [self._inline(a) for a in node.args]
            node.keywords = [ast.keyword(arg=k.arg, value=self._inline(k.value))
                             for k in node.keywords]
            return node
        if isinstance(node, ast.Call) and self.is_builtin(node.func):  # `list(obj)` in the child
            node.func = ast.parse(f"__gmts_builtins[{node.func.id!r}]", mode="eval").body
            node.args = [self._inline(a) for a in node.args]
            node.keywords = [ast.keyword(arg=k.arg, value=self._inline(k.value))
                             for k in node.keywords]
            return node
        if isinstance(node,
                      (ast.Lambda, ast.comprehension, ast.NamedExpr, ast.GeneratorExp, ast.ListComp,
                             ast.SetComp, ast.DictComp)):
            raise Unconvertible("child value inside a lambda or comprehension")
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                setattr(node, name, self._inline(value))
            elif isinstance(value, list):
                setattr(node, name,
                        [self._inline(v) if isinstance(v, ast.AST) else v for v in value])
        return node

    def spread(self, arg) -> list:
        """`candidate(*inp)` over a tuple or list the trainer holds: its items, each an argument of
        its own (as `candidate(inp[0], inp[1])`: each the tests' own object, as in pytest)."""
        if not (isinstance(arg, ast.Starred) and not self.uses_child(arg.value)
                and not self.deferred & _names(arg.value)):
            return [arg]
        value = self.parent_eval(arg.value)
        if type(value) not in (list, tuple) or len(value) > 255:
            return [arg]
        return [ast.Subscript(value=copy.deepcopy(arg.value), slice=ast.Constant(value=i),
                              ctx=ast.Load()) for i in range(len(value))]

    def module_of(self, node) -> str | None:
        """`copy.deepcopy` for a module the tests imported (not random: its draws are the
        trainer's): the module's name, else None."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and not node.attr.startswith("_")):
            return None
        value = self.env.get(node.value.id)
        name = next((n for n, m in self.imports.items() if m is value and n != "random"), None)
        return name if name is not None and isinstance(value, type(math)) else None

    def type_name(self, node) -> str | None:
        """`type(x).__name__`, `x.__class__.__qualname__` (and `__module__`) of a value of the
        child's: the child's source reading it through the real `type` (a `__class__` the answer
        defines decides nothing), whose string crosses as data; else None."""
        of = self.type_of(node)
        if of is None or not (self.uses_child(of) and self.child_evaluable(of)):
            return None
        return f"__gmts_builtins['type']({self.child_source(of)}).{node.attr}"

    def type_of(self, node):
        """`x` of `type(x).__name__` or `x.__class__.__name__` (a name of TYPE_NAMES); else None."""
        if not (isinstance(node, ast.Attribute) and node.attr in TYPE_NAMES):
            return None
        owner = node.value
        if (isinstance(owner, ast.Call) and self.is_builtin(owner.func) and owner.func.id == "type"
                and len(owner.args) == 1 and not owner.keywords
                and not isinstance(owner.args[0], ast.Starred)):
            return owner.args[0]
        if isinstance(owner, ast.Attribute) and owner.attr == "__class__":
            return owner.value
        return None

    def fetch(self, node, attrs=(), iterate=False):
        """A child value (then `attrs` read from it while it is a solution object): a step, and a
        placeholder."""
        step = {"eval": self.child_source(node)}
        if attrs:
            step["attrs"] = list(attrs)
        if iterate:
            step["iter"] = True
        return self.placeholder(step)

    def placeholder(self, step: dict) -> ast.Name:
        """`step` appended, and the name (__rN) its value has in the trainer's expression."""
        self.steps.append(step)
        return ast.Name(id=f"__r{len(self.steps) - 1}", ctx=ast.Load())

    # ------------------------------------------------ the trainer's side

    def split(self, node, iterate=False, bound=frozenset()):
        """`node` with each child-computed part replaced by a placeholder __rN (N = its step).
        Inside a comprehension or lambda (`bound`: the names they bind) only a bare child name may
        be fetched: reading a variable once is exact, calling the solution once for what the loop
        would call many times is not."""
        if not self.uses_child(node):
            return node
        source = None if bound else self.type_name(node)
        if source is not None:  # `type(f(3)).__name__`: the string the child's value names
            return self.placeholder({"eval": source})
        if self.is_child_value(node):
            if bound and not (isinstance(node, ast.Name) and node.id not in bound):
                raise Unconvertible("a call of the solution's inside a lambda or comprehension")
            return self.fetch(node, iterate=iterate)
        step = None if bound else self.compare_step(node)
        if step is not None:  # `make(1, 2) == make(1, 2)`: the answer's `__eq__` where no data
            held = self.placeholder(step)  # assertEqual's verdict: `first == second`'s
            return held if isinstance(node, ast.Compare) else ast.Call(
                func=ast.Name(id="__unittest_assertTrue", ctx=ast.Load()), args=[held], keywords=[])
        source = None if bound else self.child_comprehension(node)
        if source is not None:  # `[n.val for n in f()]`: the values read where the objects live
            return self.placeholder({"eval": source})
        items = None if bound else self.comprehension_items(node)
        if items is not None:  # `all(p.get_height() > 0 for p in ax.patches)`
            return items
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)) and (
                not bound):
            # the first `for`'s iterable is evaluated once, before the loop (`any(c in p for c in
            # f(x))`): one step, materialised as the loop would iterate it
            first = node.generators[0]
            first.iter = self.split(first.iter, iterate=True)
        if isinstance(node,
                      (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            bound = bound | _bound_inside(node)
        # a path of items and attributes from a child value (`f()[0].val`, `r[1].left`, `f()['a']`):
        # read in the child as pytest reads it (a list of the solution's objects, an object's own
        # `__getitem__`), the value at its end crossing as data
        if self.child_path(node) and not bound:
            step = self.path_step(node)
            if step is None:
                return self.fetch(node, iterate=iterate)
            if iterate:
                step["iter"] = True
            return self.placeholder(step)
        # `g() is not None`: identity with a singleton, in the child (an object that cannot cross
        # is still not None there; `is` runs no code of the solution's)
        if (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and not bound
                and any(_singleton(n) for n in (node.left, node.comparators[0]))
                and self.child_evaluable(node)):
            return self.fetch(node)
        # attributes read from a returned value: `head(x).next.val`
        if isinstance(node, ast.Attribute):
            attrs, base = [], node
            while isinstance(base, ast.Attribute) and not self.is_child_value(base):
                attrs.insert(0, base.attr)
                base = base.value
            if self.is_child_value(base) or self.child_method_call(base):
                if any(a.startswith("_") for a in attrs):
                    raise Unconvertible("private attribute")
                if bound:
                    raise Unconvertible("attributes of a child value inside a lambda or "
                                        "comprehension")
                return self.fetch(base, attrs=attrs, iterate=iterate)
        # `len(obj)`, `isinstance(n, Node)`: a step on the
        if self.applies_builtin(node) and not bound:
            # solution's objects, in the child
            args = ", ".join(self.child_comprehension(a) or self.child_source(a)
                             for a in node.args)  # `len([n for n in f() if n.ok])` too
            return self.placeholder({"eval": f"__gmts_builtins[{node.func.id!r}]({args})"})
        if isinstance(node, ast.Call):
            self.is_helper_call(node)  # refuses a solution's callable passed to a helper
            consume = (isinstance(node.func, ast.Name) and node.func.id in ITERATING
                       and node.func.id not in self.child)
            if isinstance(node.func, ast.Attribute):  # a method of a returned value: it runs here
                if node.func.attr not in PLAIN_ATTRS and self.uses_child(node.func.value):
                    # `task_func().get_title()`, `make_node(1).get_val()`: no method of plain data,
                    # so the value is an object that cannot cross: pytest (but a method of what an
                    # object's method returned: the child's, child_method_call)
                    if not bound and self.child_method_call(node):
                        return self.fetch(node, iterate=iterate)
                    step = None if bound else self.method_step(node)
                    if step is not None:  # `f(3).mean()`, `f()['a'].tolist()`, `node(1).get()`
                        return self.placeholder(step)
                    receiver = node.func.value  # `hashlib.sha256(f(x)).hexdigest()`: made here
                    made_here = (isinstance(receiver, ast.Call)
                                 and not self.uses_child(receiver.func)
                                 and self.mock_of(receiver.func) is None
                                 and self.named(receiver.func) is not None)
                    if node.func.attr not in DATA_METHODS and not made_here:
                        raise Unconvertible(f"method {node.func.attr} of a returned value")
                    # `(f(x) == want).all()`: a method of data computed here from returned
                    # values, each crossing as data (an object that cannot: the test fails)
                node.func.value = self.split(node.func.value, bound=bound)
            else:
                node.func = self.split(node.func, bound=bound)
            node.args = [self.split(a, iterate=consume and not bound, bound=bound)
                         for a in node.args]
            node.keywords = [ast.keyword(arg=k.arg, value=self.split(k.value, bound=bound))
                             for k in node.keywords]
            return node
        if isinstance(node, ast.Compare) and any(isinstance(op, _IN) for op in node.ops):
            # `3 in gen(5)`: what `in` searches is materialised in the child, as list(...) is
            node.left = self.split(node.left, bound=bound)
            node.comparators = [self.split(c, iterate=isinstance(op, _IN) and not bound,
                                           bound=bound)
                                for op, c in zip(node.ops, node.comparators)]
            return node
        if isinstance(node, (ast.NamedExpr, ast.Starred)):
            raise Unconvertible(f"child value inside {type(node).__name__}")
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                setattr(node, name, self.split(value, bound=bound))
            elif isinstance(value, list):
                setattr(node, name,
                        [self.split(v, bound=bound) if isinstance(v, ast.AST) else v
                         for v in value])
        return node

    def parent_expr(self, node, placeholders=(), now=False):
        """Validate an expression the trainer will evaluate: known names only, no private
        attributes, nothing of numpy's global random state (the trainer's own; the tests'
        `np.random` is the plan's, _plan_numpy). Evaluated later (now=False: a check, judged at
        every verdict), its calls that move the tests' own state are made here (made_now)."""
        if not now:
            node = self.made_now(node, placeholders)
        bound = _bound_inside(node)
        shared = getattr(getattr(sys.modules.get("numpy.random"), "mtrand", None), "_rand", self)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and not (
                    n.id in self.env or n.id in self.deferred or n.id in SAFE_NAMES
                    or n.id in MODULES or n.id in ("pytest", IN_PLACE_OP) or n.id in placeholders
                    or n.id in bound):
                raise Unconvertible(f"name {n.id!r} cannot be evaluated by the trainer")
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not (
                    n.attr in MOCK_OPERATORS and self.mock_of(n.value) is not None):
                raise Unconvertible("private attribute")  # but a mock's `__enter__`
            if (isinstance(n, ast.Attribute) and any(self.named(n.value) is m for m in (
                    _os_for_tests(), _os_for_tests().path)) and self.named(n) is None):
                raise Unconvertible(f"{ast.unparse(n)} cannot be evaluated by the trainer")
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "pytest"
                    and n.attr != "approx"):
                raise Unconvertible(f"pytest.{n.attr}")
            if isinstance(n, ast.Attribute) and (
                    n.attr in WRITES or n.attr.startswith("read_")
                    or self.named(n.value) is sys.modules.get("pandas", self)
                    and n.attr not in PANDAS_NAMES):
                raise Unconvertible(f"{ast.unparse(n)[:60]} cannot be evaluated by the trainer")
            if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
                raise Unconvertible(type(n).__name__)
            if isinstance(n, (ast.Name, ast.Attribute)) and getattr(
                    self.named(n), "__self__", None) is shared:
                raise Unconvertible("a draw from the global random state the answer draws from")
        return compile(ast.fix_missing_locations(ast.Expression(node)), "<check>", "eval")

    def moves_state(self, call: ast.Call) -> bool:
        """A call of the tests' that changes their own state: a draw (the plan's `random`, numpy's
        global functions, a Random, RandomState or Generator of the tests'), a mutating method
        of a list, dict, set or deque the tests hold (`items.pop()`, `q.popleft()`), heapq's and
        bisect's functions changing a list in place (`heapq.heappop(h)`), or any call given an
        iterator of theirs (`next(it)`, `list(it)`, `islice(it, 2)`, `gen.send(1)`)."""
        func = call.func
        args = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
        if any(isinstance(a, ast.Name) and isinstance(self.env.get(a.id), collections.abc.Iterator)
               for a in args + [k.value for k in call.keywords]):
            return True
        fn = self.named(func) if isinstance(func, ast.Attribute) else (
            self.env.get(func.id) if isinstance(func, ast.Name) else None)
        if _is_generator_of_draws(getattr(fn, "__self__", None)) or (
                getattr(fn, "__module__", None) in ("heapq", "_heapq", "bisect", "_bisect")
                and getattr(fn, "__name__", "") in _IN_PLACE):
            return True
        if not isinstance(func, ast.Attribute):
            return False
        base, attrs = attribute_chain(func.value)  # `rng`, `self.rng`, `items`, `self.queue`
        owner = self.env.get(base.id, _UNSET) if isinstance(base, ast.Name) else _UNSET
        for attr in attrs:
            owner = _UNSET if attr.startswith("_") else getattr(owner, attr, _UNSET)
        if _is_generator_of_draws(owner) or isinstance(owner, collections.abc.Iterator):
            return True
        return func.attr in _MUTATORS | _IN_PLACE and (isinstance(owner, (
            list, dict, set, bytearray, collections.deque)) or _is_array(owner))

    def made_now(self, node, placeholders=()):
        """A check is evaluated at every verdict, on the values of the plan the judge keeps: a call
        in it that moves the tests' own state (moves_state: `random.random()`, `items.pop()`,
        `next(it)`) would give another value at each. Each is made here, in Python's order, where
        the statement stands among the tests' draws, its value bound to a name of the check's.
        One the test makes on a value of the answer's, or only on some paths (`and`, `if`, a
        comprehension, a lambda): Unconvertible."""
        answers = set(placeholders) | self.deferred | _bound_inside(node)

        def visit(n, sometimes):
            if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                              ast.GeneratorExp)):
                sometimes = True
            if isinstance(n, ast.Dict):  # a key, then its value, pair by pair
                pairs = [(visit(k, sometimes) if k is not None else None, visit(v, sometimes))
                         for k, v in zip(n.keys, n.values)]
                n.keys, n.values = [k for k, _ in pairs], [v for _, v in pairs]
                return n
            for name, value in ast.iter_fields(n):
                if isinstance(value, ast.AST):
                    setattr(n, name, visit(value, sometimes or isinstance(n, ast.IfExp)
                                           and name != "test"))
                elif isinstance(value, list):  # `a and b`, `a < b < c`: b, c only on some paths
                    short = isinstance(n, ast.BoolOp) or isinstance(n, ast.Compare) and (
                        name == "comparators")
                    setattr(n, name, [visit(v, sometimes or short and i > 0)
                                      if isinstance(v, ast.AST) else v
                                      for i, v in enumerate(value)])
            if not (isinstance(n, ast.Call) and self.moves_state(n)):
                return n
            if sometimes or answers & _names(n):
                why = "made on some paths only" if sometimes else "made on the answer's values"
                raise Unconvertible(f"{ast.unparse(n)[:60]}: a change of the tests' own state "
                                    f"{why}")
            name = f"__gmts_now{next(self.made)}"
            self.before_change(n)  # `items.pop()`: what the checks before it read stays
            self.env[name] = self.parent_eval(n)
            return ast.Name(name, ast.Load())

        return visit(node, False)

    def global_seed(self, node) -> str | None:
        """`random.seed(42)`, `np.random.seed(42)` (`from random import seed`...): the test seeds
        the global random state of `random` or numpy, which both the tests' draws and the answer's
        read under pytest: seeded here (the plan's own) and in the child at this step ("random" or
        "numpy"). Exact unless both draw from it after the seed (pytest interleaves the two).
        Else None."""
        fn = self.named(node.func) if isinstance(node, ast.Call) else None
        if fn is None or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if fn == getattr(self.imports.get("random"), "seed", None):
            return "random"
        numpy_random = getattr(self.imports.get("numpy"), "random", None)
        return "numpy" if fn == getattr(numpy_random, "seed", self) else None

    def parent_eval(self, node):
        if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.Constant)):
            try:  # a literal (HumanEval+'s inputs and results): no copy, no compile
                return ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
        if (self.deferred - self.value_names) & _names(node):
            raise Unconvertible("an input computed from the solution's results")
        try:
            return eval(self.parent_expr(copy.deepcopy(node), now=True), _scope(self.env),
                        dict(self.env))
        except Unconvertible:
            raise
        # the test's own expression failed here: leave it to the harness
        except Exception as e:  # noqa: BLE001
            raise Unconvertible(f"the trainer could not evaluate {ast.unparse(node)[:60]}: "
                                f"{e}") from None

    def changed_in_place(self, node) -> set:
        """The names of the unit's values that a call in `node` changes in place: a method of
        _MUTATORS or _IN_PLACE on a name (`L.append(1)`, `Q.appendleft(0)`), the first argument
        of heapq's and bisect's functions (`heapq.heappush(H, 0)`), the target of `n += v`,
        `d[k] = v`, `del d[k]` (IN_PLACE_OP); each by the name it is reached from (`d['a']`:
        d)."""
        out = set()
        for n in ast.walk(node):
            if not isinstance(n, ast.Call):
                continue
            changed = [n.func.value] if isinstance(n.func, ast.Attribute) and (
                n.func.attr in _MUTATORS | _IN_PLACE) else []
            changed += n.args[:1] if _last_name(n.func) in _IN_PLACE else []
            changed += n.args[1:2] if _last_name(n.func) == IN_PLACE_OP else []
            changed = [_root(c) for c in changed]
            out |= {c.id for c in changed if isinstance(c, ast.Name) and c.id in self.env}
        return out

    def before_change(self, node):
        """Before the trainer makes the tests' own in-place change (`L.append(2)`, `L += [2]`)
        while building the plan. A value shared with later tests (a module-level list, a class
        attribute: module_level): every check is judged afterwards, so an earlier test's check
        would read the changed value: Unconvertible, pytest's. A value of this test's that a
        check or step made before holds: the unit's mutable values are copied first (one memo:
        `M = L` still sees the change), the earlier ones keep what they read."""
        changed = self.changed_in_place(node)
        if not changed:
            return
        shared = {id(self.env[n]) for n in self.module_level
                  if n in self.env and _changeable(self.env[n])}
        if any(id(self.env[n]) in shared or id(self.env[n]) in self.mock_values for n in changed):
            raise Unconvertible("the tests change a value later tests share")
        made = (len(self.checks), len(self.steps))
        if self.__dict__.get("_copied") != made:
            self._copied, memo = made, {}
            # a value configuring a mock (or inside one) is the run's one object: not copied
            mocked = {i for e in self.mock_values.values() for i in (id(e[1]), *e[3])}
            for k, v in self.env.items():
                if _changeable(v) and not ({id(v)} | _inner_ids(v)) & mocked:
                    self.env[k] = copy.deepcopy(v, memo)

    def placeholders(self) -> set:
        """The names of the eval steps' values (`__rN`), kept as steps are added (a loop of
        thousands of rounds asks after each)."""
        seen = self.__dict__.setdefault("_placeholders", [set(), 0])
        for i in range(seen[1], len(self.steps)):
            if "eval" in self.steps[i]:
                seen[0].add(f"__r{i}")
        seen[1] = len(self.steps)
        return seen[0]

    # ------------------------------------------------ statements

    def carried(self, name: str) -> bool:
        """A mutable input the solution may change in place: a list, dict or set the trainer holds,
        or one already bound in the child (not an object of the solution's, not its result)."""
        if name in self.env:
            return _is_mutable(self.env[name])
        return (name in self.child and name not in self.objects
                and name not in self.solution_names and name not in self.results)

    def in_calls(self, node, inside: bool) -> set:
        """The carried names read inside (inside=True) or outside the solution's calls in node."""
        if isinstance(node, ast.Call) and self.is_callee(node.func):
            parts = [*node.args, *(k.value for k in node.keywords)]
            return set().union(*(_names(p) for p in parts)) & {
                n for n in _names(node) if self.carried(n)} if inside else set()
        if isinstance(node, ast.Name):
            return {node.id} if not inside and self.carried(node.id) else set()
        return set().union(set(), *(self.in_calls(c, inside) for c in ast.iter_child_nodes(node)))

    def before_the_call(self, expr):
        """`assert f(x) == sorted(x)`, `assertion(f(x), g(x))`: the operands of one comparison
        (the arguments of one helper call of the tests') are judged against the tests' inputs as
        they were before the solution's calls among them: a mutable input given to the solution in
        one operand and read in another is read from a copy taken before (pytest would read it
        after the call, so a solution emptying its input and returning [] would pass). Across
        statements the mutation counts, as in pytest (`sort_in_place(x); assert x == [1, 2]`)."""
        expr = copy.deepcopy(expr)
        for node in ast.walk(expr):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and self.is_helper_call(node):
                operands = [*node.args, *(k.value for k in node.keywords)]
            else:
                continue
            given = [self.in_calls(o, True) for o in operands]
            for i, operand in enumerate(operands):
                others = set().union(set(), *(g for j, g in enumerate(given) if j != i))
                for name in self.in_calls(operand, False) & others:
                    self.read_before(operand, name)
        return expr

    def read_before(self, operand, name: str):
        """Rename `name` outside the solution's calls in operand to its value now: a copy the
        trainer keeps, or (a child name) a step reading it before the calls."""
        if name in self.env:
            copied = f"__before_{name}"
            self.env[copied] = copy.deepcopy(self.env[name])
        else:
            self.steps.append({"eval": name})
            copied = f"__r{len(self.steps) - 1}"
        stack = [operand]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call) and self.is_callee(node.func):
                continue
            if isinstance(node, ast.Name) and node.id == name:
                node.id = copied
            stack.extend(ast.iter_child_nodes(node))

    def statement(self, stmt):
        """One statement of the test; each check it makes knows the steps before it."""
        before = len(self.checks)
        stmt = self.files_in_child(stmt)
        if isinstance(stmt, ast.Try) and stmt.finalbody and not stmt.handlers and not stmt.orelse:
            for s in stmt.body + stmt.finalbody:  # `try: ... finally: os.remove(p)`: in order (a
                self.statement(s)  # step that raised fails its check; every step still runs)
            return
        if self.mock_values:
            self.defer_mock_values()
        if isinstance(stmt, ast.Try):  # `try: f(-1); assert False except E: ...`
            block, *handler = _try_as_raises(copy.deepcopy(stmt))
            self.statement(block)
            step, steps, checks = len(self.steps) - 1, len(self.steps), len(self.checks)
            for s in handler:
                self.statement(s)
            if block.gmts_optional:  # the except runs only where the body raised
                if len(self.steps) != steps:
                    raise Unconvertible("a call of the solution's in an except that may not run")
                for check in self.checks[checks:]:
                    check.if_raised = step
            return
        if self.raised and not isinstance(stmt, (ast.For, ast.If, ast.With)):
            self.raised_parts(stmt)
        if isinstance(stmt, ast.With) and _returns_in(stmt):
            raise Unconvertible("a return inside a with-block")  # its exit would be skipped
        if not self.mock_statement(stmt):
            self._statement(stmt)
        for check in self.checks[before:]:
            if check.at < 0:
                check.at = len(self.steps)
            if self.mock_values:
                self.read_mock_values(check)

    def _statement(self, stmt):
        if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and ast.unparse(stmt.value.func) == "pytest.fail"):
            stmt = ast.Assert(test=ast.Constant(value=False))  # fails where it is reached
        # split() rewrites it; the same test body serves every parametrize row (an assignment of
        # inputs computed here is not rewritten: HumanEval+'s lists of inputs are not copied)
        # (an assert or an expression is copied where it is rewritten: before_the_call, parent_eval)
        if not (isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
                and not self.uses_child(stmt.value) and not self.deferred & _names(stmt.value)
                or isinstance(stmt, (ast.Assert, ast.Expr))):
            stmt = copy.deepcopy(stmt)
        if isinstance(stmt, ast.Assert):
            self.check_identity(stmt.test)
            expr = self.split(self.before_the_call(stmt.test))
            self.checks.append(Check("assert", expr=self.parent_expr(expr, self.placeholders()),
                                     env=dict(self.env)))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if stmt.value is None:
                return
            if len(targets) != 1:
                raise Unconvertible("chained assignment")
            if isinstance(targets[0], ast.Subscript):  # `d['b'] = 2`
                self.item_statement(targets[0], stmt.value)
            else:
                self.assign(targets[0], stmt.value)
        elif isinstance(stmt, ast.Delete) and all(isinstance(t, ast.Subscript)
                                                  for t in stmt.targets):
            for target in stmt.targets:  # `del d['a']`
                self.item_statement(target)
        elif isinstance(stmt, ast.AugAssign):
            self.augmented(stmt)
        elif isinstance(stmt, (ast.For, ast.While)):
            self.unroll(stmt)
        elif isinstance(stmt, ast.Break):  # in a loop unroll runs: its `else` does not run
            raise _Break
        elif isinstance(stmt, ast.Continue):
            raise _Continue
        elif isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant) or (isinstance(stmt.value, ast.Name)
                                                        and stmt.value.id in BUILTIN_NAMES
                                                        - self.child):
                return  # a docstring, or a bare builtin name (`print` on its own line): no effect
            if (isinstance(stmt.value, ast.Call) and self.is_builtin(stmt.value.func)
                    and stmt.value.func.id == "print"):
                self.print_(stmt.value)
                return
            if (isinstance(stmt.value, ast.Call) and ast.unparse(stmt.value.func) == "time.sleep"
                    and self.module_paths.get("time") == "time" and len(stmt.value.args) == 1
                    and not stmt.value.keywords and not self.uses_child(stmt.value)
                    and not self.deferred & _names(stmt.value)):
                # `time.sleep(0.1)` (the tests' `import time`): the child waits, as under pytest
                seconds = self.child_source(stmt.value.args[0])
                self.steps.append(
                    {"run": f"__gmts_builtins['__import__']('time').sleep({seconds})"})
                return
            if self.is_helper_call(stmt.value) and (self.uses_child(stmt.value)
                                                    or self.deferred & _names(stmt.value)):
                # `assertion(candidate(*inp), exp, 0)`: the tests' helper runs here on the values;
                # it passes unless it raises (its own asserts), as under the suite's harness
                expr = self.split(self.before_the_call(stmt.value))
                self.checks.append(Check("run", expr=self.parent_expr(expr, self.placeholders()),
                                         env=dict(self.env)))
                return
            if (isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute)
                    and stmt.value.func.attr == "match"
                    and isinstance(stmt.value.func.value, ast.Name)
                    and stmt.value.func.value.id in self.raised):
                # `excinfo.match(r)`: pytest's assert, on the message, here
                self.checks.append(Check("run", expr=self.parent_expr(stmt.value,
                                                                      self.placeholders()),
                                         env=dict(self.env)))
                return
            seeded = self.global_seed(stmt.value)
            if seeded is not None:  # `random.seed(42)`: the state the answer draws from
                args = ", ".join(render(self.parent_eval(a)) for a in stmt.value.args)
                self.parent_eval(stmt.value)
                self.steps.append({"run": f"__gmts_builtins['__import__']({seeded!r})"
                                          f"{'.random' if seeded == 'numpy' else ''}.seed({args})",
                                   "seed": seeded})
                return
            write = self.child_write(stmt.value)
            if write is not None:  # `df.to_csv(path)`: the tests' file, where the answer reads it
                self.steps.append({"run": write})
                return
            if not self.uses_child(stmt.value):  # the tests' own work: `coeffs.append(c)`, here
                self.before_change(stmt.value)
                self.parent_eval(stmt.value)
                return
            if not (self.is_child_value(stmt.value) or self.applies_builtin(stmt.value)):
                raise Unconvertible("statement that is not a call of the solution's")
            # `s.push(1)`, `next(g)`: in the child, on the real builtin
            self.steps.append({"run": self.child_source(stmt.value)})
        elif isinstance(stmt, ast.If):  # on values the trainer computes: the branch taken, here
            if self.uses_child(stmt.test):
                raise Unconvertible("a branch on the solution's values")
            for s in stmt.body if self.parent_eval(stmt.test) else stmt.orelse:
                self.statement(s)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self.import_(stmt)
        elif isinstance(stmt, ast.With):
            if not self.open_block(stmt):
                self.raises_block(stmt)
        elif isinstance(stmt, ast.Global) and set(stmt.names) <= self.module_level:
            pass  # a test's `global N`: its binds of N are every later test's (module_level)
        elif isinstance(stmt, ast.Return) and self.returns:
            # the test ends here; its value is computed (a call of the solution's runs), and a
            # value other than None is pytest's warning, not a failure
            if stmt.value is not None:
                self.statement(ast.Expr(value=stmt.value))
            raise _Returned
        elif not isinstance(stmt, ast.Pass):
            raise Unconvertible(type(stmt).__name__)

    # ------------------------------------------------ unittest.mock (rewards/mocks.py)

    def mock_statement(self, stmt) -> bool:
        """A patch block, a mock made or configured, an assert method of a mock: handled here
        (True), else False."""
        if isinstance(stmt, ast.With):
            return self.patch_block(stmt)
        if self.mock_recipe is None:
            return False
        if self.effect_names & _stored(stmt):  # the function reads the name when called
            raise Unconvertible("unittest.mock: a name a side effect reads bound again")
        if self.patcher_statement(stmt):
            return True
        if isinstance(stmt, ast.FunctionDef):  # a side effect's (_side_effect_functions)
            if stmt.decorator_list:
                raise Unconvertible("unittest.mock: a decorated function in a test")
            self.local_functions[stmt.name] = stmt
            self.env.pop(stmt.name, None)
            self.child.discard(stmt.name)
            return True
        for n in ast.walk(stmt):  # a name bound again, in any form, is no longer an alias
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                self.mock_aliases.pop(n.id, None)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
            found = self.mock_of(target)
            if found is not None and found[1]:  # `m.return_value.json.return_value = {...}`
                id_, path = found
                if any(p.startswith("_") and p not in MOCK_OPERATORS for p in path):
                    raise Unconvertible("unittest.mock: a private attribute of a mock set")
                if self.called():
                    raise Unconvertible("unittest.mock: a mock configured after the solution "
                                        "ran")
                if any(a == id_ and len(path) <= len(q) and q[:len(path)] == path
                       for a, q in self.mock_aliases.values()):  # the alias keeps the old object
                    raise Unconvertible("unittest.mock: a mock path set again after a name was "
                                        "bound to it")
                self.mock_recipe.append(["set", id_, path, self.mock_value(
                    value, path[-1] == "side_effect")])
                return True
            found = self.mock_of(value) if isinstance(value, ast.Attribute) else None
            if (isinstance(target, ast.Name) and found is not None and not self.called()
                    and not any(p.startswith("_") and p not in MOCK_OPERATORS for p in found[1])
                    and all(p == "return_value" or p in MOCK_OPERATORS or not (
                        p.startswith("_") or hasattr(unittest_mock().NonCallableMock, p))
                            for p in found[1])):
                self.mock_aliases[target.id] = found  # bound as before; configurable through
                return False
            if (isinstance(target, ast.Name) and isinstance(value, ast.Call)
                    and self.mock_api(value.func) in MOCK_KINDS):  # `m = MagicMock(...)`
                self.bind_mock(target.id, MockRef(self.mock_value(value)["mock"]))
                return True
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)):
            return False
        root, calls = stmt.value.func.value, False
        while isinstance(root, (ast.Attribute, ast.Call)):  # `m().write`: the test's own call
            calls = calls or isinstance(root, ast.Call)
            root = root.func if isinstance(root, ast.Call) else root.value
        asserts = stmt.value.func.attr.startswith("assert_")
        # a mock's method, or an assert method of a name bound from one while judging
        # (`instance = m.return_value.__enter__.return_value`), or of what the test's own call
        # of a mock returns (`m().write.assert_called_once_with`: the call is in the record,
        # after every call of the solution's, as under unittest: mocks_in_order)
        if self.mock_of(stmt.value.func.value) is not None or (asserts and isinstance(
                root, ast.Name) and (root.id in self.deferred or calls and self.mock_of(root))):
            if not asserts or self.uses_child(stmt.value):
                raise Unconvertible(f"unittest.mock: {stmt.value.func.attr}() of a mock")
            expr = copy.deepcopy(stmt.value)  # `m.assert_called_once_with(url)`, judged here
            self.checks.append(Check("run", expr=self.parent_expr(expr), env=dict(self.env)))
            return True
        return False

    def mock_value_now(self, value) -> bool | None:
        """Is this object of the tests' a value configuring a mock that the solution may have
        changed by now (given in an earlier test, or in this one before a call of the
        solution's)? Its inner objects too: None when it is one of those."""
        for vid, obj, unit, inner in self.mock_values.values():
            if (obj is value or id(value) in inner) and (unit is not self or self.called()):
                return obj is value or None
        return False

    def defer_mock_values(self):
        """A name of the tests' bound to a value configuring a mock, once the solution may have
        changed it: a check or an assignment reading it is judged with the run's object
        (read_mock_values); what is computed here from it (an input, an `if`) reads the object
        as the test bound it."""
        for name, value in self.env.items():
            if _is_mutable(value) and self.mock_value_now(value) is not False:
                self.deferred.add(name)  # an assignment reading it: a check (bind)
                self.value_names.add(name)

    def read_mock_values(self, check):
        """The check's names bound to values configuring mocks, read while judging from the run's
        mocks, as the unit left them (after its last call: mocks_in_order); a name bound to an
        object inside one cannot be followed there (pytest's)."""
        read = _code_names(check.expr) if check.expr is not None else set()
        for name, value in list(check.env.items()):
            if not _is_mutable(value):
                continue
            now = self.mock_value_now(value)
            if now is None and name in read:
                raise Unconvertible("unittest.mock: a value inside one configuring a mock, read "
                                    "after the solution ran")
            if now:
                check.plan_values[name] = value
                check.env[name] = ValueRef(self.mock_values[id(value)][0])

    def side_effect_function(self, fn) -> dict:
        """A lambda or local def of the tests' as a mock's side effect: {"fn": id} of the
        recipe's ["fn", id, {"source", "names"}], compiled by the Session with only `names` (the
        tests' values, mocks and exception classes it reads, as recipe values) and
        EFFECT_BUILTINS, and called there on the solution's arguments, as unittest calls it.
        Only what EFFECT_BUILTINS' comment allows: Unconvertible otherwise."""
        if self.called():
            raise Unconvertible("unittest.mock: a mock configured after the solution ran")
        fn = copy.deepcopy(fn)
        body = [ast.Return(value=fn.body)] if isinstance(fn, ast.Lambda) else fn.body
        a = fn.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]
                  if x}
        if any(not isinstance(d, ast.Constant) for d in a.defaults + a.kw_defaults if d):
            raise Unconvertible("unittest.mock: a side effect's default that is not a literal")
        names, raised = {}, 0
        tree = ast.Module(body=body, type_ignores=[])
        local = _stored(tree) | params
        for n in (n for b in body for n in ast.walk(b)):
            if not isinstance(n, _EFFECT_NODES) or isinstance(n, (ast.FunctionDef, ast.Lambda)):
                raise Unconvertible(f"unittest.mock: a side effect with {type(n).__name__}")
            if isinstance(n, ast.Attribute) and n.attr.startswith("_"):
                raise Unconvertible("unittest.mock: a side effect reading a private attribute")
            if isinstance(n, ast.BinOp) and not isinstance(n.op, (ast.Add, ast.Sub)):
                raise Unconvertible("unittest.mock: a side effect's operator")
            if isinstance(n, ast.FormattedValue) and n.format_spec is not None:
                raise Unconvertible("unittest.mock: a side effect's format spec")
            if isinstance(n, ast.Assign) and not all(isinstance(t, ast.Name) for t in n.targets):
                raise Unconvertible("unittest.mock: a side effect assigning other than names")
            if isinstance(n, ast.Expr) and not isinstance(n.value, ast.Constant):
                raise Unconvertible("unittest.mock: a side effect's statement")
            if isinstance(n, ast.Raise):
                if n.cause is not None or n.exc is None:
                    raise Unconvertible("unittest.mock: a side effect's raise of another form")
                exc = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
                path = self.dotted(exc)
                if path is None or self.exception(exc) is None:
                    raise Unconvertible("unittest.mock: a side effect raising what is not an "
                                        "exception class of the tests'")
                raised += 1
                names[f"__gmts_exc{raised}"] = {"exc_class": path}
                if isinstance(n.exc, ast.Call):
                    n.exc.func = ast.Name(id=f"__gmts_exc{raised}", ctx=ast.Load())
                else:
                    n.exc = ast.Name(id=f"__gmts_exc{raised}", ctx=ast.Load())
            if isinstance(n, ast.Call) and not (
                    isinstance(n.func, ast.Name) and (n.func.id in EFFECT_BUILTINS
                                                      or n.func.id.startswith("__gmts_exc")
                                                      or n.func.id == NEXT_ITEM)
                    or isinstance(n.func, ast.Attribute) and n.func.attr in EFFECT_METHODS):
                raise Unconvertible("unittest.mock: a side effect's call")
        for n in ast.walk(tree):
            if not isinstance(n, ast.Name) or n.id in local or n.id in names:
                continue
            if n.id in EFFECT_BUILTINS and n.id not in self.env and n.id not in self.child or (
                    n.id == NEXT_ITEM):
                continue
            if n.id in self.local_functions or n.id in self.child or n.id in self.deferred and (
                    not isinstance(self.env.get(n.id), MockRef)) or n.id not in self.env:
                raise Unconvertible(f"unittest.mock: a side effect reading {n.id}")
            names[n.id] = self.mock_value(n)
        fn_def = ast.FunctionDef(name="__gmts_effect", args=a, body=body, decorator_list=[],
                                 returns=None, type_params=[], lineno=0)
        source = ast.unparse(ast.fix_missing_locations(fn_def))
        self.effect_names.update(n for n in names if not n.startswith("__gmts_exc"))
        fid = sum(op[0] == "fn" for op in self.mock_recipe)
        self.mock_recipe.append(["fn", fid, {"source": source, "names": names}])
        return {"fn": fid}

    def hand_to_mocks(self, value) -> dict:
        """A mutable value configuring a mock: the recipe's one object for it, by identity (a
        value two mocks return, or two tests give theirs, is one object in the run, as under
        unittest), as {"ref": value id}. A value inside another one, or holding one, cannot keep
        its identity in the child: Unconvertible."""
        entry = self.mock_values.get(id(value))
        if entry is None:
            inner = _inner_ids(value)
            if not _once(value) or any(e[3] & (inner | {id(value)}) or id(e[1]) in inner
                                       for e in self.mock_values.values()):
                raise Unconvertible("unittest.mock: a mutable value inside another one "
                                    "configuring a mock")
            entry = (len(self.mock_values), value, self, inner)
            self.mock_recipe.append(["value", entry[0], {"data": encode_input(value)}])
            self.mock_values[id(value)] = entry
        return {"ref": entry[0]}

    def mock_api(self, node) -> str | None:
        """The unittest.mock name `node` is through the tests' imports ('patch', 'patch.object',
        'patch.dict', 'MagicMock', 'Mock', 'mock_open'), else None."""
        node, parts = attribute_chain(node)
        if not isinstance(node, ast.Name) or node.id in self.child:
            return None
        value = self.env.get(node.id)
        for part in parts:
            value = getattr(value, part, None) if isinstance(value, (MockApi,
                                                                     MockModule)) else None
        return value.name if isinstance(value, MockApi) else None

    def mock_of(self, node):
        """(mock id, attribute path) for `m.return_value.json`, m a mock of the test's; else
        None."""
        node, parts = attribute_chain(node)
        if isinstance(node, ast.Name) and isinstance(self.env.get(node.id), MockRef):
            return self.env[node.id].id, parts
        if isinstance(node, ast.Name) and node.id in self.mock_aliases:
            id_, path = self.mock_aliases[node.id]
            return id_, path + parts
        return None

    def called(self) -> bool:
        """The test has made a step that may call the solution."""
        return any("eval" in s or "run" in s for s in self.steps[self.first:])

    def bind_mock(self, name: str, value):
        """`as m`, `m = MagicMock()`: the name holds the mock (read only while judging)."""
        self.child.discard(name)
        self.objects.discard(name)
        self.env[name] = value
        if isinstance(value, MockRef):
            self.deferred.add(name)
        else:
            self.deferred.discard(name)

    def make_mock(self, kind: str, keywords: dict) -> int:
        """A new mock of the recipe: MagicMock, Mock or mock_open, configured by keywords."""
        if self.called():
            raise Unconvertible("unittest.mock: a mock made after the solution ran")
        allowed = {"read_data"} if kind == "mock_open" else None
        for k in keywords:
            if k is None or k.startswith("_") or (allowed is not None and k not in allowed) or (
                    k in ("spec", "spec_set", "wraps", "unsafe", "name", "parent")):
                raise Unconvertible(f"unittest.mock: {kind}({k}=...)")
        specs = {k: self.mock_value(v, k == "side_effect") for k, v in keywords.items()}
        id_ = sum(op[0] == "new" for op in self.mock_recipe)
        self.mock_recipe.append(["new", id_, kind, specs])
        return id_

    def mock_value(self, node, effect: bool = False) -> dict:
        """A value configuring a mock, as the recipe's data: another mock, a list, an exception
        (its class's path, resolved in the child), plain data computed here, or (effect: a side
        effect) a function of the tests' (side_effect_function)."""
        if effect and (isinstance(node, ast.Lambda) or isinstance(node, ast.Name)
                       and node.id in self.local_functions):
            return self.side_effect_function(
                node if isinstance(node, ast.Lambda) else self.local_functions[node.id])
        if isinstance(node, ast.Name) and isinstance(self.env.get(node.id), MockRef):
            return {"mock": self.env[node.id].id}
        if isinstance(node, ast.Call) and self.mock_api(node.func) in MOCK_KINDS:
            if node.args:
                raise Unconvertible("unittest.mock: a mock made with positional arguments")
            return {"mock": self.make_mock(self.mock_api(node.func),
                                           {k.arg: k.value for k in node.keywords})}
        if isinstance(node, ast.List):
            return {"list": [self.mock_value(e) for e in node.elts]}
        evaluable = _names(node) <= set(self.env) | SAFE_NAMES | set(MODULES)
        exc = None if evaluable and not self.names_exception(node) else self.exception(node)
        if exc is not None:
            return {"exc": exc}
        if self.uses_child(node):
            raise Unconvertible("unittest.mock: a mock configured with the solution's values")
        if (isinstance(node, ast.Name) and node.id in self.env
                and id(self.env[node.id]) in self.mock_values):  # already the run's: its ref
            return {"ref": self.mock_values[id(self.env[node.id])][0]}
        value = self.parent_eval(node)
        if callable(value):
            raise Unconvertible("unittest.mock: a function or class configuring a mock")
        if type(value) in (list, dict, set, bytearray):
            return self.hand_to_mocks(value)
        return {"data": encode_input(value)}

    def names_exception(self, node) -> bool:
        """An exception class of a module the trainer imports, or one made of it
        (`json.JSONDecodeError('bad', 'doc', 0)`): made in the child, as other modules' are."""
        cls = self.named(node.func if isinstance(node, ast.Call) else node)
        return isinstance(cls, type) and issubclass(cls, BaseException)

    def exception(self, node):
        """[path, args] for an exception class or instance the tests name (`ValueError`,
        `requests.Timeout("x")`, `HTTPError`), else None."""
        call = node if isinstance(node, ast.Call) else None
        path = self.dotted(call.func if call else node)
        if path is None or not path.rpartition(".")[2][:1].isupper():
            return None
        if path.startswith("builtins."):
            cls = getattr(builtins, path[9:], None)
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                return None
        args = []
        if call is not None:
            if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
                raise Unconvertible("unittest.mock: an exception made with keywords")
            args = [encode_input(self.parent_eval(a)) for a in call.args]
        return [path, args]

    def dotted(self, node) -> str | None:
        """The import path of a builtin or of a name of a module the tests import
        (`requests.exceptions.HTTPError`, `os.environ`), else None."""
        node, parts = attribute_chain(node)
        if not isinstance(node, ast.Name) or node.id in self.child:
            return None
        if node.id in self.module_paths:
            return ".".join([self.module_paths[node.id], *parts])
        if not parts and node.id in BUILTIN_NAMES and node.id not in self.env:
            return f"builtins.{node.id}"
        return None

    def patch_target(self, node) -> str:
        """patch.object's or patch.dict's first argument as an import path."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        path = self.dotted(node)
        if path is None or path.startswith("builtins."):
            raise Unconvertible(f"unittest.mock: patching {ast.unparse(node)[:60]}")
        return path

    def patch_block(self, stmt) -> bool:
        """`with patch(t) as m, patch.dict(os.environ, {...}):`: each patch a step of the child's
        (the target replaced by a stub of the mock's), the body, then a step undoing them. False
        when the with-statement holds no patch."""
        kinds = [self.mock_api(i.context_expr.func) if isinstance(i.context_expr, ast.Call)
                 else None for i in stmt.items]
        if not any(k and k.startswith("patch") for k in kinds):
            return False
        if self.mock_recipe is None:
            raise Unconvertible("unittest.mock outside a TestCase")
        if not all(k in ("patch", "patch.object", "patch.dict") for k in kinds):
            raise Unconvertible("unittest.mock: patches beside other contexts")
        for item, kind in zip(stmt.items, kinds):
            self.patch(item.context_expr, kind, item.optional_vars)
        for s in stmt.body:
            self.statement(s)
        self.steps.append({"unpatch": len(stmt.items)})
        return True

    def patch(self, call, kind: str, var):
        """One patch(...) of a block: the child's step, and the name `as` binds."""
        args, keywords = call.args, {k.arg: k.value for k in call.keywords}
        if None in keywords or any(isinstance(a, ast.Starred) for a in args):
            raise Unconvertible("unittest.mock: a patch with * or ** arguments")
        if kind == "patch.dict":
            values = args[1] if len(args) > 1 else keywords.get("values")
            if var is not None or len(args) > 2 or set(keywords) - {"values", "clear"}:
                raise Unconvertible("unittest.mock: a patch.dict of another form")
            data = self.parent_eval(values) if values is not None else {}
            clear = self.parent_eval(keywords["clear"]) if "clear" in keywords else False
            if not isinstance(data, dict):
                raise Unconvertible("unittest.mock: patch.dict with values not a dict")
            self.steps.append({"patch_dict": self.patch_target(args[0]),
                               "data": encode_input(data), "clear": bool(clear)})
            return
        if kind == "patch.object":
            attr = self.parent_eval(args[1]) if len(args) > 1 else None
            if not isinstance(attr, str):
                raise Unconvertible("unittest.mock: patch.object without an attribute name")
            target, rest = f"{self.patch_target(args[0])}.{attr}", args[2:]
        else:
            target = self.parent_eval(args[0]) if args else None
            if not isinstance(target, str) or "." not in target:
                raise Unconvertible("unittest.mock: a patch target that is not a dotted string")
            rest = args[1:]
        create = self.parent_eval(keywords.pop("create")) if "create" in keywords else False
        bad = set(keywords) & {"spec", "spec_set", "autospec", "wraps", "unsafe"}
        if len(rest) > 1 or bad or type(create) is not bool:
            raise Unconvertible(f"unittest.mock: patch with {sorted(bad) or 'spec'}")
        new = rest[0] if rest else keywords.pop("new", None)
        if var is None and not keywords and (isinstance(new, ast.Lambda) or isinstance(
                new, ast.Name) and new.id in self.local_functions):
            # `patch('builtins.input', lambda _: '5')`: called as the function is (nothing reads
            # the replacement itself), so the mock of a side effect the trainer runs
            keywords["side_effect"], new = new, None
        text = self.stream_text(new, keywords.get("new_callable"))
        if text is not None:  # `patch('sys.stdin', io.StringIO('2\n3\n'))`: a stream of the child's
            if len(rest) > 1 or set(keywords) - {"new_callable"}:
                raise Unconvertible("unittest.mock: a stream patched with keywords")
            self.steps.append({"patch": target, "stream": text,
                               **({"create": True} if create else {})})
            if var is not None:  # `as out`: the stream itself, `out.getvalue()` read there
                if not isinstance(var, ast.Name):
                    raise Unconvertible("unittest.mock: `as` a target other than a name")
                self.steps[-1]["as"] = var.id
                self.env.pop(var.id, None)
                self.deferred.discard(var.id)
                self.child.add(var.id)
                self.objects.add(var.id)
            return
        if new is not None:
            if keywords:
                raise Unconvertible("unittest.mock: patch with new= and keywords")
            spec = self.mock_value(new)
            if "mock" in spec:
                step, bound = {"handle": spec["mock"]}, MockRef(spec["mock"])
            elif "data" in spec:
                step, bound = {"data": spec["data"]}, self.parent_eval(new)
            else:
                raise Unconvertible("unittest.mock: patching a target with an exception")
        else:
            factory = keywords.pop("new_callable", None)
            made = "MagicMock" if factory is None else self.mock_api(factory)
            if made not in MOCK_KINDS:
                raise Unconvertible("unittest.mock: new_callable that is not a mock of its own")
            id_ = self.make_mock(made, keywords)
            step, bound = {"handle": id_}, MockRef(id_)
        self.steps.append({"patch": target, **step, **({"create": True} if create else {})})
        if var is not None:
            if not isinstance(var, ast.Name):
                raise Unconvertible("unittest.mock: `as` a target other than a name")
            self.bind_mock(var.id, bound)

    def stream_text(self, new, factory) -> str | None:
        """The text of an `io.StringIO` the test patches in (`new=StringIO('5\n')`, or
        `new_callable=StringIO`: empty), made in the child from it; None for anything else."""
        if new is None and factory is not None:
            return "" if self.dotted(factory) == "io.StringIO" else None
        if not (isinstance(new, ast.Call) and self.dotted(new.func) == "io.StringIO"
                and not new.keywords and len(new.args) <= 1):
            return None
        text = self.parent_eval(new.args[0]) if new.args else ""
        if type(text) is not str:
            raise Unconvertible("unittest.mock: a StringIO of what is not a str")
        return text

    def patch_call(self, node) -> str | None:
        """`patch(...)`, `patch.object(...)`, `patch.dict(...)`: its kind, else None."""
        kind = self.mock_api(node.func) if isinstance(node, ast.Call) else None
        return kind if kind in ("patch", "patch.object", "patch.dict") else None

    def patcher_statement(self, stmt) -> bool:
        """A patcher started and stopped by hand, as BigCodeBench's setUp does it: `self.p =
        patch('x')`, `self.m = self.p.start()` (or `patch('x').start()`), `self.p.stop()` in
        tearDown, `self.addCleanup(self.p.stop)` / `patch.stopall`: the start is a patch step of
        the child's (as a with-block's), a stop undoes it there, a cleanup at the test's end
        (the child's patches end with the unit). True when handled."""
        target = value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name):
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.Expr):
            value = stmt.value
        if not isinstance(value, ast.Call):
            return False
        kind = self.patch_call(value)
        if kind is not None and target is not None:  # `p = patch(...)`: not started yet
            self.patchers[target.id] = (value, kind)
            self.env.pop(target.id, None)
            return True
        func = value.func
        if isinstance(func, ast.Name) and func.id == CLEANUP:  # self.addCleanup(...)
            arg = value.args[0] if len(value.args) == 1 and not value.keywords else None
            if arg is not None and self.mock_api(arg) == "patch.stopall":
                self.cleanups.add(True)
            elif (isinstance(arg, ast.Attribute) and arg.attr == "stop"
                  and isinstance(arg.value, ast.Name) and arg.value.id in self.patchers):
                self.cleanups.add(arg.value.id)
            else:
                raise Unconvertible("unittest.mock: a cleanup other than a patcher's stop")
            return True
        if self.mock_api(func) == "patch.stopall":
            if value.args or value.keywords or target is not None:
                raise Unconvertible("unittest.mock: patch.stopall of another form")
            if self.started:
                self.steps.append({"unpatch": len(self.started)})
            self.started.clear()
            return True
        if not (isinstance(func, ast.Attribute) and func.attr in ("start", "stop")):
            return False
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id in self.patchers:
            (call, kind), key = self.patchers[owner.id], owner.id
        elif self.patch_call(owner) is not None and func.attr == "start":
            call, kind, key = owner, self.patch_call(owner), object()
        else:
            return False
        if value.args or value.keywords:
            raise Unconvertible(f"unittest.mock: {func.attr}() with arguments")
        if func.attr == "stop":
            if target is not None or not self.started or self.started[-1] != key:
                raise Unconvertible("unittest.mock: a patcher stopped out of order")
            self.started.pop()
            self.steps.append({"unpatch": 1})
            return True
        if key in self.started:
            raise Unconvertible("unittest.mock: a patcher started twice")
        if self.called():
            raise Unconvertible("unittest.mock: a patch started after the solution ran")
        self.patch(call, kind, target)
        self.started.append(key)
        return True

    def mocks_in_order(self):
        """A check reading a mock's record (`assert_called_once_with`, `call_count`) is judged
        after the whole run, so no step that may call the solution comes after it. A name bound
        from a mock by attribute reads alone (`inst = m.return_value.__enter__.return_value`: the
        same object whenever it is read) may come before; the checks reading it then may not."""
        calls = [i for i, s in enumerate(self.steps) if i >= self.first
                 and ("eval" in s or "run" in s)]
        held = set()  # names bound from mocks
        # every patcher started by hand is stopped by the test's end (a stop or a cleanup): one
        # left running would patch the later tests too under unittest
        if any(k not in self.cleanups and True not in self.cleanups for k in self.started):
            raise Unconvertible("unittest.mock: a patch started and never stopped")
        for check in self.checks:
            if check.expr is None:
                continue
            names = set(check.expr.co_names) | {n for c in check.expr.co_consts
                                                if hasattr(c, "co_names") for n in c.co_names}
            values = [n for n in names if isinstance(check.env.get(n), ValueRef)]
            if not any(isinstance(check.env.get(n), MockRef) or n in held for n in names):
                if values and calls and check.at <= calls[-1]:
                    # a value configuring a mock, read before a later call: as the test bound
                    # it (the run's object is known only as each unit ends)
                    check.env.update((n, check.plan_values[n]) for n in values)
                continue
            if check.kind == "bind" and not any(
                    i.opname.startswith("CALL") for i in dis.get_instructions(check.expr)):
                held.update(check.names)
                continue
            if calls and check.at <= calls[-1]:
                raise Unconvertible("unittest.mock: a mock's record read before a later call of "
                                    "the solution's")
            if check.kind == "bind":
                held.update(check.names)

    def files_in_child(self, stmt):
        """The tests' own work on files (`os.makedirs(d)`, `os.remove(p)`, `os.listdir(d)`:
        OS_FILES; `os.path.exists(p)`; `pd.read_csv(p)`, `np.load(p)`: READS) runs in the child,
        on the files the answer reads and writes: `stmt` (a copy) with those calls on the module as
        the child has it, a name of the child's (their results cross as data; os.path's text
        functions stay here)."""
        os_, path = _os_for_tests(), _os_for_tests().path
        readers = {id(self.imports[m]): m for m in READS if m in self.imports}
        if not any(v is os_ or v is path or id(v) in readers for v in self.env.values()):
            return stmt

        def on_files(n):  # (the node naming the module, the module) in `os.remove`, `pd.read_csv`
            if not isinstance(n, ast.Attribute):
                return None
            named = self.env.get(n.value.id) if isinstance(n.value, ast.Name) else None
            if n.attr in OS_FILES and named is os_:
                return n, "os"
            module = readers.get(id(named)) if named is not None else None
            if module is not None and (n.attr.startswith("read_") if READS[module] is None
                                       else n.attr in READS[module]):
                return n, module
            if n.attr not in FILE_QUESTIONS:
                return None
            if named is path:  # `import os.path as osp`
                return n, "os.path"
            inner = n.value
            return (inner, "os") if isinstance(inner, ast.Attribute) and inner.attr == "path" and (
                isinstance(inner.value, ast.Name) and self.env.get(inner.value.id) is os_) else None
        if not any(on_files(n) for n in ast.walk(stmt)):
            return stmt
        stmt = copy.deepcopy(stmt)
        for n in list(ast.walk(stmt)):
            found = on_files(n)
            if found is None:
                continue
            at, module = found
            name = _CHILD_OS if module.startswith("os") else f"__gmts_{module}"
            child = ast.Name(id=name, ctx=ast.Load())
            at.value = child if module != "os.path" else ast.Attribute(value=child, attr="path",
                                                                       ctx=ast.Load())
            if name not in self.child:
                source = "os" if module.startswith("os") else module
                self.steps.append({"run": f"{name} = __gmts_builtins['__import__']({source!r})"})
                self.child.add(name)
                self.solution_names.add(name)
        return stmt

    def child_write(self, node) -> str | None:
        """`df.to_csv(path)`, `np.save(path, a)`, `json.dump(obj, fh)` (WRITES) as a statement of
        the tests', on their own values: the child's source making the call there, on those values
        rebuilt (the file is where the answer reads it); else None."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in WRITES) or any(
                isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            return None
        module = self.module_of(node.func)
        if module is not None:  # `np.save(path, a)`: numpy's function, in the child
            func = ast.parse(f"__gmts_builtins['__import__']({module!r}).{node.func.attr}",
                             mode="eval").body
        elif not self.uses_child(node.func.value) and not self.deferred & _names(node.func):
            func = ast.Attribute(value=self._inline(copy.deepcopy(node.func.value)),
                                 attr=node.func.attr, ctx=ast.Load())
        else:
            return None
        call = ast.Call(func=func, args=[self._inline(copy.deepcopy(a)) for a in node.args],
                        keywords=[ast.keyword(arg=k.arg, value=self._inline(copy.deepcopy(
                            k.value))) for k in node.keywords])
        return ast.unparse(call)

    def import_(self, stmt):
        """`import random`, `from random import randint` inside a test: the trainer's own modules
        (IMPORTABLE); `from solution import f`: the solution's names, bound in the child."""
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "solution" and not stmt.level:
            names = [a.asname or a.name for a in stmt.names]
            if "*" in names:
                raise Unconvertible("from solution import *")
            self.steps.append({"run": ast.unparse(stmt)})
            for name in names:
                self.env.pop(name, None)
                self.deferred.discard(name)
                self.child.add(name)
            return
        if _child_module(stmt):  # `import shutil` in a test: the child's, as at module level
            self.steps.append({"run": ast.unparse(stmt)})
            for name, is_module in _child_module_names(stmt):
                self.env.pop(name, None)
                self.deferred.discard(name)
                self.child.add(name)
                self.solution_names.add(name)
                if is_module:
                    self.objects.add(name)
            return
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                _lazy_import(self.imports, a.name)
            # `import numpy.testing` binds numpy
            pairs = [(a.asname, a.name, None) if a.asname else (a.name.split(".")[0],
                                                                a.name.split(".")[0], None)
                     for a in stmt.names]
        else:
            _lazy_import(self.imports, stmt.module)
            pairs = [(a.asname or a.name, stmt.module, a.name) for a in stmt.names]
        for bound, module, attr in pairs:
            if stmt.__class__ is ast.ImportFrom and stmt.level or module not in self.imports:
                raise Unconvertible(f"import of {module}")
            if attr is not None and (attr.startswith("_")
                                     or not hasattr(self.imports[module], attr)):
                raise Unconvertible(f"from {module} import {attr}")
            value = self.imports[module] if attr is None else getattr(self.imports[module], attr)
            self.child.discard(bound)
            self.objects.discard(bound)
            self.deferred.discard(bound)
            self.env[bound] = value

    def unroll(self, stmt):
        """`for x in range(2, 8): assert f(x, x + 1) == str(x)`: a loop over values the trainer
        computes (at most MAX_UNROLL rounds in the plan) is the sequence of its bodies, one per
        value, each binding the target here; `while i < 3:` the same, its condition computed here
        before each round. `break` and `continue` (under an `if` the trainer decides) and the
        loop's `else` as Python runs them. A `for` over a value of the answer's whose body only
        checks: checked_loop."""
        if any(isinstance(n, (ast.With, ast.Try, ast.TryStar)) and any(
                isinstance(m, (ast.Break, ast.Continue)) for m in ast.walk(n))
               for b in stmt.body for n in ast.walk(b)):
            raise Unconvertible("a break or continue inside a with or try block")
        if isinstance(stmt, ast.For) and (self.uses_child(stmt.iter)
                                          or self.deferred & _names(stmt.iter)):
            self.checked_loop(stmt)
            return
        if isinstance(stmt, ast.For):
            _target_names(stmt.target)  # names, or tuples of them (`for i, (inp, exp) in ...`)
            values = iter(self.parent_eval(stmt.iter))
        elif self.uses_child(stmt.test):
            raise Unconvertible("a while loop on the solution's values")
        broke = False
        while not broke:
            left = getattr(_ROUNDS, "left", MAX_UNROLL)
            if isinstance(stmt, ast.For):
                value = next(values, _UNSET)
                if value is _UNSET:
                    break
            elif not self.parent_eval(stmt.test):
                break
            if left == 0:
                raise Unconvertible(f"loops of more than {MAX_UNROLL} rounds in all")
            _ROUNDS.left = left - 1
            if isinstance(stmt, ast.For):
                self.assign(stmt.target, ast.Name(id="__value", ctx=ast.Load()), given=value)
            try:
                for s in stmt.body:
                    self.statement(s)
            except _Continue:
                pass
            except _Break:
                broke = True
        for s in () if broke else stmt.orelse:
            self.statement(s)

    def print_(self, call):
        """A test's `print(...)`: run in the child on the real builtin, so what an object of the
        answer's prints (its `__str__`) or raises is pytest's, and capsys reads the line; `file=`
        sys.stdout or sys.stderr. An argument computed here from the answer's results (a value
        the child does not hold): Unconvertible."""
        parts = []
        for a in call.args:
            if not self.child_evaluable(a):  # a starred argument, a name bound while judging
                raise Unconvertible("print of a value computed from the solution's results")
            parts.append(self.child_source(a))
        for k in call.keywords:
            if k.arg == "file" and ast.unparse(k.value) in ("sys.stdout", "sys.stderr") and (
                    "sys" not in self.env):  # the tests' `import sys`: the child's own
                parts.append(f"file=__gmts_builtins['__import__']('sys').{k.value.attr}")
            elif k.arg in ("sep", "end", "flush") and not self.uses_child(k.value) and not (
                    self.deferred & _names(k.value)):
                parts.append(f"{k.arg}={self.child_source(k.value)}")
            else:
                raise Unconvertible(f"print with {k.arg}=")
        self.steps.append({"run": f"__gmts_builtins['print']({', '.join(parts)})"})

    def checked_loop(self, stmt):
        """`for a, b in zip(f(3), want): assert a == b` (`self.assertEqual(...)`, in a subTest
        too): a loop over a value of the answer's (its length is the answer's) whose body only
        checks is the check `all(... for a, b in zip(f(3), want))`, its conditions in order, the
        first failing one ending it, as the loop's first failing assert does. Its names are
        unbound after it (a later read: Unconvertible). Any other body: Unconvertible."""
        def conditions(body) -> list:
            out = []
            for s in body:
                if isinstance(s, ast.Assert):
                    out.append(s.test)
                elif (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                      and isinstance(s.value.func, ast.Name)
                      and s.value.func.id.startswith("__unittest_assert")
                      and s.value.func.id in self.env):  # None, or it raises
                    out.append(ast.Compare(left=s.value, ops=[ast.Is()],
                                           comparators=[ast.Constant(value=None)]))
                elif isinstance(s, ast.With) and all(
                        ast.unparse(i.context_expr.func) in ("self.subTest", "__unittest_subTest")
                        for i in s.items if isinstance(i.context_expr, ast.Call)) and all(
                        isinstance(i.context_expr, ast.Call) and not i.optional_vars
                        for i in s.items):
                    out += conditions(s.body)
                elif not isinstance(s, ast.Pass):
                    raise Unconvertible("a loop over the solution's values")
            return out
        if stmt.orelse or not isinstance(stmt.target, (ast.Name, ast.Tuple, ast.List)):
            raise Unconvertible("a loop over the solution's values")
        tests = conditions(stmt.body) or [ast.Constant(value=True)]  # `pass`: it iterates
        test = tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.And(), values=tests)
        check = ast.Call(func=ast.Name(id="all", ctx=ast.Load()), keywords=[], args=[
            ast.GeneratorExp(elt=test, generators=[ast.comprehension(
                target=stmt.target, iter=stmt.iter, ifs=[], is_async=0)])])
        self.statement(ast.fix_missing_locations(ast.Assert(test=check)))
        self.unbind(_target_names(stmt.target))  # Python leaves them bound to the last item

    def assign(self, target, value, given=_UNSET):
        """`target = value`: the value computed from the names as they are before the binding
        (`x = x + [1]`), then the target's names rebound."""
        names = _target_names(target)
        if given is not _UNSET or (not self.uses_child(value)
                                   and not self.deferred & _names(value)):
            # inputs: computed here now
            if given is _UNSET:
                self.before_change(value)
            result = given if given is not _UNSET else self.parent_eval(value)
            self.unbind(names)
            self.env.update(_unpack(target, result))
        elif any(isinstance(t, (ast.Tuple, ast.List, ast.Starred))
                 for t in getattr(target, "elts", ())) and not self.is_child_value(value):
            raise Unconvertible("nested or starred unpacking of the solution's values")
        elif self.is_child_value(value):  # `result = f(x)`, `s = Stack()`: bound in the child
            source, holds = self.child_source(value), self.holds_object(value)
            self.unbind(names)
            # a name of every later test's (setUpClass's `cls.x = f(...)`): the child keeps it
            share = {"share": True} if set(names) & self.module_level else {}
            self.steps.append({"run": f"{ast.unparse(target)} = {source}", "binds": names,
                               **share})
            self.child.update(names)
            if holds:  # `s = Stack()`, `v3 = v1 + v2`
                self.objects.update(names)
            if isinstance(value, ast.Call) and self.is_callee(value.func) and not (
                    self.setup & _names(value.func)):  # `p = make(1, 2)`
                self.results.update(names)
        else:  # `r = sorted(f(x))`: the child computes f(x), the trainer the rest, while judging
            expr = self.parent_expr(self.split(value), self.placeholders())
            env = dict(self.env)
            self.unbind(names)
            self.checks.append(Check("bind", expr=expr, env=env, names=tuple(names)))
            self.deferred.update(names)

    def unbind(self, names):
        """Forget what the unit knew of each name (before it is bound again, or where Python
        leaves it bound to what the plan does not hold)."""
        for name in names:
            self.env.pop(name, None)
            self.child.discard(name)
            self.objects.discard(name)
            self.deferred.discard(name)
            self.results.discard(name)
            self.raised.pop(name, None)

    def augmented(self, stmt):
        """`n += v` (any operator): run as written in the child where n is the child's, else
        `n = __gmts_in_place("iadd", n, v)` (operator's in-place function: a list extended in
        place, an int rebound, as Python runs it); `d[k] += v` as `d[k] = d[k] + v` in place
        (a key without calls: Python evaluates it once)."""
        target = stmt.target
        if isinstance(target, ast.Subscript) and not any(
                isinstance(n, (ast.Call, ast.NamedExpr)) for n in ast.walk(target)):
            read = copy.deepcopy(target)
            read.ctx = ast.Load()
            self.item_statement(target, _in_place_call(
                _AUGMENTED_OPS[type(stmt.op)], read, stmt.value))
            return
        if not isinstance(target, ast.Name):
            raise Unconvertible("an augmented assignment to something other than a name or item")
        name = target.id
        if name in self.child:
            if not self.child_evaluable(stmt.value):
                raise Unconvertible("an augmented assignment of the child's from the trainer's")
            share = {"share": True} if name in self.module_level else {}
            self.steps.append({"run": ast.unparse(ast.AugAssign(
                target=target, op=stmt.op, value=ast.parse(
                    self.child_source(stmt.value), mode="eval").body)), "binds": [name], **share})
            return
        self.assign(ast.Name(id=name, ctx=ast.Store()), _in_place_call(
            _AUGMENTED_OPS[type(stmt.op)], ast.Name(id=name, ctx=ast.Load()), stmt.value))

    def item_statement(self, target, value=None):
        """`d[k] = v` (or `del d[k]`, value None) on an item of a value of the child's: run there
        as written; on the tests' own value (a list, dict, set, array, frame: _changeable):
        `d = __gmts_in_place("setitem", d, k, v)` (the container, changed in place: a check
        made before keeps what it read, _Unit.before_change), judged with each verdict's copies
        where v is computed from the answer's; an item of an item (`d['a']['x'] = 2`) only of
        values computed here now. Anything else (`os.environ['K'] = v`): Unconvertible."""
        root = _root(target)
        parts = [target] if value is None else [target, value]
        if isinstance(root, ast.Name) and root.id in self.child:
            if not all(self.child_evaluable(p) for p in parts):
                raise Unconvertible("an item of the child's set from the trainer's values")
            source = self.child_source(target)
            self.steps.append({"run": f"del {source}" if value is None else
                               f"{source} = {self.child_source(value)}"})
            return
        if not (isinstance(root, ast.Name) and _changeable(self.env.get(root.id))
                or isinstance(root, ast.Name) and root.id in self.deferred
                and isinstance(target.value, ast.Name)):
            raise Unconvertible(f"an item of {ast.unparse(root)[:40]} set by the tests")
        key = target.slice
        if isinstance(key, ast.Slice):  # `xs[1:] = [9]`: the slice object
            key = ast.Call(func=ast.Name(id="slice", ctx=ast.Load()), keywords=[], args=[
                k or ast.Constant(value=None) for k in (key.lower, key.upper, key.step)])
        container = copy.deepcopy(target.value)
        container.ctx = ast.Load()
        call = _in_place_call("delitem" if value is None else "setitem", container, key,
                              *([] if value is None else [value]))
        if isinstance(target.value, ast.Name):
            self.assign(ast.Name(id=root.id, ctx=ast.Store()), call)
            return
        if self.uses_child(call) or self.deferred & _names(call):
            raise Unconvertible("an item of an item set from the answer's values")
        self.before_change(call)
        self.parent_eval(call)

    def check_identity(self, test):
        """`is` between two values the trainer rebuilds separately is meaningless (`result is not
        data` would always hold): only `is` against None, True, False or ... stays here; anything
        else runs in the harness."""
        for n in ast.walk(test):
            if isinstance(n, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot))
                                                  for op in n.ops):
                operands = [n.left] + n.comparators
                for i, op in enumerate(n.ops):
                    if not isinstance(op, (ast.Is, ast.IsNot)):
                        continue
                    pair = operands[i], operands[i + 1]
                    if (not any(self.exact_identity(x) for x in pair)
                            and any(self.uses_child(x) or _names(x) & set(self.raised)
                                    for x in pair)):
                        raise Unconvertible("identity between computed values")

    def exact_identity(self, node) -> bool:
        """An operand whose identity survives rebuilding: None, True, False, ..., or a builtin type
        (`type(r) is set`: decode rebuilds exact types)."""
        if isinstance(node, ast.Constant):
            return _singleton(node)
        return (isinstance(node, ast.Name) and node.id in SAFE_NAMES and node.id not in self.env
                and node.id not in self.child and isinstance(getattr(builtins, node.id), type))

    def open_block(self, stmt) -> bool:
        """`with open(path[, mode]) as fh:` (the real builtin): the file opened in the child, `fh`
        an object of the child's there (`fh.write(...)`, `fh.read()` run there, on the files the
        answer reads or wrote), the body, then the file closed. False for another with-block."""
        item = stmt.items[0] if len(stmt.items) == 1 else None
        call = item.context_expr if item else None
        if not (isinstance(call, ast.Call) and self.is_builtin(call.func)
                and call.func.id == "open" and isinstance(item.optional_vars, ast.Name)):
            return False
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords):
            raise Unconvertible("open() with * or ** arguments")
        name = item.optional_vars.id
        opened = ast.Call(func=ast.parse("__gmts_builtins['open']", mode="eval").body,
                          args=[self._inline(copy.deepcopy(a)) for a in call.args],
                          keywords=[ast.keyword(arg=k.arg, value=self._inline(
                              copy.deepcopy(k.value))) for k in call.keywords])
        self.assign(item.optional_vars, ast.Constant(value=None))  # what the name held: gone
        self.bind_in_child(name, ast.unparse(opened))
        self.objects.add(name)
        for s in stmt.body:
            self.statement(s)
        self.steps.append({"run": f"{name}.close()"})
        return True

    def raises_block(self, stmt):
        """`with pytest.raises(E[, match=...]): body`: the body runs in the child; E is checked
        here, against the raised class's whole MRO (a real subclass passes, a class of the
        solution's that merely shares E's name does not)."""
        item = stmt.items[0] if len(stmt.items) == 1 else None
        call = item.context_expr if item else None
        unittest = isinstance(call, ast.Call) and ast.unparse(call.func) == UNITTEST_RAISES
        raises = isinstance(call, ast.Call) and (ast.unparse(call.func) == "pytest.raises" or (
            isinstance(call.func, ast.Name) and self.env.get(call.func.id) is _RAISES)
            or unittest)
        var = item.optional_vars if item else None
        if not (raises and len(call.args) == 1
                and (var is None or isinstance(var, ast.Name))):
            raise Unconvertible("with-statement other than pytest.raises")
        exc = call.args[0]
        expected = []
        for e in (exc.elts if isinstance(exc, ast.Tuple) else [exc]):
            path = self.dotted(e)
            own = self.solution_class(e)  # `from solution import E`, `solution.E`
            if own is not None:
                expected.append((own, "solution"))
            elif path is not None and path.startswith("builtins."):
                builtin = getattr(builtins, e.id, None)
                if not (isinstance(builtin, type) and issubclass(builtin, BaseException)):
                    raise Unconvertible("exception class defined by the tests")
                expected.append((e.id, "builtins"))
            elif path is not None and path.split(".")[0] != "solution" and (
                    path.count(".") < MAX_EXC_PATH[0] and len(path) <= MAX_EXC_PATH[1]):
                # `requests.HTTPError`, `from subprocess import CalledProcessError`: the class at
                # that path of a module the tests import, resolved in the child before the
                # solution is imported (its own rebinding of the name is not read)
                expected.append((path, "module"))
            else:
                raise Unconvertible("exception class defined by the tests")
        match = None
        for kw in call.keywords:
            if kw.arg != "match":
                raise Unconvertible(f"pytest.raises({kw.arg}=...)")
            match = self.parent_eval(kw.value)
            if not isinstance(match, str):
                raise Unconvertible("match= that is not a string")
        lines, binds = [], []
        def in_child(value) -> bool:  # `f(-1)`, `acc.deposit(-1)` on what the solution returned
            return self.is_child_value(value) or (isinstance(value, ast.Call) and self.uses_child(
                value) and self.child_evaluable(value))
        for s in stmt.body:  # the block stops at its first exception, as in pytest: one step
            if isinstance(s, ast.Expr) and in_child(s.value):
                lines.append(self.child_source(s.value))
            elif (isinstance(s, ast.Assign) and len(s.targets) == 1
                  and isinstance(s.targets[0], ast.Name)
                  and in_child(s.value)):
                lines.append(f"{s.targets[0].id} = {self.child_source(s.value)}")
                binds.append(s.targets[0].id)
                self.child.add(s.targets[0].id)
                self.env.pop(s.targets[0].id, None)
            else:
                raise Unconvertible("pytest.raises around code that is not a call of the "
                                    "solution's")
        self.steps.append({"run": "\n".join(lines), "binds": binds})
        own = [name for name, origin in expected if origin == "solution"]
        if own:  # resolved by the child when the step raises
            self.steps[-1]["exc_names"] = own
        names = ()
        if var is not None:  # `as excinfo` / `as cm`: what the test reads of it crosses as data
            self.assign(var, ast.Constant(value=None))  # what the name held is forgotten
            self.env.pop(var.id)
            self.deferred.add(var.id)
            self.raised[var.id] = (len(self.steps) - 1, "exception" if unittest else "value")
            self.steps[-1]["parts"] = []
            names = (var.id,)
        self.checks.append(Check("raises", step=len(self.steps) - 1, exceptions=tuple(expected),
                                 match=match, names=names,
                                 info="unittest" if unittest else "pytest",
                                 optional=getattr(stmt, "gmts_optional", False)))

    def raised_parts(self, stmt):
        """The uses of a caught exception's name in a statement (`str(excinfo.value)`,
        `excinfo.value.args`, `excinfo.match(r)`, `cm.exception.errno`): each attribute read of
        the exception becomes a part the child reports with it, as data; its class (`.typename`,
        `.type`, `type(...)`, `isinstance(...)` against builtin exception classes) is read from the
        raised class's MRO (class_of_the_raised); any other use (`excinfo.value` itself, a private
        attribute): Unconvertible."""
        parents = {id(c): n for n in ast.walk(stmt) for c in ast.iter_child_nodes(n)}
        for node in list(ast.walk(stmt)):  # the nodes as they were: rewrites below add some
            if not (isinstance(node, ast.Name) and node.id in self.raised
                    and node.id in self.deferred):
                continue
            step, accessor = self.raised[node.id]
            up = parents.get(id(node))
            above = parents.get(id(up))
            if (isinstance(up, ast.Attribute) and up.attr == "match" and accessor == "value"
                    and isinstance(above, ast.Call) and above.func is up):
                continue  # pytest's ExceptionInfo.match: searched here, in the message
            if isinstance(up, ast.Attribute) and up.attr in ("raised_is", "raised_a") or (
                    accessor == "value" and isinstance(up, ast.Attribute)
                    and up.attr == "typename"):
                continue  # the raised class, read from its MRO (below: what they rewrite)
            if isinstance(up, ast.Attribute) and accessor == "value" and up.attr == "type":
                if not self.class_of_the_raised(node.id, up, above, None, of_type=True):
                    self.type_as_builtin_name(up, above)
                continue
            if not (isinstance(up, ast.Attribute) and up.attr == accessor):
                raise Unconvertible(f"a use of the caught exception's {node.id!r} other than "
                                    f".{accessor}")
            further = parents.get(id(above))
            if self.class_of_the_raised(node.id, up, above, further):
                continue
            if isinstance(above, ast.Attribute) and isinstance(further, ast.Attribute) and (
                    further.attr not in PLAIN_ATTRS):
                # `excinfo.value.response.status_code`: an object inside the exception
                raise Unconvertible("an attribute of an attribute of the caught exception")
            if isinstance(above, ast.Attribute) and not above.attr.startswith("_"):
                if above.attr not in self.steps[step]["parts"]:
                    self.steps[step]["parts"].append(above.attr)
            elif not (isinstance(above, ast.Call) and above.args == [up] and not above.keywords
                      and isinstance(above.func, ast.Name) and above.func.id in ("str", "repr")
                      and self.is_builtin(above.func)):
                raise Unconvertible("the caught exception used other than by str(), repr() or "
                                    "a public attribute")
            elif above.func.id == "repr" and "__repr__" not in self.steps[step]["parts"]:
                self.steps[step]["parts"].append("__repr__")


def _call(owner, method: str, *args) -> ast.Call:
    """`owner.method(*args)`, args constants."""
    return ast.Call(func=ast.Attribute(value=owner, attr=method, ctx=ast.Load()),
                    args=[ast.Constant(value=a) for a in args], keywords=[])


def _is_raises(node) -> bool:
    return (isinstance(node, ast.With) and bool(node.items)
            and "raises" in ast.unparse(node.items[0]))


def _count_cases(node) -> int:
    """Test cases in a test function: its asserts and raises blocks; a test with neither checks that
    it runs."""
    return max(1, sum(isinstance(n, ast.Assert) or _is_raises(n) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr.startswith("assert") and ast.unparse(n.func.value) == "self")
        for n in ast.walk(node)))


_SKIPS = ("pytest.mark.skip", "mark.skip", "unittest.skip", "skip")


# a conditional skip -> (the unconditional one of its family, the condition's value that skips)
_SKIP_IFS = {"pytest.mark.skipif": ("pytest.mark.skip", True), "mark.skipif": ("mark.skip", True),
             "unittest.skipIf": ("unittest.skip", True),
             "unittest.skipUnless": ("unittest.skip", False)}
_FACTS = (ast.Expression, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Not, ast.And, ast.Or,
          ast.Constant, ast.Tuple, ast.Attribute, ast.Name, ast.Load, ast.Subscript, ast.Slice,
          ast.cmpop)


def _settle_skip_conditions(body, sys_imported: bool) -> None:
    """`@pytest.mark.skipif(cond, reason=...)`, `@unittest.skipIf(cond, reason)`, `skipUnless`
    whose condition is a fact of the interpreter, the same one the sandbox runs
    (`sys.version_info`, `sys.platform`, `sys.maxsize`, constants): decided here as the runner
    decides it, the mark becoming its family's unconditional skip or going. Any other condition
    stays for pytest."""
    for stmt in body:
        if isinstance(stmt, ast.ClassDef):
            _settle_skip_conditions(stmt.body, sys_imported)
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        kept = []
        for deco in stmt.decorator_list:
            name = ast.unparse(deco.func) if isinstance(deco, ast.Call) else ""
            value = _interpreter_fact(deco.args[0], sys_imported) if (
                name in _SKIP_IFS and deco.args) else None
            if value is None:
                kept.append(deco)
            elif bool(value) == _SKIP_IFS[name][1]:
                kept.append(ast.Call(ast.parse(_SKIP_IFS[name][0], mode="eval").body,
                                     deco.args[1:], deco.keywords))
        stmt.decorator_list = kept


def _interpreter_fact(node, sys_imported: bool):
    """The value of a skip condition made of constants and `sys.version_info` / `platform` /
    `maxsize` / `byteorder` (only where the tests import sys), else None."""
    import sys
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if not all(isinstance(n, _FACTS) for n in ast.walk(ast.Expression(node))) or names - (
            {"sys"} if sys_imported else set()) or any(
            isinstance(n, ast.Attribute) and not (isinstance(n.value, ast.Name) and n.attr in (
                "version_info", "platform", "maxsize", "byteorder")) for n in ast.walk(node)):
        return None
    facts = {"sys": type("sys", (), {a: getattr(sys, a) for a in (
        "version_info", "platform", "maxsize", "byteorder")})}
    try:
        # the condition's nodes are checked above: constants, comparisons and sys's facts
        return eval(compile(ast.Expression(node), "<skipif>", "eval"),
                    {"__builtins__": {}, **facts})
    except Exception:  # noqa: BLE001 - pytest would say why: left to it
        return None


def _skipped(stmt) -> bool:
    """A test function or class with an unconditional skip mark of the tests' (`@pytest.mark.skip`,
    `@pytest.mark.skip(reason=...)`, `@unittest.skip("...")`): its runner never runs it. A
    `skipif` is left to pytest, which evaluates its condition."""
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    if not stmt.name.startswith("test") and not (isinstance(stmt, ast.ClassDef)
                                                 and _is_test_class(stmt)):
        return False
    return any(ast.unparse(d.func if isinstance(d, ast.Call) else d) in _SKIPS
               for d in stmt.decorator_list)


def _skipped_classes(classes: dict) -> set:
    """The tests' classes skipped by an unconditional skip on themselves or on a class of the
    tests' they inherit from: unittest's skip is a class attribute (`__unittest_skip__`), pytest's
    mark too (`pytestmark`), so a subclass of a skipped base is skipped with it, in both runners."""
    def own_bases(n):
        return [b.id for b in classes[n].bases if isinstance(b, ast.Name) and b.id in classes]
    marked = {n for n, c in classes.items()
              if any(ast.unparse(d.func if isinstance(d, ast.Call) else d) in _SKIPS
                     for d in c.decorator_list)}
    out = set()
    for name in classes:
        try:
            if marked & set(_mro(name, own_bases)):
                out.add(name)
        except ValueError:  # a hierarchy Python refuses: left as it is
            pass
    return out


def _param_rows(fn: ast.FunctionDef, env: dict, read_again: frozenset = frozenset()) -> list[dict]:
    """The parametrize tables of a test function as keyword dicts (cartesian product over
    decorators). `read_again`: module-level names the tests read more than once; a table that is
    such a name and holds lists, dicts or sets goes to pytest, which passes its very objects to
    every test using them (a solution that mutates one changes what the others read)."""
    rows = [{}]
    for deco in fn.decorator_list:
        if not (isinstance(deco, ast.Call) and ast.unparse(deco.func) in ("pytest.mark.parametrize",
                                                                             "mark.parametrize")):
            raise Unconvertible(f"decorator {ast.unparse(deco)[:60]}")
        try:
            names = ast.literal_eval(deco.args[0])
            values = (ast.literal_eval(deco.args[1]) if not isinstance(deco.args[1], ast.Name)
                      else env[deco.args[1].id])
        except (ValueError, TypeError, SyntaxError, KeyError, IndexError):
            raise Unconvertible("parametrize table that is not a literal") from None
        if isinstance(deco.args[1], ast.Name) and deco.args[1].id in read_again and any(
                _is_mutable(v) for v in values):
            raise Unconvertible("a parametrize table other tests read too, holding mutable values")
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = [v if len(names) > 1 else (v,) for v in values]
        rows = [dict(r, **dict(zip(names, v, strict=True))) for r in rows for v in values]
    params = [a.arg for a in fn.args.args if a.arg not in _FIXTURES]  # _Unit.fixtures
    if any(set(params) != set(r) for r in rows):
        raise Unconvertible("test function with fixtures")
    return rows


def _defined_names(stmts) -> set:
    names = set()
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
    return names


def _is_test_class(stmt, classes=None) -> bool:
    """pytest collects `class Test*`; unittest any TestCase subclass (whatever it is called), a
    subclass of a TestCase class of the tests' own included. classes: the module's classes by
    name."""
    if not isinstance(stmt, ast.ClassDef):
        return False
    return stmt.name.startswith("Test") or _is_test_case(stmt, classes or {}, set())


# pytest's fixtures a test function may take (_Unit.fixtures, _monkeypatch_as_patches)
_FIXTURES = ("capsys", "capfd", "tmp_path", "monkeypatch")
_MP_PATCH = "__gmts_mock_patch"  # unittest.mock's patch, as a monkeypatch test names it


def _iterators_as_lists(fn: ast.FunctionDef) -> ast.FunctionDef:
    """A test whose `it = iter(E)` (a statement of its own) is read only as `next(it)` inside its
    lambdas and local functions (`input` replaced by `lambda _: next(it)`): the same test with
    `it = list(E)` and NEXT_ITEM(it), which the trainer's mocks run on the list as next runs on
    the iterator (its first item taken; StopIteration once none is left). Else `fn` itself."""
    made = {}
    for s in fn.body:
        if (isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call)
                and ast.unparse(s.value.func) == "iter" and len(s.value.args) == 1
                and not s.value.keywords):
            made[s.targets[0].id] = None if s.targets[0].id in made else s
    parents = {id(c): n for n in ast.walk(fn) for c in ast.iter_child_nodes(n)}

    def as_next(name) -> bool:  # `next(it)` inside a lambda or local function
        call, up = parents.get(id(name)), name
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "next"
                and call.args == [name] and not call.keywords):
            return False
        while up is not fn:
            up = parents[id(up)]
            if isinstance(up, (ast.Lambda, ast.FunctionDef)) and up is not fn:
                return True
        return False
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in made and not (
                made[n.id] is not None and n is made[n.id].targets[0] or as_next(n)):
            made[n.id] = None
    names = {k for k, v in made.items() if v is not None}
    if not names or any(isinstance(n, ast.Name) and n.id in ("iter", "next", "list")
                        and not isinstance(n.ctx, ast.Load) for n in ast.walk(fn)):
        return fn
    out = copy.copy(fn)
    out.body = [b if b is _TEST_ENDS else copy.deepcopy(b) for b in fn.body]
    for n in ast.walk(ast.Module(body=out.body, type_ignores=[])):
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) in names and isinstance(
                n.value, ast.Call) and ast.unparse(n.value.func) == "iter":
            n.value.func = ast.Name(id="list", ctx=ast.Load())
        elif (isinstance(n, ast.Call) and ast.unparse(n.func) == "next" and len(n.args) == 1
              and isinstance(n.args[0], ast.Name) and n.args[0].id in names):
            n.func = ast.Name(id=NEXT_ITEM, ctx=ast.Load())
    return out


def _monkeypatch_as_patches(fn: ast.FunctionDef) -> ast.FunctionDef:
    """A test function taking pytest's `monkeypatch`, each `monkeypatch.setattr(target, value)`
    (a dotted string, or a module and a name) among its top-level statements made the patch block
    it is: `with patch(target, side_effect=value):` (value a lambda or a function of the test's:
    the trainer runs it on each call, as rewards/mocks.py does) or `new=value` (data), around the
    rest of the test, undone at its end as monkeypatch undoes it at teardown; `setenv(k, v)`:
    `with patch.dict('os.environ', {k: v}):`. Any other use of monkeypatch: Unconvertible."""
    fn = copy.deepcopy(fn)
    local = {s.name for s in fn.body if isinstance(s, ast.FunctionDef)}

    def patched(body: list) -> list:
        for i, s in enumerate(body):
            call = s.value if isinstance(s, ast.Expr) else None
            if (isinstance(call, ast.Call) and ast.unparse(call.func) == "monkeypatch.setenv"
                    and len(call.args) == 2 and not call.keywords):
                # `monkeypatch.setenv(k, v)`: os.environ updated for the rest of the test
                patch = ast.Call(func=ast.Attribute(value=ast.Name(id=_MP_PATCH, ctx=ast.Load()),
                                                    attr="dict", ctx=ast.Load()),
                                 args=[ast.Constant(value="os.environ"),
                                       ast.Dict(keys=[call.args[0]], values=[call.args[1]])],
                                 keywords=[])
                block = ast.With(items=[ast.withitem(context_expr=patch)],
                                 body=patched(body[i + 1:]) or [ast.Pass()])
                return [*body[:i], ast.copy_location(block, s)]
            if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "monkeypatch.setattr"):
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            raising = keywords.pop("raising", ast.Constant(value=True))
            if keywords or not (isinstance(raising, ast.Constant) and raising.value is True):
                raise Unconvertible("monkeypatch.setattr with keywords")
            if len(call.args) == 2:
                target, value = call.args
                patch = ast.Call(func=ast.Name(id=_MP_PATCH, ctx=ast.Load()), args=[target],
                                 keywords=[])
            elif len(call.args) == 3:
                owner, name, value = call.args
                patch = ast.Call(func=ast.Attribute(value=ast.Name(id=_MP_PATCH, ctx=ast.Load()),
                                                    attr="object", ctx=ast.Load()),
                                 args=[owner, name], keywords=[])
            else:
                raise Unconvertible("monkeypatch.setattr of another form")
            runs = isinstance(value, ast.Lambda) or (isinstance(value, ast.Name)
                                                     and value.id in local)
            patch.keywords.append(ast.keyword(arg="side_effect" if runs else "new", value=value))
            block = ast.With(items=[ast.withitem(context_expr=patch)],
                             body=patched(body[i + 1:]) or [ast.Pass()])
            return [*body[:i], ast.copy_location(block, s)]
        return body
    fn.body = patched(fn.body)
    if any(isinstance(n, ast.Name) and n.id == "monkeypatch" for n in ast.walk(fn)):
        raise Unconvertible("monkeypatch other than setattr among the test's statements")
    return ast.fix_missing_locations(fn)


_PYTEST_HOOKS = {"setup_method": "setUp", "teardown_method": "tearDown",
                 "setup_class": "setUpClass", "teardown_class": "tearDownClass"}


def _as_testcase(stmt: ast.ClassDef, classes: dict) -> ast.ClassDef:
    """A pytest test class (`class TestX:`, no base, plain methods and class attributes) as the
    TestCase that unittest would run alike (_CaseClass), for the trainer's conversion only: its
    tests in the order written, `setup_method(self[, method])`/`teardown_method` as setUp/tearDown
    and `setup_class(cls)`/`teardown_class` as setUpClass/tearDownClass, a test's pytest fixtures
    (_FIXTURES) made for its unit, a test per row of its parametrize mark (_method_rows). What a
    TestCase would have and a pytest class has not (`self.assertEqual`, unittest's hook names), a
    base, an `__init__`, a test with other fixtures or marks: Unconvertible."""
    if stmt.bases or stmt.keywords or stmt.decorator_list or any(
            stmt.name in [_last_name(b) for b in c.bases] for c in classes.values()):
        raise Unconvertible("a pytest class with a base, a subclass or a decorator")
    body, tests, fixtures_of, own = [], [], {}, _members(stmt).keys()
    for member in stmt.body:
        if isinstance(member, ast.Expr) and isinstance(member.value, ast.Constant):
            continue  # its docstring
        if isinstance(member, (ast.Assign, ast.AnnAssign)):
            body.append(member)
            continue
        if not isinstance(member, ast.FunctionDef) or member.name in _HOOKS or member.name in (
                "__init__", "setup", "teardown"):
            raise Unconvertible(f"a pytest class holding {getattr(member, 'name', 'a statement')}")
        fn = copy.deepcopy(member)
        first = "cls" if member.name in ("setup_class", "teardown_class") else "self"
        params = [a.arg for a in fn.args.args]
        if member.name in ("setup_method", "teardown_method") and len(params) == 2 and (
                params[1] not in _names(fn)):
            fn.args.args = fn.args.args[:1]  # pytest's `method` argument, unread
        if member.name in _PYTEST_HOOKS:
            fn.name = _PYTEST_HOOKS[member.name]
            if first == "cls":
                fn.decorator_list = [d for d in fn.decorator_list
                                     if ast.unparse(d) != "classmethod"]
                fn.decorator_list.append(ast.Name(id="classmethod", ctx=ast.Load()))
        rows = [None]
        if member.name.startswith("test"):
            rows, names = _method_rows(fn)
            fixtures = tuple(p for p in params[1:] if p not in names)  # pytest's own (_FIXTURES)
            if fn.decorator_list or params[:1] != ["self"] or not set(fixtures) <= set(_FIXTURES):
                raise Unconvertible("a pytest class's test with marks or fixtures")
            fn.args.args = fn.args.args[:1]
            if "monkeypatch" in fixtures:
                fn = _monkeypatch_as_patches(fn)
        attrs = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                 and isinstance(n.value, ast.Name) and n.value.id == first}
        if attrs & _testcase_attributes() - own:
            raise Unconvertible("a TestCase's method in a pytest class")
        for i, row in enumerate(rows):  # a test per parametrize row, in order
            made = fn if row is None else copy.deepcopy(fn)
            if row is not None:
                made.name = f"{fn.name}__gmts_row{i}"
                made.body.insert(0, ast.Assign(targets=[row[0]], value=row[1], lineno=0))
            if member.name.startswith("test"):
                tests.append(made.name)
                fixtures_of[made.name] = fixtures
            body.append(made)
    case = ast.ClassDef(name=stmt.name, bases=[ast.Attribute(
        value=ast.Name(id="unittest", ctx=ast.Load()), attr="TestCase", ctx=ast.Load())],
        keywords=[], body=body or [ast.Pass()], decorator_list=[], type_params=[])
    case.gmts_pytest_order, case.gmts_fixtures = tests, fixtures_of
    return ast.fix_missing_locations(ast.copy_location(case, stmt))


def _method_rows(fn: ast.FunctionDef) -> tuple[list, tuple]:
    """A pytest class's test method under one `@pytest.mark.parametrize(names, [rows...])` (a
    literal list of rows; `ids=` only): each row as (target, value) to bind at the method's start
    (`a, b = (1, 2)`: the row's own expression, evaluated as pytest evaluates it once), the
    decorator removed from `fn`, and the names; else ([None], ()). Another mark: Unconvertible."""
    if not fn.decorator_list:
        return [None], ()
    mark = fn.decorator_list[0]
    if not (len(fn.decorator_list) == 1 and isinstance(mark, ast.Call)
            and ast.unparse(mark.func) in ("pytest.mark.parametrize", "mark.parametrize")
            and len(mark.args) == 2 and all(k.arg == "ids" for k in mark.keywords)
            and isinstance(mark.args[1], (ast.List, ast.Tuple))):
        raise Unconvertible("a pytest class's test with marks or fixtures")
    spec, values = mark.args
    if isinstance(spec, ast.Constant) and isinstance(spec.value, str):
        names = tuple(n.strip() for n in spec.value.split(",") if n.strip())
    elif isinstance(spec, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in spec.elts):
        names = tuple(e.value for e in spec.elts)
    else:
        raise Unconvertible("parametrize names that are not a literal")
    if not names or not all(n.isidentifier() for n in names) or any(
            isinstance(e, (ast.Call, ast.Starred)) for e in values.elts):
        raise Unconvertible("parametrize rows of another form (pytest.param)")
    fn.decorator_list = []
    target = (ast.Name(id=names[0], ctx=ast.Store()) if len(names) == 1 else ast.Tuple(
        elts=[ast.Name(id=n, ctx=ast.Store()) for n in names], ctx=ast.Store()))
    return [(copy.deepcopy(target), copy.deepcopy(e)) for e in values.elts], names


def _is_test_case(stmt: ast.ClassDef, classes: dict, seen: set) -> bool:
    seen.add(stmt.name)
    for base in stmt.bases:
        name = str(_last_name(base))
        if name.endswith("TestCase") or (
                isinstance(base, ast.Name) and name in classes and name not in seen
                and _is_test_case(classes[name], classes, seen)):
            return True
    return False


def _test_methods(stmt: ast.ClassDef, classes: dict) -> list:
    """The test methods a class has, its own and those it inherits from classes of the tests' own
    (a mixin `class AddTests:` under `class TestAdd(AddTests)`), in the order Python resolves them
    (an own method replaces an inherited one of the same name)."""
    try:
        order = _mro(stmt.name, lambda n: [_last_name(b) for b in classes[n].bases   # own classes
                                           if isinstance(b, ast.Name) and b.id in classes])
    except ValueError:  # a hierarchy Python itself would refuse: nothing to run
        return []
    methods = {}
    for name in order:
        for item in classes[name].body:
            if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and item.name.startswith("test")):
                methods.setdefault(item.name, item)
    return list(methods.values())


def _mro(name: str, bases_of, path: tuple = ()) -> list:
    """C3 linearisation (Python's resolution order) of `name`, bases_of(n) giving a class's bases
    in order; ValueError for a hierarchy Python would refuse (cyclic or inconsistent bases)."""
    if name in path:
        raise ValueError("cyclic bases")
    bases = bases_of(name)
    merge = [_mro(b, bases_of, path + (name,)) for b in bases] + [list(bases)]
    out = [name]
    while any(merge):
        for seq in merge:
            head = seq[0] if seq else None
            if head and not any(head in s[1:] for s in merge):
                break
        else:
            raise ValueError("inconsistent bases")
        out.append(head)
        merge = [[x for x in s if x != head] for s in merge]
    return out


def _class_tests(stmt: ast.ClassDef, env: dict, classes=None) -> tuple[list, int]:
    """The test methods of a test class (inherited ones too), and their test cases (parametrize
    rows counted where literal)."""
    names, cases = [], 0
    for item in _test_methods(stmt, {**(classes or {}), stmt.name: stmt}):
        names.append(f"{stmt.name}.{item.name}")
        cases += _count_cases(item) * len(_safe_rows(item, env, method=True))
    return names, cases


_TESTCASE = None  # a unittest.TestCase of the trainer's: its assert* methods judge unittest tests


def _testcase():
    global _TESTCASE
    if _TESTCASE is None:
        import unittest
        _TESTCASE = unittest.TestCase()
        _TESTCASE.maxDiff = 0  # a failure's message is not read: no diff of long values
    return _TESTCASE


# the assert methods judged here, on plain data, by unittest's own code (assertIs and assertIsNot:
# `is`, judged as an assert; assertRaises and assertRaisesRegex: the raises step)
UNITTEST_ASSERTS = frozenset("""assertEqual assertNotEqual assertTrue assertFalse assertIsNone
assertIsNotNone assertIn assertNotIn assertIsInstance assertNotIsInstance assertAlmostEqual
assertNotAlmostEqual assertGreater assertGreaterEqual assertLess assertLessEqual assertCountEqual
assertListEqual assertTupleEqual assertSetEqual assertDictEqual assertSequenceEqual
assertMultiLineEqual assertRegex assertNotRegex""".split())  # noqa: SIM905


_MAX_SHOWN = 16  # a list or tuple display a compare_step reads: at most this many items
# unittest's asserts a compare_step makes, each `assert first <op> second` in its verdict
_ASSERT_COMPARES = {"__unittest_assertEqual": "==", "__unittest_assertNotEqual": "!=",
                    "__unittest_assertIn": "in", "__unittest_assertNotIn": "not in"}
# comparisons a compare_step makes (in the child where an operand cannot cross, else here)
_COMPARISONS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
                ast.GtE: ">=", ast.In: "in", ast.NotIn: "not in"}
UNITTEST_RAISES = "__unittest_raises"  # `with self.assertRaises(E) as cm`, converted
_TC = "<unittest.TestCase>"  # unittest's TestCase in a class's resolution order
_HOOKS = ("setUp", "tearDown", "setUpClass", "tearDownClass")
_MAX_INLINE = 8  # helper methods calling helper methods: at most this deep
# parts of an expression evaluated maybe never, or many times
_NOT_ONCE = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.comprehension)
_MODULE_HOOKS = frozenset(("setUpModule", "tearDownModule", "setup_module", "teardown_module"))


def _calls(node, args_only=False, skip=None) -> bool:
    """Does node hold a call other than a builtin's or a unittest assert (of its arguments only,
    or outside `skip`)?"""
    if isinstance(node, list):
        return any(_calls(n, skip=skip) for n in node)
    if args_only:
        return _calls([*node.args, *(k.value for k in node.keywords)])
    stack = [node]
    while stack:
        n = stack.pop()
        if n is skip:
            continue
        if isinstance(n, ast.Call):
            name = ast.unparse(n.func)
            if not (name in BUILTIN_NAMES or name.startswith(("self.assert", "__unittest_"))):
                return True
        stack.extend(ast.iter_child_nodes(n))
    return False


def _component(name: str, classes: dict) -> list:
    """The tests' own classes linked to `name` by inheritance, either way, in file order."""
    bases = {n: {b.id for b in c.bases if isinstance(b, ast.Name) and b.id in classes}
             for n, c in classes.items()}
    seen, stack = {name}, [name]
    while stack:
        n = stack.pop()
        for m in bases[n] | {k for k, v in bases.items() if n in v}:
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return [n for n in classes if n in seen]


class _CaseClass:
    """A unittest.TestCase class of the tests' own hierarchy (its bases: classes of the tests' and
    unittest.TestCase, mixins included) as unittest runs it: methods and class attributes found by
    Python's resolution order, test methods inherited from a base run for this class too (by name,
    unittest's order), setUpClass once for the class (`cls.x` is this class's attribute), setUp
    and tearDown around each test, helper methods and `super()` calls inlined with their own
    local names. `self.x` is the name `__self_x`; a class attribute is the name `__cls_C_x` (C:
    the class that holds it), one object for every test that reads it, as in unittest: each test
    starts by binding `__self_x = __cls_C_x` for the class attributes it reads. Anything it cannot
    say so raises Unconvertible (the class runs under pytest in the sandbox)."""

    def __init__(self, name: str, classes: dict, counter: list):
        self.name, self.classes, self.counter = name, classes, counter
        self.mro = _c3(name, classes)
        self.members = {c: _members(classes[c]) for c in self.mro if c != _TC}
        self.mode = "self"  # or "cls" (setUpClass, tearDownClass)
        self.set_up_class = set()  # attributes setUpClass gives this class
        self.patched = {}  # test name -> the method with its @patch decorators as a with-block

    def lookup(self, attr: str, after: str | None = None):
        """(member, owner) by the resolution order (after `owner` for super()), else (None,
        None)."""
        order = [c for c in self.mro if c != _TC]
        if after is not None:
            order = self.mro[self.mro.index(after) + 1:]
            order = order[:order.index(_TC)] if _TC in order else order
        for c in order:
            if attr in self.members[c]:
                return self.members[c][attr], c
        return None, None

    def tests(self) -> list:
        """(name, method) of each test unittest runs for this class, by name."""
        names = {n for c in self.members.values() for n in c if n.startswith("test")}
        # unittest runs a class's tests by name, pytest (a class of its: _as_testcase) as written
        written = getattr(self.classes[self.name], "gmts_pytest_order", None)
        out = []
        for n in written or sorted(names):
            member, _ = self.lookup(n)
            if isinstance(member, ast.FunctionDef) and not _skipped(member):
                if member.decorator_list or self.classes[self.name].decorator_list:
                    self.patched[n] = self.with_patches(member)
                elif [a.arg for a in member.args.args] != ["self"]:
                    raise Unconvertible("a test method with parameters")
                out.append((n, member))
        return out

    def with_patches(self, member):
        """A test method under @patch decorators (its own, then its class's: the class's are
        outermost) as `with patch(...) as <param>, ...:` around its body, entered as unittest
        enters them: the bottom decorator first, giving the first mock parameter; a patch with a
        replacement (`new`) or a patch.dict passes none."""
        if any(self.classes[c].decorator_list for c in self.mro if c not in (_TC, self.name)):
            raise Unconvertible("unittest.mock: @patch on a base class")
        order = [*reversed(member.decorator_list),
                 *reversed(self.classes[self.name].decorator_list)]
        if [x.arg for x in member.args.args[:1]] != ["self"]:
            raise Unconvertible("a decorated test method, or one with parameters")
        return _with_patches(member, order, 1)

    def class_attribute(self, attr: str) -> str | None:
        """The name holding class attribute `attr` as this class sees it, or None."""
        if attr in self.set_up_class:
            return f"__cls_{self.name}_{attr}"
        member, owner = self.lookup(attr)
        if member is None:
            return None
        if isinstance(member, ast.FunctionDef):
            raise Unconvertible(f"the method {attr} used as a value")
        return f"__cls_{owner}_{attr}"

    def call(self, method: str, args, keywords, after, target, depth) -> list:
        """`self.method(*args)` (or `super().method(...)`, `after` its owner) inlined: its
        parameters bound to fresh names, its body with those names, `return v` as `target = v`."""
        member, owner = self.lookup(method, after)
        if after is None and method in self.patched:
            member = self.patched[method]
        if member is None:
            if method in _HOOKS and not args and not keywords:
                return []  # unittest.TestCase's own: it does nothing
            raise Unconvertible(f"self.{method} is not a method of the tests'")
        if not isinstance(member, ast.FunctionDef) or depth >= _MAX_INLINE:
            raise Unconvertible(f"self.{method}(...) cannot be inlined")
        want = ["classmethod"] if self.mode == "cls" else []
        if [ast.unparse(d) for d in member.decorator_list] != want:
            raise Unconvertible(f"a decorated method {method}")
        a = member.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or not a.args or (
                a.args[0].arg != self.mode):
            raise Unconvertible(f"the signature of {method}")
        effects = _side_effect_functions(member)  # lambdas and local defs a mock runs
        # (a lambda elsewhere, `sorted(r, key=lambda p: p[0])`: an expression, as in a test
        # function; its parameters are its own inside it, Rename below)
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                              ast.Nonlocal, ast.Yield, ast.YieldFrom))
               and id(n) not in effects for b in member.body for n in ast.walk(b)):
            raise Unconvertible(f"{method} defines, yields or catches")
        # `global N`: N is the module's, not renamed; its binding every later test's (the unit)
        declared = {x for b in member.body for n in ast.walk(b) if isinstance(n, ast.Global)
                    and id(n) not in effects for x in n.names}
        returns = [n for b in member.body for n in ast.walk(b) if isinstance(n, ast.Return)
                   and id(n) not in effects]
        test = depth == 0 and method not in _HOOKS  # its `return` ends the test (_TEST_ENDS)
        if test:
            returns = []
        elif returns and (len(returns) > 1 or member.body[-1] is not returns[0]):
            raise Unconvertible(f"{method} returns other than at its end")
        self.counter[0] += 1
        prefix = f"__h{self.counter[0]}_"
        params = [x.arg for x in a.args[1:]]
        if declared & {*params, self.mode}:
            raise Unconvertible(f"a parameter of {method} declared global")
        local = (set(params) | _stored(member)) - {self.mode} - declared
        given = dict(zip(params, args, strict=False))
        if len(args) > len(params):
            raise Unconvertible(f"too many arguments to {method}")
        for k in keywords:
            if k.arg is None or k.arg not in params or k.arg in given:
                raise Unconvertible(f"keyword {k.arg} of {method}")
            given[k.arg] = k.value
        defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults, strict=True))
        assigns = []
        for p in params:
            value = given.get(p, defaults.get(p))
            if value is None or (p not in given and not _is_literal(value)):
                raise Unconvertible(f"parameter {p} of {method}")
            assigns.append(ast.Assign(targets=[ast.Name(id=prefix + p, ctx=ast.Store())],
                                      value=copy.deepcopy(value), lineno=0))

        class Rename(ast.NodeTransformer):
            hidden = frozenset()  # inside a lambda or local def: its parameters, not renamed

            def visit_Name(self, node):
                if node.id in local and node.id not in self.hidden:
                    node.id = prefix + node.id
                return node

            def visit_ExceptHandler(self, node):  # `except E as e`: e is a local name too
                if node.name in local and node.name not in self.hidden:
                    node.name = prefix + node.name
                return self.generic_visit(node)

            def visit_Lambda(self, node):  # `lambda x: x + 1` beside a local x: the parameter
                a = node.args  # defaults are read where the lambda is made
                a.defaults = [self.visit(d) for d in a.defaults]
                a.kw_defaults = [d and self.visit(d) for d in a.kw_defaults]
                if isinstance(node, ast.FunctionDef):
                    node.decorator_list = [self.visit(d) for d in node.decorator_list]
                outer = self.hidden
                self.hidden = outer | {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs,
                                                       a.vararg, a.kwarg) if x}
                if isinstance(node, ast.Lambda):
                    node.body = self.visit(node.body)
                else:
                    node.body = [self.visit(b) for b in node.body]
                self.hidden = outer
                return node
            visit_FunctionDef = visit_Lambda
        body = [Rename().visit(copy.deepcopy(b)) for b in member.body]
        if returns:
            value = body[-1].value or ast.Constant(value=None)
            body[-1] = ast.Assign(targets=[target or ast.Name(id=prefix + "return",
                                                              ctx=ast.Store())],
                                  value=value, lineno=0)
        elif target is not None:
            body.append(ast.Assign(targets=[target], value=ast.Constant(value=None), lineno=0))
        out = []
        for b in assigns + body:  # the arguments are the caller's expressions: the same self
            out += self.statement(b, owner, depth + 1)
        return out

    def method_call(self, node):
        """`self.m(...)` / `super().m(...)`: (m, owner to search after) when m is the tests' own
        method (or a hook), else None."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return None
        base, attr = node.func.value, node.func.attr
        if isinstance(base, ast.Name) and base.id == self.mode:
            member, _ = self.lookup(attr)
            return (attr, None) if member is not None else None
        if (isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
                and base.func.id == "super" and not base.keywords):
            if not base.args:
                return attr, "super"
            # `super(Base, self)`: after Base in this class's resolution order
            if (len(base.args) == 2 and isinstance(base.args[0], ast.Name)
                    and base.args[0].id in self.mro and isinstance(base.args[1], ast.Name)
                    and base.args[1].id == self.mode):
                return attr, base.args[0].id
        return None

    def statement(self, stmt, owner: str, depth: int) -> list:
        """One statement of a method of `owner`, rewritten as the class docstring says."""
        if isinstance(stmt, ast.With) and len(stmt.items) == 1:
            call = stmt.items[0].context_expr
            method = ast.unparse(call.func) if isinstance(call, ast.Call) else ""
            if method == "self.subTest" and self.lookup("subTest")[0] is None:
                return [s for b in stmt.body for s in self.statement(b, owner, depth)]
            if method in ("self.assertRaises", "self.assertRaisesRegex") and (
                    self.lookup(method[5:])[0] is None):
                # `as cm`: the context's `cm.exception` (raises_block)
                stmt.items[0].context_expr = _pytest_raises(call, method.endswith("Regex"))
        value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
        found = self.method_call(value) if value is not None else None
        if found is not None and (isinstance(stmt, ast.Expr) or len(stmt.targets) == 1):
            name, after = found
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
            return self.call(name, value.args, value.keywords,
                             owner if after == "super" else after, target, depth)
        hoisted = self.hoist(stmt, owner, depth)
        if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and isinstance(stmt.value.func.value, ast.Name)
                and stmt.value.func.value.id == "self"):
            call, name = stmt.value, stmt.value.func.attr
            if name in ("assertRaises", "assertRaisesRegex") and len(call.args) > 1 + (
                    name == "assertRaisesRegex"):
                regex = name == "assertRaisesRegex"  # the callable form: assertRaises(E, f, *a)
                head, fn, rest = call.args[:1 + regex], call.args[1 + regex], call.args[2 + regex:]
                body = ast.Expr(value=ast.Call(func=fn, args=rest, keywords=call.keywords))
                raises = _pytest_raises(ast.Call(func=call.func, args=head, keywords=[]), regex)
                stmt = ast.With(items=[ast.withitem(context_expr=raises)], body=[body], lineno=0)
            elif name == "fail" and len(call.args) <= 1 and not call.keywords:
                stmt = ast.Assert(test=ast.Constant(value=False))  # fails where it is reached
            elif name in ("assertIs", "assertIsNot") and len(call.args) == 2 and not (
                    call.keywords):
                op = ast.Is() if name == "assertIs" else ast.IsNot()
                stmt = ast.Assert(test=ast.Compare(left=call.args[0], ops=[op],
                                                   comparators=[call.args[1]]))
            elif name in ("assertIsInstance", "assertNotIsInstance") and len(
                    call.args) == 2 and not call.keywords:
                # as `isinstance` (its verdict): asked in the child of an object of the solution's
                # (a class of the solution's, `plt.Axes`), here of data
                test = ast.Call(func=ast.Name(id="isinstance", ctx=ast.Load()), args=call.args,
                                keywords=[])
                stmt = ast.Assert(test=test if name == "assertIsInstance" else ast.UnaryOp(
                    op=ast.Not(), operand=test))
            elif name in UNITTEST_ASSERTS:
                call.func = ast.Name(id=f"__unittest_{name}", ctx=ast.Load())
        if isinstance(stmt, (ast.For, ast.If, ast.With, ast.Try)):
            for part in ("body", "orelse", "finalbody"):
                if hasattr(stmt, part):
                    setattr(stmt, part, [s for b in getattr(stmt, part)
                                         for s in self.statement(b, owner, depth)])
            for handler in getattr(stmt, "handlers", ()):
                handler.body = [s for b in handler.body for s in self.statement(b, owner, depth)]
        return [*hoisted, self.attributes(stmt)]

    def hoist(self, stmt, owner: str, depth: int) -> list:
        """A helper method called inside an expression (`self.assertEqual(f(x),
        self.expected(x))`): inlined just before the statement, its result a name. Its arguments
        are read then, as the trainer reads the other side of a comparison before the solution's
        call anyway (before_the_call); a call under `and`/`or`/`if`, a lambda or a comprehension
        (evaluated maybe never, or many times) cannot be moved."""
        out = []
        fields = [f for f in ("test", "value", "iter", "items", "targets", "target")
                  if getattr(stmt, f, None) is not None]
        for f in fields:
            part = getattr(stmt, f)
            for node in ast.walk(ast.Tuple(elts=part, ctx=ast.Load()) if isinstance(part, list)
                                 else part):
                for child in ast.iter_child_nodes(node):
                    found = self.method_call(child)
                    if found is None:
                        continue
                    if any(isinstance(n, _NOT_ONCE) for n in ast.walk(
                            ast.Tuple(elts=part, ctx=ast.Load()) if isinstance(part, list)
                            else part)):
                        raise Unconvertible("a helper method called conditionally or in a loop")
                    if _calls(child, args_only=True) and _calls(part, skip=child):
                        # `assertEqual(f(a), self.norm(f(b)))`: moving f(b) first would change
                        # the order of the solution's calls
                        raise Unconvertible("a helper method's call moved before another call")
                    self.counter[0] += 1
                    name = f"__v{self.counter[0]}"
                    out += self.call(found[0], child.args, child.keywords,
                                     owner if found[1] == "super" else found[1],
                                     ast.Name(id=name, ctx=ast.Store()), depth)
                    for name_, value in ast.iter_fields(node):
                        if value is child:
                            setattr(node, name_, ast.Name(id=name, ctx=ast.Load()))
                        elif isinstance(value, list) and any(v is child for v in value):
                            setattr(node, name_, [ast.Name(id=name, ctx=ast.Load())
                                                  if v is child else v for v in value])
        return out

    def attributes(self, stmt):
        """`self.x` -> `__self_x`, `cls.x` -> `__cls_C_x` (C this class). An attribute unittest's
        TestCase has (`self.id()`, `self.assertLogs`) is read from nowhere here: Unconvertible,
        but setting one (`self.maxDiff = None`) only changes a failure's message."""
        case, mode = self, self.mode

        class Rewrite(ast.NodeTransformer):
            def visit_Call(self, node):  # `self.addCleanup(self.p.stop)`: the plan's marker
                f = node.func
                if (mode == "self" and isinstance(f, ast.Attribute) and f.attr == "addCleanup"
                        and isinstance(f.value, ast.Name) and f.value.id == "self"):
                    node.func = ast.copy_location(ast.Name(id=CLEANUP, ctx=ast.Load()), f)
                return self.generic_visit(node)

            def visit_Attribute(self, node):
                if not (isinstance(node.value, ast.Name) and node.value.id == mode):
                    return self.generic_visit(node)
                member = case.lookup(node.attr)[0]
                if isinstance(member, ast.FunctionDef) or node.attr.startswith("__") or (
                        member is None and node.attr in _testcase_attributes()
                        and not isinstance(node.ctx, ast.Store)):
                    raise Unconvertible(f"{mode}.{node.attr}")
                name = (f"__self_{node.attr}" if mode == "self"
                        else f"__cls_{case.name}_{node.attr}")
                return ast.copy_location(ast.Name(id=name, ctx=node.ctx), node)
        return ast.fix_missing_locations(Rewrite().visit(stmt))

    def bodies(self) -> tuple[list, list, list]:
        """(setUpClass's statements, [(test, statements, test cases)] by name, tearDownClass's)."""
        tests = self.tests()
        if not tests:
            return [], [], []
        self.mode = "cls"
        up = self.call("setUpClass", [], [], None, None, 0)
        prefix = f"__cls_{self.name}_"
        up = self.aliases(up)
        self.set_up_class = {n.id[len(prefix):] for b in up for n in ast.walk(b)
                             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                             and n.id.startswith(prefix)}
        down = self.aliases(self.call("tearDownClass", [], [], None, None, 0))
        self.mode = "self"
        out = []
        for name, fn in tests:
            body = [*self.call("setUp", [], [], None, None, 0),
                    *self.call(name, [], [], None, None, 0), _TEST_ENDS,
                    *self.call("tearDown", [], [], None, None, 0)]
            out.append((name, self.aliases(body), _count_cases(fn)))
        for b in [*up, *down, *(s for _, body, _ in out for s in body)]:
            if {"self", "cls"} & _names(b):
                raise Unconvertible("`self` used other than for its attributes and asserts")
        return up, out, down

    def aliases(self, body: list) -> list:
        """Each class attribute the statements read through `self` (`cls`) bound first to the
        object attribute lookup finds (the class's, one for all its tests); a name the statements
        bind shadows it from then on, as an instance attribute does."""
        prefix = "__self_" if self.mode == "self" else f"__cls_{self.name}_"
        read = sorted({n.id for b in body for n in ast.walk(b)
                       if isinstance(n, ast.Name) and n.id.startswith(prefix)})
        out = []
        for name in read:
            held = self.class_attribute(name[len(prefix):])
            if held is not None and held != name:
                out.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                      value=ast.Name(id=held, ctx=ast.Load()), lineno=0))
        return out + body


_TESTCASE_ATTRS = None


def _testcase_attributes() -> frozenset:
    global _TESTCASE_ATTRS
    if _TESTCASE_ATTRS is None:
        import unittest
        _TESTCASE_ATTRS = frozenset(dir(unittest.TestCase())) | {"subTest"}
    return _TESTCASE_ATTRS


def _c3(name: str, classes: dict) -> list:
    """Python's resolution order of a class of the tests' whose bases are classes of the tests',
    unittest.TestCase or object (anything else raises Unconvertible); TestCase appears as _TC."""
    def bases(n):
        if n == _TC:
            return []
        out = []
        for b in classes[n].bases:
            if isinstance(b, ast.Name) and b.id in classes:
                out.append(b.id)
            elif ast.unparse(b) in ("unittest.TestCase", "TestCase"):
                out.append(_TC)
            elif ast.unparse(b) != "object":
                raise Unconvertible(f"a base {ast.unparse(b)}")
        return out

    try:
        return _mro(name, bases)
    except ValueError as err:       # cyclic or inconsistent: bases Python would refuse
        raise Unconvertible(str(err)) from None


def _members(stmt: ast.ClassDef) -> dict:
    """A class body of the tests' as name -> FunctionDef (a method) or expression (a class
    attribute; the later binding wins, as Python's); anything else raises Unconvertible."""
    if stmt.keywords or not all(_is_patch(d) for d in stmt.decorator_list):
        raise Unconvertible("a class with a decorator or keywords")
    out = {}
    for item in _without_docstring(stmt.body):
        if isinstance(item, ast.FunctionDef):
            out[item.name] = item
        elif isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None and all(
                isinstance(t, ast.Name) for t in _targets(item)):
            for t in _targets(item):
                out[t.id] = item.value
        elif not isinstance(item, ast.Pass):
            raise Unconvertible("a member of the test class other than methods and attributes")
    return out


# unittest.mock's names: a test that patches the solution's world and asserts on the calls
_MOCK_NAMES = frozenset("""patch Mock MagicMock NonCallableMock AsyncMock PropertyMock mock_open
create_autospec""".split())  # noqa: SIM905


def _mock_reason(error):
    """Why a TestCase with mocks is not judged here, as one line starting `unittest.mock`."""
    text = str(error)
    return error if text.startswith("unittest.mock") else Unconvertible(f"unittest.mock ({text})")


_PATCHES = frozenset(f"{m}{p}" for m in ("", "mock.", "unittest.mock.")
                     for p in ("patch", "patch.object", "patch.dict"))


def _is_patch(decorator) -> bool:
    """`@patch(...)`, `@patch.object(...)`, `@patch.dict(...)` (what the name is, the plan's
    env decides: _Unit.mock_api)."""
    return isinstance(decorator, ast.Call) and ast.unparse(decorator.func) in _PATCHES


def _with_patches(fn, order: list, skip: int):
    """`fn` (its first `skip` parameters kept: `self`) with the patch decorators `order` (in the
    order they are entered: the bottom one first) as `with patch(...) as <param>, ...:` around its
    body; a patch with a replacement (`new`) or a patch.dict passes no mock. Every other parameter
    must receive a mock."""
    a = fn.args
    params = [x.arg for x in a.args]
    if (a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults
            or not all(_is_patch(d) for d in order)):
        raise Unconvertible("a decorated test, or one with parameters")
    names, items = iter(params[skip:]), []
    for d in order:
        var = None
        if not _patch_replaces(d):
            name = next(names, None)
            if name is None:
                raise Unconvertible("unittest.mock: more patches than mock parameters")
            var = ast.Name(id=name, ctx=ast.Store())
        items.append(ast.withitem(context_expr=copy.deepcopy(d), optional_vars=var))
    if next(names, None) is not None:
        raise Unconvertible("unittest.mock: more mock parameters than patches")
    return ast.FunctionDef(name=fn.name, args=ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=p) for p in params[:skip]], kwonlyargs=[],
        kw_defaults=[], defaults=[]), body=[ast.With(items=items, body=fn.body,
                                                     lineno=fn.lineno)],
        decorator_list=[], lineno=fn.lineno)


def _patch_replaces(decorator) -> bool:
    """A patch decorator that passes no mock to the test: patch.dict, or one given `new`."""
    name = ast.unparse(decorator.func)
    given = len(decorator.args) + any(k.arg == "new" for k in decorator.keywords)
    return name.endswith("dict") or given > (2 if name.endswith("object") else 1)


def _uses_mock(stmt) -> bool:
    """Does this class of the tests' name unittest.mock's patch, mocks or their helpers?"""
    return any(isinstance(n, ast.Name) and (n.id in _MOCK_NAMES or n.id == _MP_PATCH)
               or isinstance(n, ast.Attribute) and n.attr in _MOCK_NAMES
               and ast.unparse(n.value) in ("mock", "unittest.mock")
               for n in ast.walk(stmt))


def _reason(stmt, error) -> str:
    """One line: where a part of the tests is, and why the trainer does not judge it."""
    name = getattr(stmt, "name", type(stmt).__name__)
    why = str(error)[:200] or type(error).__name__
    return f"line {getattr(stmt, 'lineno', '?')} ({name}): {why}"


def _targets(stmt) -> list:
    return stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]


def _class_values(names: list, classes: dict, make_unit) -> dict:
    """The class attributes written in the class bodies (`data = [1, 2]`), computed here once:
    `__cls_C_x` -> value (a bare name of an earlier attribute of the same class reads it)."""
    values = {}
    for c in names:
        earlier = set()
        for attr, expr in _members(classes[c]).items():
            if isinstance(expr, ast.FunctionDef):
                continue
            expr = copy.deepcopy(expr)
            for n in ast.walk(expr):
                if isinstance(n, ast.Name) and n.id in earlier:
                    n.id = f"__cls_{c}_{n.id}"
            u = make_unit(values)
            value = u.parent_eval(expr)
            if callable(value) and not isinstance(value, type):
                # a function as a class attribute is a method of the instance: not a value
                raise Unconvertible(f"a callable class attribute {attr}")
            values[f"__cls_{c}_{attr}"] = value
            earlier.add(attr)
    return values


def _pytest_raises(call, regex: bool):
    """`self.assertRaises(E)` / `self.assertRaisesRegex(E, r)` as UNITTEST_RAISES, which
    raises_block reads as `pytest.raises(E[, match=r])` (unittest searches the message with
    re.search, as pytest's match does, but not the notes); with `as cm`, its `cm.exception`."""
    if call.keywords or len(call.args) != 1 + regex:
        raise Unconvertible("assertRaises with keywords")
    keywords = [ast.keyword(arg="match", value=call.args[1])] if regex else []
    func = ast.Name(id=UNITTEST_RAISES, ctx=ast.Load())
    return ast.Call(func=func, args=call.args[:1], keywords=keywords)


def _without_docstring(body) -> list:
    return [b for b in body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]


def _check_call(stmt) -> str | None:
    """`check(add)` / `check(candidate=add)` as a statement: the candidate's name, else None."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "check"):
        return None
    call = stmt.value
    args = list(call.args) + [k.value for k in call.keywords if k.arg in ("candidate", None)]
    if (len(args) != 1 or len(call.args) + len(call.keywords) != 1
            or not isinstance(args[0], ast.Name)):
        return None
    return args[0].id


def _runs_tests(stmt, test_functions) -> bool:
    """`test_add()` (a test function of the tests', called without arguments) or
    `unittest.main(...)` at module level: the tests run where they are defined; this call adds
    nothing to judge."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    func = stmt.value.func
    if (isinstance(func, ast.Name) and func.id in test_functions and not stmt.value.args
            and not stmt.value.keywords):
        return True
    return ast.unparse(func) == "unittest.main"


def _is_main_guard(stmt) -> bool:
    """`if __name__ == "__main__": unittest.main()`: not a test (the harness runs under another
    name)."""
    return isinstance(stmt, ast.If) and "__name__" in _names(stmt.test)


def _setup_values(setup: str) -> dict:
    """The names a problem's setup (MBPP's test_setup_code, test_imports) binds to data or to a
    module the trainer evaluates: part of the tests, so computed here by running the setup (trusted,
    like the tests), never read back from the sandbox, where the solution could rebind them."""
    if not setup.strip():
        return {}
    ns = {}
    try:
        exec(compile(setup, "setup.py", "exec"), ns)  # noqa: S102 - the tests' own setup
    except Exception:  # noqa: BLE001 - a setup that cannot run here stays wholly the sandbox's
        return {}
    values = {}
    for name, value in ns.items():
        if name.startswith("__"):
            continue
        if any(value is m for m in MODULES.values()):
            values[name] = value
            continue
        try:
            render(value)
        except (Unconvertible, RecursionError):
            continue
        values[name] = value
    return values


def _library_assert(fn) -> bool:
    """One of numpy.testing's or pandas.testing's comparisons (LIBRARY_ASSERTS), that very
    function."""
    name = getattr(fn, "__name__", None)
    return type(name) is str and any(
        name in names and getattr(sys.modules.get(module), name, None) is fn
        for module, names in LIBRARY_ASSERTS.items())


def _child_module(stmt) -> bool:
    """An import of a library whose objects never cross as data (CHILD_MODULES: matplotlib's
    Axes): the tests' names for it are bound in the child, where the answer's objects are."""
    if isinstance(stmt, ast.ImportFrom):
        whole = not stmt.level and all(a.name != "*" for a in stmt.names)
        names = [stmt.module or ""] if whole else []
    else:
        names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else []
    return bool(names) and all(n.split(".")[0] in CHILD_MODULES for n in names)


def _child_module_names(stmt) -> list:
    """The names a _child_module import binds, each with whether it is a module (`plt`: its
    attributes are the child's) rather than a class (`from matplotlib.axes import Axes`)."""
    named = isinstance(stmt, ast.ImportFrom)
    return [(a.asname or (a.name if named else a.name.split(".")[0]),
             not (named and a.name[:1].isupper())) for a in stmt.names]


def _lazy_import(imports: dict, name: str) -> None:
    """`import numpy` in the tests: numpy joins the plan's modules (imported here on first use);
    `numpy.testing` with it."""
    if name in LAZY_IMPORTABLE and name not in imports:
        import importlib
        try:
            for module in LAZY_IMPORTABLE[:LAZY_IMPORTABLE.index(name) + 1]:
                if module not in imports:
                    imports[module] = importlib.import_module(module)
                    if module == "numpy":
                        imports[module] = _plan_numpy(imports[module])
        except ImportError:
            pass


def _plan_numpy(numpy) -> types.ModuleType:
    """numpy as the tests' checks see it here: numpy's own names, but its global random functions
    (`np.random.seed`, `rand`, `randint`...) are those of a RandomState of the plan's own, seeded 0,
    as `random` is (the judge helper draws the same; numpy's global state, the trainer's, is
    never read or advanced)."""
    state = numpy.random.RandomState(0)
    shared = numpy.random.mtrand._rand
    random = types.ModuleType("numpy.random")
    for name in dir(numpy.random):
        value = getattr(numpy.random, name)
        if getattr(value, "__self__", None) is shared:  # `np.random.rand`: _rand's method
            value = getattr(state, name)
        elif name in ("seed", "ranf", "sample"):  # module functions on _rand: the plan's
            value = getattr(state, "random_sample" if name != "seed" else name)
        elif name in ("get_bit_generator", "set_bit_generator"):
            continue
        setattr(random, name, value)
    module = types.ModuleType("numpy")
    module.__dict__.update(vars(numpy))
    module.random = random
    return module


def _locals(fn) -> set:
    """The names a function binds itself: its parameters, assignments, loop, comprehension and
    exception names, nested definitions."""
    a = fn.args
    out = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not fn
              or isinstance(n, ast.ExceptHandler) and n.name):
            out.add(n.name)
    return out | _bound_inside(fn)


def _changes_free(node, free: set) -> bool:
    """Does this node of a helper change a value outside it (`seen.add(x)`, `counts[k] += 1`,
    `heapq.heappush(h, x)`, `del cache[k]`, `obj.n = 1` on a name it does not bind)? Run at every
    verdict on the plan the judge keeps, the change would carry into the next answer's."""
    def base(n):
        return attribute_chain(n.value if isinstance(n, ast.Subscript) else n)[0]
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _MUTATORS | _IN_PLACE and isinstance(
                base(func.value), ast.Name) and base(func.value).id in free:
            return True
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _IN_PLACE and any(isinstance(a, ast.Name) and a.id in free
                                         for a in node.args)
    targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else
               [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
    return any(isinstance(t, (ast.Subscript, ast.Attribute)) and isinstance(base(t), ast.Name)
               and base(t).id in free for t in targets)


def _runs_on_data(fn, allowed: set, env: dict) -> bool:
    """A helper of the tests' (HumanEval+'s `assertion`, `is_floats`, `_poly`) that the trainer
    can run on the plain data the sandbox returns: every free name is the tests' own (their modules,
    constants, other such helpers), a safe builtin or an exception class; no import, global,
    yield or await, no private attribute, no `random` of numpy (unseeded), no call of a parameter
    (a solution function passed in would not cross as data), `is` only against None, True,
    False or `...` (rebuilt values keep no other identity); nothing outside it changed
    (_changes_free), no draw, no iterator of the tests' consumed (it runs at every verdict)."""
    if fn.decorator_list or isinstance(fn, ast.AsyncFunctionDef):
        return False
    a = fn.args
    params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x}
    free = _names(fn) - _locals(fn)
    if not free <= allowed:
        return False
    if any(_is_generator_of_draws(v) or _is_generator_of_draws(getattr(v, "__self__", None))
           or _is_generator_of_draws(getattr(getattr(v, "random", None), "__self__", None))
           or isinstance(v, collections.abc.Iterator) for v in map(env.get, free)):
        return False  # it would draw or consume at every verdict (the judge keeps the plan)
    for n in ast.walk(fn):
        if _changes_free(n, free):
            return False
        if isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Yield,
                          ast.YieldFrom, ast.Await, ast.AsyncFunctionDef)):
            return False
        if isinstance(n, ast.Attribute) and (n.attr.startswith("_") or (
                n.attr == "random" and isinstance(n.value, ast.Name)
                and getattr(env.get(n.value.id), "__name__", "") == "numpy")):
            return False
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in params:
            return False
        if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id not in env and n.attr not in PLAIN_ATTRS | {"dtype"}):
            return False  # `node.next`, `tree.left`: a helper for the solution's objects
        if isinstance(n, ast.Compare):
            operands = [n.left, *n.comparators]
            for i, op in enumerate(n.ops):
                if isinstance(op, (ast.Is, ast.IsNot)) and not any(
                        _singleton(x) for x in operands[i:i + 2]):
                    return False
    return True


def _plain_enum(stmt, env: dict) -> bool:
    """`class Color(Enum): RED = 1` in the tests: an enum of literal members, built here."""
    import enum
    bases = [env.get(b.id) for b in stmt.bases if isinstance(b, ast.Name)]
    return (isinstance(stmt, ast.ClassDef) and len(bases) == len(stmt.bases) == 1
            and not stmt.keywords and not stmt.decorator_list
            and any(bases[0] is getattr(enum, n, None) for n in _ENUM_BASES)
            and all(isinstance(b, ast.Pass) or (isinstance(b, ast.Expr)
                                                and isinstance(b.value, ast.Constant))
                    or (isinstance(b, ast.Assign) and len(b.targets) == 1
                        and isinstance(b.targets[0], ast.Name)
                        and not b.targets[0].id.startswith("_")
                        and _is_literal(b.value))
                    for b in stmt.body))


def _is_literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _trainer_definitions(body: list, env: dict) -> dict:
    """The tests' own module-level helpers that run on plain data (_runs_on_data) and their enums
    of literal members (_plain_enum), defined here, as the tests define them: a call of one with a
    value the solution returned is judged by the trainer, the helper's asserts included
    (HumanEval+'s `assertion(candidate(*inp), exp, 0)` with its float tolerance). A name the tests
    bind twice is left alone."""
    bound = collections.Counter(n for s in body for n in _defined_names([s]))
    enums = [s for s in body if isinstance(s, ast.ClassDef) and bound[s.name] == 1
             and _plain_enum(s, env)]
    defs = {s.name: s for s in body if isinstance(s, ast.FunctionDef) and bound[s.name] == 1
            and not s.name.startswith("test") and s.name != "check"}
    names = set(defs)
    while True:  # helpers calling helpers: drop any that names something else, until none does
        allowed = set(env) | HELPER_BUILTINS | names | {s.name for s in enums}
        keep = {n for n in names if _runs_on_data(defs[n], allowed, env)}
        if keep == names:
            break
        names = keep
    if not names and not enums:
        return {}
    scope = {**env, "__builtins__": {n: getattr(builtins, n) for n in HELPER_BUILTINS}
             | {"__build_class__": builtins.__build_class__}}
    scope["__name__"] = "tests"
    chosen = [s for s in body if s in enums or (isinstance(s, ast.FunctionDef) and s.name in names)]
    try:
        exec(compile(ast.Module(body=chosen, type_ignores=[]), "tests.py", "exec"),  # noqa: S102
             scope)
    except Exception:  # noqa: BLE001 - the tests' own definitions fail here: the sandbox's
        return {}
    return {s.name: scope[s.name] for s in chosen}


@lru_cache(maxsize=4096)
def capitalised_calls(tests: str) -> frozenset:
    """Capitalised names the tests call but do not define (`Stack()`, MBPP's `Split(...)`): the
    solution's classes or functions; which one, the run decides (build_plan's `functions`)."""
    try:
        module = ast.parse(tests)
    except SyntaxError:
        return frozenset()
    defined = _defined_names(module.body)
    return frozenset(n.func.id for n in ast.walk(module)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                     and n.func.id[:1].isupper() and n.func.id not in defined
                     and n.func.id not in BUILTIN_NAMES)


@lru_cache(maxsize=4096)
def build_plan(tests: str, entry_point: str | None = None, setup: str = "",
               functions: frozenset = frozenset(), to_harness: frozenset = frozenset()) -> Plan:
    """The plan for one problem's tests (cached: the same reference comes back every epoch). A tests
    string that is not Python raises ValueError (a data bug). `functions`: capitalised names that
    are functions of the solution's, not classes (their calls' results are judged here).
    `to_harness`: tests (functions, TestCase classes) left to the harness whatever they are, as
    those sharing module-level state with a test the harness runs (_across_the_split); EVERY_TEST:
    all of them, the module's own statements too (the answer drew where the tests' draws follow:
    DRAWS)."""
    started = time.monotonic()
    _ROUNDS.left = MAX_UNROLL
    try:
        module = ast.parse(tests)
        setup_names = _defined_names(ast.parse(setup).body) if setup else set()
    except SyntaxError as e:
        raise ValueError(f"code tests are not valid Python ({e}): {tests[:200]!r}") from None
    module.body = _last_definitions(module.body)
    _settle_skip_conditions(module.body, any(
        isinstance(s, ast.Import) and any(a.name == "sys" and not a.asname for a in s.names)
        for s in module.body))
    classes = {s.name: s for s in module.body if isinstance(s, ast.ClassDef)}
    # a base the problem's setup defines (`class Base(unittest.TestCase)` in it): its methods are
    # the tests' too, as the test module's namespace holds it
    for s in (ast.parse(setup).body if setup else []):
        if isinstance(s, ast.ClassDef) and s.name not in classes:
            classes[s.name] = s
    env, prelude, from_solution, modules = _setup_values(setup), [], set(), set()
    imports = _importable()  # one per plan: the tests' random draws, in order, as in the judge
    for stmt in module.body:  # `import numpy as np`, `from numpy import allclose`
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and not getattr(stmt, "level", 0):
            for name in [stmt.module] if isinstance(stmt, ast.ImportFrom) else [
                    a.name for a in stmt.names]:
                _lazy_import(imports, name)
    # data the setup binds is the tests' (computed here); its functions and classes
    setup_names -= set(env)
    # stay the solution's namespace's, where the setup also runs (a Node class the solution builds
    # on)
    for stmt in module.body:  # literal constants and imports from the solution, in order
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "solution":
            prelude.append(ast.unparse(stmt))
            from_solution |= {a.asname or a.name for a in stmt.names if a.name != "*"}
        elif isinstance(stmt, ast.Import) and any(a.name == "solution" for a in stmt.names):
            prelude.append(ast.unparse(stmt))
            from_solution |= {a.asname or a.name for a in stmt.names}
            modules |= {a.asname or a.name for a in stmt.names if a.name == "solution"}
        elif _child_module(stmt):  # `import matplotlib.pyplot as plt`: the child's names
            prelude.append(ast.unparse(stmt))
            for bound, is_module in _child_module_names(stmt):
                from_solution.add(bound)
                if is_module:
                    modules.add(bound)  # a module (`plt`): its attributes are the child's
        elif isinstance(stmt, ast.ImportFrom) and stmt.module in imports and not stmt.level:
            for a in stmt.names:  # `from collections import Counter`: the trainer's own
                if a.name != "*" and not a.name.startswith("_") and hasattr(imports[stmt.module],
                                                                            a.name):
                    env[a.asname or a.name] = getattr(imports[stmt.module], a.name)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module in ("os", "os.path") and (
                not stmt.level):  # `from os import path`, `from os.path import join`
            path = _os_for_tests().path
            for a in stmt.names:
                if stmt.module == "os" and a.name == "path":
                    env[a.asname or a.name] = path
                elif stmt.module == "os.path" and a.name in PATH_TEXT:
                    env[a.asname or a.name] = getattr(path, a.name)
        elif isinstance(stmt, ast.Import) and any(a.name in ("os", "os.path") for a in stmt.names):
            env.update((a.asname or "os", _os_for_tests().path if a.asname and a.name == "os.path"
                        else _os_for_tests()) for a in stmt.names if a.name in ("os", "os.path"))
        # `import random` (a Random of the plan's own), `import copy`
        elif isinstance(stmt, ast.Import):
            env.update((a.asname, imports[a.name]) if a.asname else (
                a.name.split(".")[0], imports[a.name.split(".")[0]]) for a in stmt.names
                if a.name in imports and a.name.split(".")[0] in imports)
        # `from unittest.mock import patch, MagicMock, call` (rewards/mocks.py)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "unittest.mock":
            api = mock_namespace()
            env.update((a.asname or a.name, api[a.name]) for a in stmt.names if a.name in api)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "unittest":
            env.update((a.asname or a.name, MockModule()) for a in stmt.names
                       if a.name == "mock")
        # `from pytest import approx, raises`
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "pytest":
            for a in stmt.names:
                if a.name in _FROM_PYTEST:
                    env[a.asname or a.name] = _FROM_PYTEST[a.name]
        elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
              and isinstance(stmt.targets[0], ast.Name)):
            try:
                env[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    env.update(_trainer_definitions(module.body, env))
    if not EVERY_TEST <= to_harness and _draws_out_of_order(module.body, env, imports):
        plan = build_plan.__wrapped__(tests, entry_point, setup, functions, to_harness | EVERY_TEST)
        plan.refusal = plan.refusal and OUT_OF_ORDER
        return plan
    # the mocks' recipe and its mutable values (_Unit.mock_values); the modules the tests import
    recipe, mock_values, module_paths = [], {}, {}
    for stmt in module.body:
        if isinstance(stmt, ast.Import):
            module_paths.update((a.asname or a.name.split(".")[0],
                                 a.name if a.asname else a.name.split(".")[0]) for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module not in (
                "solution", "unittest", "unittest.mock", "pytest"):
            module_paths.update((a.asname or a.name, f"{stmt.module}.{a.name}")
                                for a in stmt.names if a.name != "*")
    imported = _defined_names(s for s in module.body if isinstance(s, (ast.Import, ast.ImportFrom)))
    defined = _defined_names(s for s in module.body
                             if not (isinstance(s, ast.ImportFrom) and s.module == "solution"))
    # Names the tests define themselves (helpers, non-literal variables, other modules) make a case
    # unconvertible; so do builtins the trainer does not evaluate itself (they are never the
    # solution's, unless it exports them); every other free name is the solution's (MBPP names no
    # entry point; KodCode imports them).
    foreign = (defined - set(env) - {"check"}
               - {n for n in defined if n.startswith("test")}) | (imported - set(MODULES)
                                                                  - set(env))
    foreign -= from_solution | setup_names
    foreign.discard("pytest")
    foreign -= {n for n, v in env.items() if any(v is x for x in _FROM_PYTEST.values())}
    own = from_solution | setup_names

    def child_names(node) -> set:
        stored = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        # the test's own variables (loop and comprehension ones too)
        local = stored | _bound_inside(node)
        return (_names(node) - local - BUILTIN_NAMES - set(MODULES) - {"pytest"} - set(env)
                - foreign) | own

    # `check(add)` at module level (HumanEval + a call, HumanEvalPack without an entry point) or as
    # the whole body of a test function (MultiPL-E's `def test_check(): check(add)`): each names a
    # candidate for check; those statements are that check's unit, not tests of their own. A bare
    # call of a test function of the tests' (`test_add()` after its definition) runs what the unit
    # judges already.
    check_def = next((s for s in module.body if isinstance(s, ast.FunctionDef)
                      and s.name == "check"), None)
    wrappers = {s.name for s in module.body if isinstance(s, ast.FunctionDef)
                and s.name.startswith("test")
                and s.body and all(_check_call(b) for b in _without_docstring(s.body))}
    candidates = [entry_point] if entry_point else []
    for s in module.body:
        calls = ([s] if _check_call(s) else _without_docstring(s.body)
                 if isinstance(s, ast.FunctionDef)
                 and s.name in wrappers else [])
        candidates += [_check_call(c) for c in calls if _check_call(c) not in candidates]
    if check_def is None:
        wrappers, candidates = set(), candidates[:1]
    test_functions = {s.name for s in module.body
                      if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and s.name.startswith("test")}
    checks_called = bool(candidates) and check_def is not None
    # a test function the tests name (`test_a.data = [1, 2]`, `helper = test_a`) but in a bare
    # call that runs it (`test_a()`, under `if __name__ == "__main__":` too): pytest's, with what
    # the module does to it
    calls = {id(s.value.func) for s in module.body if _runs_tests(s, test_functions)}
    named_tests = {n.id for s in module.body if not _is_main_guard(s) for n in ast.walk(s)
                   if isinstance(n, ast.Name) and n.id in test_functions and id(n) not in calls}
    foreign |= named_tests  # the tests' own functions, never the solution's
    script_kinds = (ast.Assert, ast.Assign, ast.AnnAssign, ast.Expr, ast.With)
    script_stmts = [s for s in module.body if isinstance(s, script_kinds)]
    # The module's own statements (MBPP's asserts, `lst = [3, 1, 2]; sort_in_place(lst); assert lst
    # == ...`) run in order in one namespace, as a script: one unit. At the first statement it
    # cannot convert, the script breaks: that statement and every later one run in the harness (they
    # may depend on it).
    script = _Unit(env, child_names(ast.Module(body=script_stmts, type_ignores=[])), prelude,
                   modules, imports, functions, setup=setup_names)
    def unittest_units(group: list) -> tuple[list, int]:
        """The units of the TestCase classes in `group` (classes linked by inheritance), in file
        order: per class with tests, setUpClass's unit, a unit per test, tearDownClass's unit
        (_CaseClass); Unconvertible if any part is not the trainer's to judge."""
        if _MODULE_HOOKS & defined:
            raise Unconvertible("a module-level setUpModule")
        for s in module.body:  # a class of the group named anywhere but as a base or in
            parts = s.body if isinstance(s, ast.ClassDef) and s.name in group else [s]
            supers = {id(n.args[0]) for p in parts for n in ast.walk(p)  # `super(C, self)`
                      if isinstance(n, ast.Call) and ast.unparse(n.func) == "super" and n.args}
            if set(group) & {n.id for p in parts for n in ast.walk(p)
                             if isinstance(n, ast.Name) and id(n) not in supers}:
                raise Unconvertible("a test class named by the tests")  # it may change it
        if any(c.startswith("Test") and not _is_test_case(classes[c], classes, set())
               for c in group):
            raise Unconvertible("a pytest class among the TestCases")
        uses_mock = any(_uses_mock(classes[c]) for c in group)
        local_env, local_shared = dict(env), set(shared)
        tc = _testcase()
        local_env.update({f"__unittest_{n}": getattr(tc, n) for n in UNITTEST_ASSERTS})
        local_env.update(_class_values(group, classes, lambda values: _Unit(
            {**local_env, **values}, set(), [], modules, imports, functions,
            setup=setup_names)))
        counter, out, cases = [0], [], 0

        def unit(name, body, touched=frozenset(), fixtures=()):
            fn = _iterators_as_lists(ast.FunctionDef(name=name, args=ast.arguments(
                posonlyargs=[], args=[ast.arg(arg=f) for f in fixtures], kwonlyargs=[],
                kw_defaults=[], defaults=[]), body=body, decorator_list=[], lineno=0))
            body = fn.body
            declared = {x for n in ast.walk(fn) if isinstance(n, ast.Global) for x in n.names}
            local = _stored(fn) - declared | _bound_inside(fn)
            unshared = {k: v for k, v in local_env.items() if k not in local_shared}
            level = set(unshared) - local | touched | declared
            u = _Unit(unshared, (child_names(fn) - set(local_env)) | (local_shared & _names(fn))
                      - local - touched, prelude, modules, imports, functions, level,
                      setup_names)
            u.module_paths = module_paths  # the tests' modules: their exception classes
            if uses_mock:  # the mocks this unit makes join the plan's recipe
                u.mock_recipe, u.mock_values = recipe, mock_values
            cut = next((i for i, b in enumerate(body) if b is _TEST_ENDS), len(body))
            u.returns = True
            u.fixtures(fn, defined)  # a pytest class's test: capsys, tmp_path, monkeypatch
            try:
                for b in body[:cut]:
                    u.statement(b)
            except _Returned:
                pass
            for b in body[cut + 1:]:  # tearDown: it runs whether the test returned or not
                u.statement(b)
            u.mocks_in_order()
            for n in touched | declared:  # what setUpClass gave the class, a test's globals:
                if isinstance(u.env.get(n), MockRef):  # every later test's
                    raise Unconvertible("unittest.mock: a mock shared by a class's tests")
                if n in u.child:
                    local_shared.add(n)
                    local_env.pop(n, None)
                elif n in u.env:
                    local_env[n] = u.env[n]
                    local_shared.discard(n)
                elif n in u.deferred:
                    raise Unconvertible("a class attribute or global computed from the "
                                        "solution's results")
            local_shared.update(n for n in level if n not in u.env and n in u.child)
            if u.steps or u.checks:  # setUpClass computing only here: no unit of its own
                out.append(u.finished(name))

        for c in group:
            if not _is_test_case(classes[c], classes, set()):
                continue  # a mixin: its tests run as the TestCases that inherit it
            up, tests, down = _CaseClass(c, classes, counter).bodies()
            mine = {n for b in up for n in _names(b) if n.startswith(f"__cls_{c}_")}
            if up:
                unit(f"{c}.setUpClass", up, mine)
            fixtures = getattr(classes[c], "gmts_fixtures", {})
            for name, body, n in tests:
                unit(f"{c}.{name}", body, fixtures=fixtures.get(name, ()))
                cases += n
            if down:
                unit(f"{c}.tearDownClass", down, mine)
        env.clear()
        env.update(local_env)
        shared.update(local_shared)
        return out, cases

    tried, judged = set(), set()  # classes of the tests' whose TestCases were tried / judged here
    reasons = []  # why each part left to the harness is not judged here
    every = EVERY_TEST <= to_harness
    script_broken = every  # the module's own statements too
    # kept: (statement, whether it tests anything in the harness)
    units, kept, harness_tests = [], [], []
    trainer_parts = {}  # test (function, TestCase class) judged here: its statements
    trusted = untrusted = unjudged = 0
    shared = set()  # module-level mutable names the child holds, one object for every later test
    reads = collections.Counter(n.id for n in ast.walk(module)
                                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    read_again = frozenset(n for n, k in reads.items() if k > 1)
    skipped = _skipped_classes(classes)
    at = {id(s): i for i, s in enumerate(module.body)}  # file order, for the harness and reasons

    def refuse(stmt, why):
        reasons.append((at[id(stmt)], _reason(stmt, why)))

    # as pytest: importing the module runs its own statements (a seed, a draw, a list built), then
    # the tests run, in file order
    literals, imported_all = set(env), False
    for stmt in sorted(module.body, key=lambda s: not _module_statement(s, script_kinds)):
        if not imported_all and not _module_statement(stmt, script_kinds):
            # the module's constants as its statements left them (`L.append(2)` after `L = [1]`)
            imported_all = True
            for n in literals & _stored(ast.Module(body=script_stmts, type_ignores=[])):
                if n in script.child:  # the solution was given it: the child's, one object
                    shared.add(n)
                    env.pop(n, None)
                    for step in script.steps:  # kept in the child for every test
                        if n in step.get("binds", ()):
                            step["share"] = True
                elif n in script.env:
                    env[n] = script.env[n]
        # as pytest and unittest: not run, counted neither way (with the classes inheriting one)
        if _skipped(stmt) or isinstance(stmt, ast.ClassDef) and stmt.name in skipped:
            continue
        if _is_main_guard(stmt) or (check_def is not None
                                    and _check_call(stmt)) or _runs_tests(stmt, test_functions):
            # `if __name__ == ...`, `unittest.main()`, `check(add)`, `test_add()`: judged where
            # defined
            continue
        if isinstance(stmt, ast.FunctionDef) and stmt.name in wrappers:
            continue  # `def test_check(): check(add)`: check's unit with that candidate
        if isinstance(stmt, ast.ClassDef) and stmt.name not in tried:
            group = [c for c in _component(stmt.name, classes) if c not in skipped]
            tried.update(group)
            if any(_is_test_case(classes[c], classes, set()) for c in group):
                try:  # unittest TestCases (their bases, mixins): a unit per test, per class
                    if every or to_harness & set(group):
                        raise Unconvertible(SHARES_STATE)
                    converted, cases = unittest_units(group)
                    units += converted
                    trusted += cases
                    judged.update(group)
                    trainer_parts.update((c, [classes[c] for c in group]) for c in group)
                except (Unconvertible, ValueError, TypeError, SyntaxError, ArithmeticError,
                        LookupError, RecursionError) as e:
                    mocked = any(_uses_mock(classes[c]) for c in group)
                    refuse(stmt, _mock_reason(e) if mocked else e)
            elif _is_test_class(stmt, classes):  # `class TestX:`, as the TestCase it would be
                try:
                    if every or to_harness & set(group):
                        raise Unconvertible(SHARES_STATE)
                    classes[stmt.name] = _as_testcase(stmt, classes)
                    converted, cases = unittest_units(group)
                    units += converted
                    trusted += cases
                    judged.update(group)
                    trainer_parts[stmt.name] = [stmt]
                except (Unconvertible, ValueError, TypeError, SyntaxError, ArithmeticError,
                        LookupError, RecursionError) as e:
                    refuse(stmt, e)
                finally:
                    classes[stmt.name] = stmt
        if isinstance(stmt, ast.ClassDef) and stmt.name in judged:
            continue
        if _is_test_class(stmt, classes):  # run by the harness, each method reported by name
            # why, where the class was not tried on its own (a base or subclass of the tests')
            refuse(stmt, "a test class in a hierarchy of the tests' own classes")
            names, cases = _class_tests(stmt, env, classes)
            harness_tests += names
            untrusted += cases
            # a class without a test method (a base of the tests' own) tests nothing; if nothing
            # else does, the run is unjudged below
            kept.append((stmt, True))
            continue
        if (isinstance(stmt, ast.FunctionDef) and stmt.name == "check" and not entry_point
                and not checks_called):
            # HumanEval's check(candidate) with nothing to pass as candidate
            unjudged += _count_cases(stmt)
            continue
        if isinstance(stmt, script_kinds) and not (isinstance(stmt, ast.Expr)
                                                   and isinstance(stmt.value, ast.Constant)):
            cases = _count_cases(stmt) if isinstance(stmt, (ast.Assert, ast.With)) else 0
            if not script_broken:
                saved = copy.copy(script.__dict__)
                saved.update({k: copy.copy(v) for k, v in saved.items()})
                try:
                    before = len(script.checks)
                    script.statement(stmt)
                    # an assert or raises block: its cases; a call the trainer judges (a helper of
                    # the tests', numpy.testing's comparison): one
                    trusted += cases or int(len(script.checks) > before)
                    # the harness still needs its effects (a binding, a mutation)
                    kept.append((stmt, False))
                    continue
                except (Unconvertible, ValueError, TypeError, SyntaxError, ArithmeticError,
                        LookupError,
                        RecursionError) as e:
                    refuse(stmt, e)
                    script.__dict__.update(saved)
                    script.__dict__.pop("_placeholders", None)  # rebuilt from the steps kept
                    script_broken = True
            # in the harness, a bare call tests that it runs
            runs = isinstance(stmt, (ast.Expr, ast.With))
            untrusted += cases or int(runs)
            kept.append((stmt, bool(cases) or runs))
            continue
        try:
            if isinstance(stmt, ast.FunctionDef) and (stmt.name in to_harness or every and (
                    stmt.name.startswith("test") or stmt.name == "check")):
                raise Unconvertible(SHARES_STATE)
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "check" and candidates:
                arg = stmt.args.args[0].arg if len(stmt.args.args) == 1 else None
                if arg is None or stmt.decorator_list:
                    raise Unconvertible("check() signature")
                converted = []
                # usually one: the entry point, or what the tests pass to check
                for candidate in candidates:
                    u = _Unit(env, child_names(stmt) | {arg}, prelude + [f"{arg} = {candidate}"],
                              modules, imports, functions, setup=setup_names)
                    for s in stmt.body:
                        u.statement(s)
                    converted.append(u.finished("check"))
                units += converted
                trusted += _count_cases(stmt) * len(candidates)
                trainer_parts[stmt.name] = [stmt]
                continue
            if isinstance(stmt, ast.FunctionDef) and stmt.name in named_tests:
                raise Unconvertible("a test function named by the tests")
            if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("test"):
                fn = _iterators_as_lists(stmt)
                if stmt.decorator_list and all(_is_patch(d) for d in stmt.decorator_list):
                    # `@patch(...)` on a test function: its mocks, as on a TestCase's method
                    fn = _with_patches(fn, list(reversed(stmt.decorator_list)), 0)
                if "monkeypatch" in [a.arg for a in fn.args.args]:
                    fn = _monkeypatch_as_patches(fn)  # patch blocks of unittest.mock
                mocked = _uses_mock(fn)
                rows = _param_rows(fn, env, read_again)
                converted, now_shared = [], set()
                # `global N`: N is the module's, its binding here every later test's
                declared = {n for g in fn.body if isinstance(g, ast.Global) for n in g.names}
                local = _stored(fn) - declared | _bound_inside(fn)
                module_env, module_shared = dict(env), set(shared)  # as each row leaves them
                for row in rows:
                    unshared = {k: v for k, v in module_env.items() if k not in module_shared}
                    level = set(unshared) - set(row) - local | declared
                    u = _Unit({**unshared, **row}, child_names(fn) - set(row)
                              | (module_shared & _names(fn)) - set(row) - local, prelude,
                              modules, imports, functions, level, setup_names)
                    u.module_paths = module_paths
                    if mocked:
                        u.mock_recipe, u.mock_values = recipe, mock_values
                    u.returns = True
                    u.fixtures(fn, defined)
                    try:
                        for s in fn.body:
                            u.statement(s)
                    except _Returned:
                        pass
                    if mocked:
                        u.mocks_in_order()
                    converted.append(u.finished(fn.name))
                    now_shared |= {n for n in level if n not in u.env and n in u.child}
                    for n in declared:
                        if n in u.deferred:
                            raise Unconvertible("a global computed from the solution's results")
                        if n in u.child:  # bound in the child, with "share": the child's
                            module_shared.add(n)
                        elif n in u.env:
                            module_env[n] = u.env[n]
                            module_shared.discard(n)
                units += converted
                env.clear()
                env.update(module_env)
                shared.clear()
                shared |= module_shared | now_shared
                trusted += len(rows) * _count_cases(stmt)
                trainer_parts[stmt.name] = [stmt]
                continue
        except (Unconvertible, ValueError, TypeError, SyntaxError, ArithmeticError, LookupError,
                RecursionError) as e:
            mocked = isinstance(stmt, ast.FunctionDef) and _uses_mock(stmt)
            refuse(stmt, _mock_reason(e) if mocked else e)
            # not judged here (ValueError & co.: a table the trainer could not evaluate): the
            # harness runs it
            untrusted += _count_cases(stmt) * (len(_safe_rows(stmt, env))
                                               if isinstance(stmt, ast.FunctionDef) else 1)
            if isinstance(stmt, ast.FunctionDef) and (stmt.name.startswith("test")
                                                      or stmt.name == "check"):
                harness_tests.append(stmt.name)
            kept.append((stmt, True))
            continue
        test = _is_test(stmt, candidates[0] if candidates else None)
        if test and not isinstance(stmt, ast.FunctionDef):
            untrusted += _count_cases(stmt)  # a module-level loop: it tests as the harness runs it
            if isinstance(stmt, ast.AsyncFunctionDef) and stmt.name.startswith("test"):
                # the harness must report it run (it cannot: never a pass)
                harness_tests.append(stmt.name)
        kept.append((stmt, test))
    kept.sort(key=lambda k: at[id(k[0])])
    reasons = [r for _, r in sorted(reasons, key=lambda r: r[0])]
    across = _across_the_split(module.body, env, trainer_parts,
                               [stmt for stmt, test in kept if test])
    if across:  # judged here, these would not see (or make) the harness's changes: its too
        return build_plan.__wrapped__(tests, entry_point, setup, functions, to_harness | across)
    if script.checks or len(script.steps) > len(prelude):
        units.insert(0, script.finished("module"))
    if trainer_parts and any(test for _, test in kept):
        # pytest runs every test of the module in one process, in file order: the harness runs
        # the tests judged here too (they must pass there as well), so the solution's own state
        # (a counter, a cache) reaches each test it judges as under pytest
        flags = {id(stmt): test for stmt, test in kept}
        for stmt in {id(s): s for p in trainer_parts.values() for s in p}.values():
            if isinstance(stmt, ast.FunctionDef) and stmt.name != "check":
                flags[id(stmt)] = True
                harness_tests.append(stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                flags[id(stmt)] = _is_test_class(stmt, classes)
                harness_tests += _class_tests(stmt, env, classes)[0] if flags[id(stmt)] else []
        kept = [(stmt, flags[id(stmt)]) for stmt in module.body if id(stmt) in flags]
    harness = None
    if any(test for _, test in kept):
        harness = ast.unparse(ast.Module(body=[stmt for stmt, _ in kept], type_ignores=[]))
    if trusted + untrusted == 0:
        # no test case at all (only helpers, imports, a docstring): zero judged is never a pass
        unjudged += 1
    return Plan(units=units, harness=harness, trusted=trusted, untrusted=untrusted,
                unjudged=unjudged,
                harness_tests=tuple(dict.fromkeys(harness_tests)),
                check_candidate=candidates[0] if candidates else None,
                build_seconds=time.monotonic() - started,
                # the first cause, before the tests it drew to the harness (SHARES_STATE)
                refusal=min(reasons, key=lambda r: SHARES_STATE in r)
                if harness is not None and reasons else "",
                mocks=recipe)


SHARES_STATE = "module-level state shared with a test the harness runs"
OUT_OF_ORDER = ("a decorator, a default or a class body draws from a random state the tests "
                "seed, at import under pytest")
# build_plan's to_harness for every test
EVERY_TEST = frozenset({"*"})
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range, type, type(math),
              types.FunctionType, types.BuiltinFunctionType)


def _immutable(value) -> bool:
    """Can no test change the value in place (a number, a string, a tuple of them, a function)?"""
    if type(value) in (tuple, frozenset):
        return all(_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE)  # a class too: a test setting its attributes is below


def _across_the_split(body: list, env: dict, trainer_parts: dict, harness_parts: list) -> set:
    """Tests judged here that reach module-level state a part the harness runs also reaches: a
    mutable value, a name some test rebinds (`global`), a class whose attributes a test sets
    (through the module's own helpers too). The harness and the trainer run apart, so pytest's one
    namespace would not be one; those tests go to the harness (frozenset of their names)."""
    if not trainer_parts or not harness_parts:
        return frozenset()
    helpers = {s.name: s for s in body if isinstance(s, (ast.FunctionDef, ast.ClassDef))
               and s.name not in trainer_parts}
    rebound = {n for s in body for g in ast.walk(s) if isinstance(g, (ast.Global, ast.Nonlocal))
               for n in g.names}
    rebound |= {a.value.id for s in body for a in ast.walk(s) if isinstance(a, ast.Attribute)
                and isinstance(a.ctx, (ast.Store, ast.Del)) and isinstance(a.value, ast.Name)
                and isinstance(helpers.get(a.value.id), ast.ClassDef)}
    assigned = {n for s in body if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign,
                                                  ast.For, ast.With)) for n in _stored(s)}
    state = rebound | {n for n in assigned if n not in env or not _immutable(env[n])}

    def reach(stmts) -> set:
        seen, todo = set(), [n for s in stmts for n in _names(s)]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += _names(helpers[n]) if n in helpers else []
        return seen

    reached = reach(harness_parts) & state
    return frozenset(name for name, stmts in trainer_parts.items() if reach(stmts) & reached)


def _last_definitions(body: list) -> list:
    """The module's statements without a test function or class that a later one of the same name
    replaces (pytest collects the module's final namespace: only the last `def test_x` is a
    test)."""
    def test_name(stmt):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                stmt.name.startswith(("test", "Test")) or _is_test_class(stmt)):
            return stmt.name
        return None
    last = {test_name(s): i for i, s in enumerate(body)}
    return [s for i, s in enumerate(body) if test_name(s) is None or last[test_name(s)] == i]


def _safe_rows(fn, env, method=False) -> list:
    try:
        if method:  # `self` is not a parameter of the table
            fn = copy.copy(fn)
            fn.args = copy.copy(fn.args)
            fn.args.args = fn.args.args[1:]
        return _param_rows(fn, env) or [{}]
    except Unconvertible:
        return [{}]


def _named(node, env: dict, imports: dict):
    """What a name of the tests' holds, or a chain of public attributes of modules from one
    (`np.testing.assert_allclose`; the plan's `random` too: `random.seed`); None for anything
    else."""
    base, attrs = attribute_chain(node)
    if not isinstance(base, ast.Name) or base.id not in env or any(
            a.startswith("_") for a in attrs):
        return None
    value = env[base.id]
    for attr in attrs:
        if not isinstance(value, type(math)) and value is not imports.get("random"):
            return None
        value = getattr(value, attr, None)
    return value


def _draws_out_of_order(body: list, env: dict, imports: dict) -> bool:
    """Does code pytest runs as it imports the module draw from a global random state the tests
    seed, where the plan draws it at another time: a decorator's or a default's arguments
    (`@pytest.mark.parametrize("x", [random.random()])`), a class body after a test (its tests
    draw first here, after it under pytest)?"""
    def draws(nodes) -> bool:
        return any(isinstance(n, ast.Call) and _is_generator_of_draws(
            getattr(_named(n.func, env, imports), "__self__", None))
            for node in nodes for n in ast.walk(node))

    def headers(node) -> list:
        """What runs as the definition runs: decorators, defaults; a class's bases and its
        methods' headers (not what runs when a function is called)."""
        if not isinstance(node, ast.ClassDef):
            return node.decorator_list + node.args.defaults + [
                k for k in node.args.kw_defaults if k]
        return node.decorator_list + node.bases + [k.value for k in node.keywords] + [
            x for b in node.body
            if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for x in headers(b)]
    if not any(isinstance(n, ast.Call) and _last_name(n.func) == "seed"
               for s in body for n in ast.walk(s)):
        return False
    tested = False  # a test function or class comes earlier in the file
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if draws(headers(stmt)) or tested and isinstance(stmt, ast.ClassDef) and draws(
                    b for b in stmt.body
                    if not isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))):
                return True
            tested = tested or stmt.name.startswith(("test", "Test")) or (
                isinstance(stmt, ast.ClassDef) and bool(stmt.bases))
    return False


def _module_statement(stmt, kinds) -> bool:
    """Is this one of the module's own statements (run as the module is imported, before any test):
    an assert, an assignment, a call, a with block; not a definition, an import or a docstring."""
    return isinstance(stmt, kinds) and not (isinstance(stmt, ast.Expr)
                                            and isinstance(stmt.value, ast.Constant))


def _is_test(stmt, entry_point) -> bool:
    """Does this leftover statement test anything (else the harness need not run at all)?"""
    if isinstance(stmt, ast.ClassDef):
        return _is_test_class(stmt)
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
        return False
    if isinstance(stmt, ast.FunctionDef):
        return stmt.name.startswith("test") or (stmt.name == "check" and bool(entry_point))
    if isinstance(stmt, ast.Assign):
        return False
    return not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))


# ---------------------------------------------------------------- judging


def _match_text(result: dict, notes: bool):
    """The text `match` searches: the message, with pytest (notes) also its notes (PEP 678) a line
    each, as pytest's stringify_exception joins them; None where the child could not read them, or
    past the child's bounds (MAX_MESSAGE each, 64 notes): a message this long is refused rather
    than searched (the regex is the tests', but the text is the solution's, and a search can take
    time quadratic in it)."""
    message, extra = result.get("msg"), result.get("notes", []) if notes else []
    if not (isinstance(message, str) and isinstance(extra, list)
            and all(isinstance(n, str) for n in extra)):
        return None
    text = "\n".join([message, *extra])
    return text if len(text) <= 2 * MAX_MESSAGE + 64 else None


def _raised(result: dict, expected: tuple, match: str | None, text: str | None) -> bool:
    """The step raised one of `expected` (by the child's report of the raised class: each class
    of its MRO with whether it IS the builtin of that name; the names of the solution's module and
    the paths of the tests' modules whose class is in the MRO), with a message that `match`
    finds."""
    if "exc" not in result:
        return False
    found = _RaisedClass(result).keys
    if not any(f"{origin}.{name}" in found for name, origin in expected):
        return False
    if match is None:
        return True
    # pytest matches the whole message (text: _match_text)
    return text is not None and re.search(match, text) is not None


def _value(step: dict, result: dict):
    """The value of an eval step: decoded, then the attributes (and a method_step's calls) the
    child did not apply (it applies them only to what cannot cross as data; on data they are
    applied here, a call only of DATA_METHODS); a compare_step's: the comparison of its operands'
    data, or the child's verdict where one could not cross (a bool, nothing else)."""
    if "compare" in step:
        if "compared" in result:
            if type(result["compared"]) is not bool:
                raise ValueError("malformed comparison")
            return result["compared"]
        return _COMPARE[step["compare"]](decode(result["ok"]), decode(result["right"]))
    value = decode(result["ok"])
    attrs = step.get("attrs", step.get("ops", []))
    applied = result.get("applied", 0)
    if type(applied) is not int or not 0 <= applied <= len(attrs):
        raise ValueError(f"malformed attribute count {applied!r}")
    for op in attrs[applied:]:
        if type(op) is str:
            value = getattr(value, op)
            continue
        if op[0] == "[]":
            value = value[decode(op[1])]
            continue
        if op[0] == "[:]":
            value = value[slice(*(None if p is None else decode(p) for p in op[1:]))]
            continue
        _, name, args, kwargs = op
        if name not in DATA_METHODS:
            raise ValueError(f"method {name} of data")
        value = getattr(value, name)(*(_op_value(a) for a in args),
                                     **{k: _op_value(v) for k, v in kwargs.items()})
    return value


_OP_TYPES = {t.__name__: t for t in (int, float, str, bool, complex)}
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge, "in": lambda a, b: a in b,
            "not in": lambda a, b: a not in b}


def _op_arg(value):
    """An argument of a method_step's call, as data: a builtin type (`astype(float)`) by name."""
    if isinstance(value, type):
        if _OP_TYPES.get(value.__name__) is not value:
            raise Unconvertible(f"the type {value.__name__} as an argument")
        return {"type": value.__name__}
    return encode_input(value)


def _op_value(data):
    """_op_arg's argument again, here."""
    if type(data) is dict and set(data) == {"type"}:
        return _OP_TYPES[data["type"]]
    return decode(data)


class _Caught:
    """The exception a `pytest.raises(E) as excinfo` / `assertRaises(E) as cm` block caught, as
    the child reported it: its message (`str()`, as `match` reads it), its repr and the public
    attributes the test reads (raised_parts), each plain data rebuilt here; nothing else."""

    def __init__(self, result: dict):
        parts = result.get("parts")
        self.__parts = parts if isinstance(parts, dict) else {}
        self.__message = result.get("msg")

    def __part(self, name):
        part = self.__parts.get(name)
        if not (isinstance(part, dict) and "ok" in part):  # reading it raised in the child
            raise _StepFailed(name)
        return decode(part["ok"])

    def __str__(self):
        if not isinstance(self.__message, str):  # none, or over MAX_MESSAGE characters
            raise _StepFailed("message")
        return self.__message

    def __repr__(self):
        text = self.__part("__repr__")
        if type(text) is not str:
            raise _StepFailed("repr")
        return text

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return self.__part(attr)


class _RaisedClass:
    """The raised class as the child reported it (_sandbox_child.raised: "mro", [name, origin] of
    each class of its MRO; "names", [name, whether it is the class itself] of the solution's names
    bound to a class of it; "paths", the tests' modules' classes in it): `typename` (pytest's: its
    name), `keys` ("builtins.E", "solution.E", "module.path" of the classes it is an instance of),
    `raised_is(key)` (it is that very class) and `raised_a(*keys)` (isinstance). Plan building
    rewrites a test's `excinfo.type is E`, `type(cm.exception) == E`, `isinstance(cm.exception,
    E)` and `issubclass(excinfo.type, E)` to these."""

    def __init__(self, report: dict):
        def pairs(field):
            got = report.get(field)
            return [c for c in got if isinstance(c, list) and len(c) == 2 and isinstance(
                c[0], str)] if isinstance(got, list) else []
        mro, names, paths = pairs("mro"), pairs("names"), report.get("paths")
        self.typename = mro[0][0] if mro else None   # None: a malformed report
        self.keys = ({f"builtins.{n}" for n, o in mro if o == "builtins"}
                     | {f"solution.{n}" for n, _ in names}
                     | {f"module.{p}" for p in (paths if isinstance(paths, list) else ())
                        if isinstance(p, str)})
        self.__itself = ({f"builtins.{mro[0][0]}"} if mro and mro[0][1] == "builtins" else set()
                         ) | {f"solution.{n}" for n, first in names if first is True}

    def raised_is(self, key) -> bool:
        return key in self.__itself

    def raised_a(self, *keys) -> bool:
        return any(k in self.keys for k in keys)


class _ExceptionInfo(_RaisedClass):
    """pytest's ExceptionInfo as a test reads it here: `.value`, `.match(regexp)`, `.typename` and
    `.type` compared with, or a subclass of, builtin exception classes (_RaisedClass)."""

    def __init__(self, caught: _Caught, text: str | None, report: dict):
        super().__init__(report)
        self.value, self.__text = caught, text      # text: the message and its notes (_match_text)

    def match(self, regexp) -> bool:
        if self.__text is None or re.search(regexp, self.__text) is None:
            raise AssertionError("the message does not match")
        return True


class _RaisesContext(_RaisedClass):
    """unittest's assertRaises context as a test reads it afterwards: `.exception`, its class
    (_RaisedClass)."""

    def __init__(self, caught: _Caught, report: dict):
        super().__init__(report)
        self.exception = caught


class _StepFailed(Exception):
    """A check read the value of a step that raised in the child (or returned something that is not
    data)."""


class _Values(dict):
    """Placeholder values for a check; reading one whose step failed fails the check, only when it
    is read."""

    def __init__(self, *args):
        super().__init__(*args)
        self.failed = set()

    def __missing__(self, key):
        if key in self.failed:
            raise _StepFailed(key)
        raise KeyError(key)


def judge_unit(unit: Unit, results, handles=(), given=frozenset(), mock_values=()) -> bool:
    """Did the child's results for this unit pass every check? Any malformed or missing result:
    no. handles: the run's mocks, replayed (rewards/mocks.py), for the names that hold them;
    given: the handles the child held in this unit (a step returning one of them returned that
    mock: `assertEqual(task_func(), m.return_value)`); mock_values: the run's values configuring
    the mocks (ValueRef), as the unit left them."""
    if not isinstance(results, list) or len(results) != len(unit.steps):
        return False
    raises_steps = {c.step for c in unit.checks if c.kind == "raises"}
    values = _Values()
    # `acc += v`, `d[k] = v` judged here change their operand in place: the plan's values stay as
    # built, this verdict's copies (one memo: names bound to one value still share it)
    copies = {} if any(IN_PLACE_OP in getattr(c.expr, "co_names", ())
                       for c in unit.checks) else None
    for i, result in enumerate(results):
        if not isinstance(result, dict):
            return False
        if i in raises_steps:
            continue
        # a value that raised (or is not plain data) fails only where it is used:
        if "eval" in unit.steps[i] and "mock" in result:
            if type(result["mock"]) is int and result["mock"] in given:
                values[f"__r{i}"] = handles[result["mock"]]
            else:
                values.failed.add(f"__r{i}")
        elif "eval" in unit.steps[i]:
            try:  # `assert f(x) == 3 or g(x) == 4` as Python evaluates it, short-circuits included
                values[f"__r{i}"] = _value(unit.steps[i], result)
            except (KeyError, ValueError, TypeError, AttributeError):
                values.failed.add(f"__r{i}")
        elif "ok" not in result:
            return False
    for check in unit.checks:
        if check.if_raised >= 0 and "exc" not in results[check.if_raised]:
            continue  # an except of a test's try whose body ended normally: it never ran
        if check.kind == "raises":
            if check.optional and "exc" not in results[check.step]:
                if "ok" not in results[check.step]:
                    return False
                continue
            text = _match_text(results[check.step], notes=check.info == "pytest")
            if not _raised(results[check.step], check.exceptions, check.match, text):
                return False
            if check.names:  # `as excinfo`: what the test reads of it, from the child's data
                caught = _Caught(results[check.step])
                report = results[check.step]
                values[check.names[0]] = (_RaisesContext(caught, report)
                                          if check.info == "unittest"
                                          else _ExceptionInfo(caught, text, report))
            continue
        env = {k: handles[v.id] if isinstance(v, MockRef) else mock_values[v.id] if isinstance(
            v, ValueRef) else v for k, v in check.env.items()} if handles else check.env
        if copies is not None:
            env = {k: copy.deepcopy(v, copies) if _changeable(v) else v for k, v in env.items()}
        scope = _Values({**env, **values})
        scope.failed = values.failed
        result = eval(check.expr, _scope(scope), scope)
        if check.kind == "bind":
            parts = list(result) if len(check.names) > 1 else [result]
            if len(parts) != len(check.names):
                return False
            values.update(zip(check.names, parts))
        elif check.kind == "assert" and not result:
            return False
    return True


# judge's verdict where a unit's tests drew after the answer moved the state they share
# (_Unit.sync_draws): those draws were not pytest's; pytest's harness judges instead
DRAWS = "draws"
DRAWS_REASON = ("the answer drew from a random state the tests seeded, and the tests drew from it "
                "after (pytest's one stream)")


def _moved(unit: Unit, results) -> bool:
    """Did the child report a seeded state the answer moved before the tests drew again?"""
    return isinstance(results, list) and len(results) == len(unit.steps) and any(
        "draws" in step and result != {"ok": True} for step, result in zip(unit.steps, results))


def judge(plan: Plan, unit_results, session=None) -> bool | str:
    """Every unit passed: True. Exceptions while judging (a result of the wrong shape for the
    check) are failures. session: the run's mocks (rewards/mocks.py Session, replaying the run's
    log unit by unit): unit i is judged once its requests are replayed, on the mocks as it left
    them. DRAWS where every other unit passed and one or more drew after the answer moved their
    shared state (_moved): those are not judged here."""
    if not isinstance(unit_results, list) or len(unit_results) != len(plan.units):
        return False
    moved = False
    try:
        for i, (u, r) in enumerate(zip(plan.units, unit_results)):
            if session is not None:
                session.advance(i)
            if _moved(u, r):
                moved = True
                continue
            if not (judge_unit(u, r, session.handles, session.given_in[i], session.values)
                    if session is not None else judge_unit(u, r)):
                return False
        if session is not None:
            session.advance(None)  # the log's rest: nothing may follow the last unit's end
            if not session.finished():
                return False
        return DRAWS if moved else True
    except Exception:  # noqa: BLE001 - the child's data is untrusted: anything odd is a failure
        return False


PYTEST_PASS = ("passed", "xfailed")  # and "skipped" (by a mark of the tests') counts neither way


def _final(seen: dict) -> str:
    """A test's outcome from its phases' (as the runner's `final`): any failed phase fails it; a
    setup skipped or xfailed by a mark is that; else its call's outcome (none: it did not run)."""
    if "failed" in seen.values():
        return "failed"
    if seen.get("setup", "passed") != "passed":
        return seen["setup"]
    return seen.get("call", "failed")


def pytest_verdict(plan: Plan, text: str, token: str) -> bool:
    """The pytest runner's result (rewards/_pytest_runner.py): lines each marked with the run's
    token, written as they happened: one per phase reported, then the summary last. No collection
    error, nothing tampered with (at any check), pytest's own exit status a success; each test's
    outcome is the one its report lines give (the summary must agree: a thread of the solution's
    rewriting the runner's records after a report changes only the summary); every test it ran
    reported, each one expected by the plan (a parametrized `test_x[1-2]` is `test_x`,
    `Cls::test_y` is `Cls.test_y`), every expected test among them, each passed (or xfailed or
    skipped by the tests' own mark), and at least one passed. Anything missing, extra or
    unparsable is a failure."""
    import json
    lines = text.split("\n")
    if len(lines) < 2 or lines[-1] or not all(x.startswith(token + " ") for x in lines[:-1]):
        return False
    try:
        records = [json.loads(x[len(token) + 1:]) for x in lines[:-1]]
    except (ValueError, RecursionError):
        return False
    if not all(isinstance(r, dict) for r in records):
        return False
    *reports, data = records
    phases = {}
    for r in reports:
        report = r.get("report")
        if (set(r) != {"report"} or not isinstance(report, list) or len(report) != 3
                or not all(type(x) is str for x in report)):
            return False  # a collection error, a tamper line, or something else: a failure
        phases.setdefault(report[0], {})[report[1]] = report[2]
    if data.get("tampered") is not False or data.get("errors") != 0:
        return False
    tests = {nodeid: _final(seen) for nodeid, seen in phases.items()}
    if data.get("tests") != tests or type(data.get("collected")) is not int:
        return False
    if data["collected"] != len(tests):
        return False
    expected = {CHECK_TEST if name == "check" else name for name in plan.harness_tests}
    seen = set()
    for nodeid, outcome in tests.items():
        if outcome not in PYTEST_PASS + ("skipped",):
            return False
        base = ".".join(nodeid.split("[", 1)[0].split("::")[1:])
        if base not in expected:
            return False
        seen.add(base)
    if seen != expected:
        return False
    if not expected:  # only module-level statements: importing the test file ran them
        return data.get("exit") == 5  # pytest's "no tests collected"
    return data.get("exit") == 0 and any(o in PYTEST_PASS for o in tests.values())


# runs HumanEval's check(candidate) under pytest (rewards/sandbox.py)
CHECK_TEST = "test__gmts_check"
