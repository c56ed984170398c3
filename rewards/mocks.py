"""unittest.mock in TestCases the trainer judges: the mocks and their record live here.

The plan (rewards/testplan.py) turns a test's patches (`@patch('requests.get')`, `with patch(...)
as m`, `patch.object`, `patch.dict`) into steps for the child and a recipe: the mocks the test
makes and how its own statements configure them (`m.return_value.json.return_value = {...}`,
`side_effect=[...]` or an exception), as data. Per run, a Session builds those MagicMocks here
from the recipe. The child replaces each patched target with a stub; every call, attribute read,
operator or iteration the solution applies to a stub (or to a mock one returned) comes here over a
channel as data (_sandbox_child._ask), is performed on the Session's own mock, and its value goes
back as data, as a handle (the value is itself a mock) or as the exception to raise. The Session
logs each request; the judge builds the recipe again, replays the log on its own mocks (the same
operations in the same order give the same record) and runs the test's asserts on them
(`assert_called_once_with`, `call_count`, `call_args_list`): the record is the trainer's, and a
request the solution forges on the channel is only a call it could have made. The recipe's
mutable values are one object each for the run (Session.values), and a side effect function of
the tests' is compiled here from the plan's checked source (Session.function).
"""
import builtins
import copy
import functools
import operator
import os

from . import testplan
from .testplan import unittest_mock


@functools.cache
def mock_api() -> frozenset:
    """Mock's own API: never reachable from the child (a solution calling `reset_mock()` or
    reading `return_value` through a stub would rewrite or bypass the record)."""
    return frozenset(n for n in dir(unittest_mock().MagicMock()) if not n.startswith("_")) | {
        "return_value", "side_effect", "called", "call_count", "call_args", "call_args_list",
        "mock_calls", "method_calls"}

# operators a stub forwards, applied here as Python applies them (a MagicMock's configured method,
# else the default: a plain Mock is true, equal only to itself, and no context manager)
OPERATIONS = {
    "__enter__": lambda o: type(o).__enter__(o), "__exit__": lambda o, *a: type(o).__exit__(o, *a),
    "__getitem__": operator.getitem, "__len__": len, "__bool__": bool, "__eq__": operator.eq,
    "__ne__": operator.ne, "__str__": str, "__int__": int, "__float__": float,
    "__contains__": lambda o, x: x in o, "__lt__": operator.lt, "__gt__": operator.gt,
    "__le__": operator.le, "__ge__": operator.ge, "__fspath__": os.fspath, "__next__": next}
# mocks one run may reach (each attribute of a mock is a new one, ~12 KB and ~0.8 ms here): more
# is a flood, and the run fails
MAX_HANDLES = 1000
MUTABLE = (list, dict, set, bytearray)  # arguments a Mock's record holds by reference
# a chain of child mocks: each call of one is recorded by every ancestor under its dotted name
# (unittest.mock's _increment_mock_call), so names and depth bound what one request keeps here
MAX_NAME = 64  # characters of an attribute name read through a stub (an identifier)
MAX_DEPTH = 8  # mocks between a reached one and the mock its chain started at


def unit_handles(units) -> list:
    """Per unit (its steps), the handles its patch steps give the child."""
    return [[s["handle"] for s in steps if "handle" in s] for steps in units]


class Raise(Exception):
    """An exception the test configures (`side_effect=requests.Timeout("x")`), raised here by the
    mock and raised in the child as the class at `path` (resolved there: the trainer imports no
    module of the solution's world)."""

    def __init__(self, path: str, args: list):
        super().__init__(path)
        self.path, self.data = path, args


def _next_item(items: list):
    """next() on `iter(items)` as the test made it (testplan.NEXT_ITEM): its next item, the list
    holding those still to come."""
    if not items:
        raise StopIteration
    return items.pop(0)


def raiser(path: str):
    """An exception class of the tests' (its import path) as a side effect function raises it:
    Raise, with its arguments as data (the child raises the class at `path`)."""
    class Raised(Raise):
        def __init__(self, *args):
            super().__init__(path, [testplan.encode_input(a) for a in args])
    Raised.__name__ = Raised.__qualname__ = path.rpartition(".")[2]
    return Raised


class Iteration:
    """An iterator over a mock, held here: the child asks for its items one at a time."""

    def __init__(self, index: int):
        self.index = index


class Opaque:
    """An argument the child could not send as data (an object of the solution's): recorded as its
    type's name; it equals nothing but ANY."""

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self):
        return f"<{self.kind} object>"


class Session:
    """One run's mocks, built from the plan's recipe, answering the child's requests (answer) or
    replaying a run's log of them (replay_units, advance)."""

    def __init__(self, recipe: list, units=None):
        """units: per unit of the plan, the handles its patch steps give the child. A handle is
        usable only while its unit runs (the child asks ["unit", i] as each begins, in order) and
        only once given (a patch step's, or one replied in that unit); None: every mock of the
        recipe is given and there are no boundaries (a direct use)."""
        self.handles, self.index, self.log, self.depth, self.sent = [], {}, [], {}, []
        self.iters, self.live, self.iterated = [], set(), {}  # iterators; this unit's; their mock
        self.given_in = []  # per unit begun, the handles the child held in it
        # mutable values the mocks returned in this unit (id -> ref; held): the child keeps one
        # object per ref, so `r.json()['a'] = 2` then `r.json()['a']` reads 2, as under unittest
        self.replied, self.held = {}, []
        # the mutable values the test configures its mocks with, one object each for the run (a
        # value two mocks return, or a module-level one two tests give theirs, is one object, as
        # under unittest): the child's changes come back at each unit's end (begin)
        self.values = []
        self.functions = []  # the tests' side effect functions (testplan.side_effect_function)
        self.pending = iter(())  # replay_units: the log's requests not replayed yet
        for op in recipe:
            if op[0] == "fn":
                _, fid, spec = op
                if fid != len(self.functions):
                    raise ValueError("recipe: function out of order")
                self.functions.append(self.function(spec))
            elif op[0] == "value":
                _, vid, spec = op
                if vid != len(self.values):
                    raise ValueError("recipe: value out of order")
                self.values.append(self.value(spec))
            elif op[0] == "new":
                _, id_, kind, kwargs = op
                made = getattr(unittest_mock(), kind)      # MagicMock, Mock or mock_open
                obj = made(**{k: self.value(v) for k, v in kwargs.items()})
                if id_ != self.handle(obj):
                    raise ValueError(f"recipe: mock {id_} out of order")
            else:  # "set": the test's configuring statement
                _, id_, path, spec = op
                target = self.handles[id_]
                for attr in path[:-1]:
                    target = getattr(target, attr)
                setattr(target, path[-1], self.value(spec))
        self.units = None if units is None else [frozenset(u) for u in units]
        self.unit = -1  # the unit running: none yet
        self.given = set(range(len(self.handles))) if units is None else set()

    def value(self, spec):
        """A recipe value: {"data"}, {"mock": id}, {"exc": [path, args]}, {"list": [...]},
        {"ref": vid} (the run's one object of the recipe's "value" vid)."""
        (tag, inner), = spec.items()
        if tag == "data":  # a value of the run's own: the plan's recipe (cached) stays as it is
            return testplan.decode(copy.deepcopy(inner))
        if tag == "ref":
            return self.values[inner]
        if tag == "fn":
            return self.functions[inner]
        if tag == "exc_class":
            return raiser(inner)
        if tag == "mock":
            return self.handles[inner]
        if tag == "exc":
            return Raise(inner[0], inner[1])
        return [self.value(v) for v in inner]

    def function(self, spec):
        """A side effect function of the tests' (checked by the plan: its cost is linear in the
        arguments it is called with), compiled with only the names it reads and
        testplan.EFFECT_BUILTINS."""
        scope = {"__builtins__": {n: getattr(builtins, n) for n in testplan.EFFECT_BUILTINS}
                 | {testplan.NEXT_ITEM: _next_item}}
        scope.update((k, self.value(v)) for k, v in spec["names"].items())
        exec(compile(spec["source"], "<side effect>", "exec"), scope)  # noqa: S102 - the plan's
        return scope["__gmts_effect"]

    def handle(self, obj, depth=0) -> int:
        if id(obj) not in self.index:
            if depth > MAX_DEPTH:
                raise ValueError("malformed: a chain of mocks too deep")
            if len(self.handles) >= MAX_HANDLES:
                raise ValueError("malformed: more mocks than a run may reach")
            self.depth[len(self.handles)] = depth
            self.index[id(obj)] = len(self.handles)
            self.handles.append(obj)
        return self.index[id(obj)]

    def arg(self, a):
        kind, inner = (a[0], a[-1]) if type(a) is list and len(a) in (2, 3) else (None, None)
        if kind == "d":
            value = testplan.decode(inner)
            if type(value) in MUTABLE:  # by reference, as the child keeps it (begin's updates)
                self.sent.append(value)
            return value
        if kind == "h":
            return self.handles[self.check(inner)]
        if kind == "o" and type(inner) is str:
            return Opaque(inner[:100])
        if kind == "seq" and type(inner) is list:  # a list or tuple holding stubs: [seq, t, items]
            return (tuple if a[1] == "tuple" else list)(self.arg(v) for v in a[2])
        if kind == "map" and type(inner) is list:  # a dict holding stubs: [[key data, value]...]
            return {testplan.decode(k): self.arg(v) for k, v in inner}
        raise ValueError("malformed argument")

    def check(self, h) -> int:
        """A handle the child holds now, or a malformed request."""
        if type(h) is not int or h not in self.given:
            raise ValueError("malformed handle")
        return h

    def reply(self, value, depth=0) -> list:
        if isinstance(value, unittest_mock().NonCallableMock):
            h = self.handle(value, depth)
            self.given.add(h)
            return ["h", h]
        try:
            data = ["d", testplan.encode_input(value)]
            if type(value) in MUTABLE:  # one object, as the test configured it: its ref
                if id(value) not in self.replied:
                    self.replied[id(value)] = len(self.replied)
                    self.held.append(value)  # alive: its id stays its own
                    self.sent.append(value)  # changed by the child: the unit's end says how
                data.append(self.replied[id(value)])
            return data
        except (testplan.Unconvertible, RecursionError):
            # a list, tuple or dict holding mocks (`m.return_value = [a, b]`: os.scandir's entries)
            if type(value) in (list, tuple) and any(isinstance(v, (
                    unittest_mock().NonCallableMock, list, tuple, dict)) for v in value):
                return ["seq", type(value).__name__, [self.reply(v, depth) for v in value]]
            if type(value) is dict:
                try:
                    keys = [testplan.encode_input(k) for k in value]
                except (testplan.Unconvertible, RecursionError):
                    keys = None
                if keys is not None:
                    return ["map", [[k, self.reply(v, depth)]
                                    for k, v in zip(keys, value.values())]]
            return ["raise", "builtins.TypeError", [(f"a mocked value of type "
                                                    f"{type(value).__name__}")]]

    def perform(self, request):
        """The request on this session's mocks: its value, or the exception it raised."""
        kind, h = request[0], request[1]
        if kind == "unit":
            return self.begin(h, request[2] if len(request) == 3 else None)
        if kind == "next":  # one item of an iteration this unit began (lazy: mock_open's lines)
            if type(h) is not int or h not in self.live:
                raise ValueError("malformed iterator")
            return next(self.iters[h])
        obj = self.handles[self.check(h)]
        if kind == "get":
            name = request[2]
            if type(name) is not str or not name.isidentifier() or len(name) > MAX_NAME:
                raise ValueError("malformed attribute name")
            if name.startswith("_") or name in mock_api():
                raise AttributeError(name)
            return getattr(obj, name)
        if kind == "call":
            args, kwargs = request[2], request[3]
            if type(args) is not list or type(kwargs) is not dict:
                raise ValueError("malformed call")
            return obj(*[self.arg(a) for a in args], **{k: self.arg(v) for k, v in kwargs.items()})
        if kind == "op":
            name, args = request[2], request[3]
            if name not in OPERATIONS or type(args) is not list:
                raise ValueError("malformed operator")
            return OPERATIONS[name](obj, *[self.arg(a) for a in args])
        if kind == "iter":
            if len(self.iters) >= MAX_HANDLES:
                raise ValueError("malformed: more iterations than a run may make")
            self.iterated[len(self.iters)] = h
            self.iters.append(iter(obj))
            self.live.add(len(self.iters) - 1)
            return Iteration(len(self.iters) - 1)
        raise ValueError("malformed request")

    def begin(self, i, now) -> None:
        """Unit i begins (the next one, once; i = the number of units: they are over): the
        earlier units' handles are retired, its patch steps' handles given. now: the mutable
        arguments the ended unit sent, as they are now (changed in place here: the mocks' record
        holds them by reference, as unittest's does)."""
        if self.units is None or type(i) is not int or i != self.unit + 1 or i > len(
                self.units) or type(now) is not list or len(now) != len(self.sent):
            raise ValueError("malformed unit")
        for held, data in zip(self.sent, now):
            value = testplan.decode(data) if data is not None else None
            if type(value) is not type(held):
                raise ValueError("malformed unit: an argument changed type")
            if type(held) in (list, bytearray):
                held[:] = value
            else:
                held.clear()
                held.update(value)
        self.sent, self.live, self.replied, self.held = [], set(), {}, []
        self.unit, self.given = i, set(self.units[i]) if i < len(self.units) else set()
        self.given_in.append(self.given)

    def finished(self) -> bool:
        """Every unit began and ended (a run whose boundaries the child did not give in full
        fails)."""
        return self.units is None or self.unit == len(self.units)

    def answer(self, request) -> list:
        """The reply to one request of the child's (parsed JSON); logged. A malformed request
        raises ValueError (the run fails)."""
        if type(request) is not list or len(request) < 2:
            raise ValueError("malformed request")
        self.log.append(request)
        try:
            value = self.perform(request)
        except ValueError as e:
            if str(e).startswith("malformed"):
                raise
            return self.raised(e)
        except Raise as e:
            return ["raise", e.path, e.data]
        except Exception as e:  # noqa: BLE001 - the mock raised it (StopIteration, the test's)
            return self.raised(e)
        if isinstance(value, Iteration):
            return ["it", value.index]
        # the mock the value came from (an item: the iterated mock's), one deeper in its chain
        source = self.iterated.get(request[1]) if request[0] == "next" else request[1]
        return self.reply(value, self.depth.get(source, 0) + 1)

    @staticmethod
    def raised(e) -> list:
        kind = type(e)
        name = kind.__name__ if kind.__module__ == "builtins" else "RuntimeError"
        return ["raise", f"builtins.{name}", [str(e)[:4096]]]

    def replay_units(self, log) -> None:
        """The run's requests again, in order, on these mocks (their record is then the run's),
        unit by unit (advance): each unit's checks read the mocks and the values as they were
        when it ended, as unittest's asserts do, not as later units leave them."""
        if not isinstance(log, list):
            raise TypeError("malformed log")
        self.pending = iter(log)

    def advance(self, i: int) -> None:
        """Replay the log's requests until unit i has ended (the child began unit i + 1); i =
        None: the rest of the log."""
        while i is None or self.unit <= i:
            request = next(self.pending, None)
            if request is None:
                if i is None:
                    return
                raise ValueError("malformed log: a unit never ended")
            self.answer(request)
