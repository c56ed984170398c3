"""The process that runs untrusted code for rewards/code.py. Started as `python -I
_sandbox_child.py`.

A standalone script (no imports from this repo): it runs in a fresh interpreter, inside bubblewrap
when the machine has it (rewards/sandbox.py). The spec arrives as JSON on stdin; the report leaves
as JSON lines on the fd it names. This process only COMPUTES: it never sees an expected output of a
trusted test, and the parent judges what it reports. Whatever the solution does to this process
(replacing builtins, walking the stack, writing to the report fd) can change the report, but a
report only passes if its values are the right ones.

Work, in order:
  1. privileges: bwrap as root -> drop to the run's own uid, enter a fresh user namespace that
     cannot make another one, drop every capability; fallback (no bwrap) -> today's unshare(NET|PID)
     + fork + uid drop.
  2. rlimits (memory, CPU, file size, fds, processes, no core dumps).
  3. `units`: lists of steps ({"run": stmt} or {"eval": expr}, with "iter": materialise a returned
     iterator, "attrs": attributes to read while the value is an object of the solution's) evaluated
     in a copy of the solution's namespace ({"draws": ...}: the tests' seeded random state, checked
     and given: sync_draws), every step whatever an earlier one raised; each eval's
     value goes back as plain data (exact types only), or the exception with its MRO. `cases`: the
     solution runs as a script once per stdin; its stdout goes back. Report line: {"units": [...]}
     or {"cases": [...]}.
  3a. before 3, `harness` (untrusted tests that could not be turned into pairs): the installed
     pytest runs them in a process of its own (run_pytest, rewards/_pytest_runner.py); its result
     goes to a file of the parent's.
"""
import _thread
import builtins
import collections
import ctypes
import enum
import functools
import io
import json
import math
import os
import resource
import signal
import stat
import sys
import time
import traceback

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_KEEPCAPS, PR_CAPBSET_DROP = 1, 4, 8, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 38, 47
CAP_DAC_READ_SEARCH, CAP_LAST = 2, 63
MAX_DEPTH, MAX_ITEMS, MAX_MESSAGE = 64, 1_000_000, 1 << 16
_libc = ctypes.CDLL(None, use_errno=True)
_Enum = enum.Enum
# the builtins as they are before the solution runs (it may replace them): pairs in a tuple, which
# nothing in Python can change; work() takes them into a local before the solution is imported and
# hands them down, so rebinding this name changes nothing either
_BUILTIN_ITEMS = tuple(vars(builtins).items())
_STAT, _S_ISREG, _S_ISDIR = os.stat, stat.S_ISREG, stat.S_ISDIR  # C functions: kept as they are


def _exists(path) -> bool:
    try:
        _STAT(path)
    except (OSError, ValueError):
        return False
    return True


def _is(test, path) -> bool:
    try:
        return test(_STAT(path).st_mode)
    except (OSError, ValueError):
        return False


def _join(first, *rest) -> str:
    """posixpath.join of str paths, by syntax alone (no function the solution could replace)."""
    out = _FSPATH(first)
    for part in rest:
        part = _FSPATH(part)
        if part[:1] == "/" or not out:
            out = part
        elif out[-1:] == "/":
            out += part
        else:
            out += "/" + part
    return out


_FSPATH = os.fspath
# os.path's questions about files, asked by the tests (`os.path.exists(p)`), answered by os.stat as
# it was before the solution ran (a replaced os.stat or os.path.exists changes nothing here), and
# its join of a path of the child's (`os.path.join(tmp_path, 'a.txt')`)
_FILE_QUESTIONS = (("exists", _exists), ("isfile", lambda p: _is(_S_ISREG, p)),
                   ("isdir", lambda p: _is(_S_ISDIR, p)),
                   ("getsize", lambda p: _STAT(p).st_size), ("join", _join))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def set_caps(caps: int):
    """Effective = permitted = inheritable = `caps` (a bit mask of capability numbers < 32)."""
    data = (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3 uses two 32-bit words
    data[0].effective = data[0].permitted = data[0].inheritable = caps
    if _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def become(uid: int):
    """Root -> `uid` (group too, no supplementary groups). Dumpable again afterwards, so that this
    process may write its own /proc/self/uid_map (a uid change makes /proc/self root-owned)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def enter_user_namespace(uid: int):
    """A user namespace of our own, mapping only ourselves (to 65534 inside), in which no further
    user namespace can be created (user.max_user_namespaces = 0: bwrap's --disable-userns). Then
    every capability that creating it gave us is dropped, bounding set included."""
    if _libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER) failed")
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"65534 {uid} 1"),
                       ("/proc/self/gid_map", f"65534 {uid} 1"),
                       ("/proc/sys/user/max_user_namespaces", "0")):
        with open(path, "w") as f:
            f.write(text)
    for cap in range(CAP_LAST + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    set_caps(0)


def drop_fallback(uid: int, keep_dac: bool):
    """Without bwrap, as root: become the run's uid, keeping CAP_DAC_READ_SEARCH only when the
    interpreter lives where other users cannot read it (e.g. pyenv under /root); the parent decides
    and says so in sandbox_info()."""
    if not keep_dac:
        become(uid)
        return
    _libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    become(uid)
    set_caps(1 << CAP_DAC_READ_SEARCH)
    # PR_CAP_AMBIENT_RAISE: a subprocess keeps it
    _libc.prctl(PR_CAP_AMBIENT, 2, CAP_DAC_READ_SEARCH, 0, 0)


def set_limits(limits):
    mb = 1 << 20
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    # stdin/stdout cases: this process writes the outputs into the parent's files (each case process
    # gets file_mb again in _case_process)
    fsize = max([limits["file_mb"] * mb] + limits.get("out_caps", []))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # stdin/stdout cases: this process forks one solution process per case and only waits for it
    procs = limits["max_procs"] + (1 if limits.get("cases") else 0)
    resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))


def block_sockets():
    """Fallback when no network namespace could be made. Weak: ctypes or a subprocess can get around
    it."""
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the sandbox")

    class NoNetSocket(socket.socket):
        def __init__(self, family=-1, *args, **kwargs):
            if family in (socket.AF_INET, socket.AF_INET6, -1):
                refuse()
            super().__init__(family, *args, **kwargs)

    socket.socket = NoNetSocket
    socket.create_connection = socket.getaddrinfo = socket.socketpair = refuse


# ---------------------------------------------------------------- results as plain data

_SCALARS = (type(None), bool, int, str)


def encode(value, depth=0, budget=None):
    """`value` as JSON, exact types only (no subclass, so no custom __eq__ survives). Tuples, sets,
    dicts with any keys, bytes, complex, non-finite floats and big ints (in hex: no 4,300-digit
    limit, linear both ways) are tagged so the parent rebuilds exactly the same value."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise ValueError("result too deep or too large")
    kind = type(value)
    if kind is int and value.bit_length() > 63:
        return {"int": hex(value)}
    if kind in _SCALARS:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        # a flat list of small ints or strs goes as it is (at C speed)
        kinds = set(map(type, value))
        if kinds in ({int},
                     {str}) and (kinds == {str}
                                 or (-(1 << 62) < min(value) and max(value) < 1 << 62)):
            budget[0] -= len(value)
            if budget[0] < 0:
                raise ValueError("result too large")
            return value
        return [encode(v, depth + 1, budget) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(v, depth + 1, budget) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k,
                         v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [encode(value.real), encode(value.imag)]}
    stdlib = _stdlib_value(value, kind, depth, budget)
    if stdlib is not None:
        return stdlib
    numbers = _number_value(value, kind)
    if numbers is not None:
        return numbers
    other = _other_value(value, kind, depth, budget)
    if other is not None:
        return other
    if kind in _VIEWS:  # d.keys(), d.values(), d.items(): their items, and which view
        return {_VIEWS[kind]: [encode(v, depth + 1, budget) for v in value]}
    if isinstance(value, _Enum):  # a member: its class's name, its name and its value
        name, cls = value.__dict__.get("_name_"), _qualname(kind)
        return {"enum": [cls, name if type(name) is str else "?",
                         encode(value.__dict__.get("_value_"), depth + 1, budget),
                         isinstance(value, (int, str))]}  # IntEnum, StrEnum: equal to the value
    item = getattr(value, "item", None)  # numpy scalars: np.int64(5), its dtype and its value
    if (type(value).__module__ == "numpy" and callable(item)
            and type(item()) in (bool, int, float, complex, str)):
        dtype = getattr(getattr(value, "dtype", None), "str", None)
        if type(dtype) is not str:
            return None
        return {"npscalar": [dtype, encode(item(), depth + 1, budget)]}
    base = _subclassed(value, kind)
    if base is not None:  # `class Stack(list)`: its data, as its base holds it, and its name
        return {"sub": [_qualname(kind), encode(base, depth + 1, budget)]}
    raise TypeError(f"result of type {kind.__name__} is not plain data")


def _qualname(kind) -> str:
    """The class's own qualified name, read from its slot (a metaclass's `__qualname__` does not
    run)."""
    name = _TYPE_QUALNAME(kind)
    return name if type(name) is str else "?"


_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__


# collections' wrappers, and the attribute holding what they wrap
_WRAPPERS = {collections.UserList: "data", collections.UserDict: "data",
             collections.UserString: "data", collections.ChainMap: "maps"}


def _wrapper_copy(kind, value):
    """A UserList (UserDict, UserString, ChainMap) of its own holding what `value` wraps."""
    made = object.__new__(kind)
    attr = _WRAPPERS[kind]
    object.__getattribute__(made, "__dict__")[attr] = object.__getattribute__(
        value, "__dict__").get(attr)
    return made


def _namedtuple_copy(value, base):
    fields = base.__dict__.get("_fields")
    if type(fields) is not tuple or len(fields) != tuple.__len__(value):
        return None
    copied = tuple.__getitem__(value, slice(None))  # a plain tuple of the items
    return tuple.__new__(base, copied)


# the types a class of the solution's may subclass whose data crosses as the base's, each with how
# to copy an instance's data by the base's own C code (it reads the object's storage: no method the
# subclass defines runs, so an `__eq__`, `__iter__` or `__getitem__` of its own never crosses)
_BASE_COPIES = (
    (int, int.__int__), (float, float.__float__),
    (complex, lambda v: complex(complex.real.__get__(v), complex.imag.__get__(v))),
    (str, str.__str__), (bytes, lambda v: bytes.__getitem__(v, slice(None))),
    (bytearray, bytearray.copy), (list, list.copy),
    (tuple, lambda v: tuple.__getitem__(v, slice(None))), (set, set.copy),
    (frozenset, frozenset.copy),
    (collections.Counter, lambda v: collections.Counter(dict.copy(v))),
    (collections.OrderedDict, lambda v: collections.OrderedDict(dict.items(v))),
    (collections.defaultdict, lambda v: collections.defaultdict(
        collections.defaultdict.default_factory.__get__(v), dict.items(v))),
    (collections.deque, lambda v: collections.deque(
        collections.deque.__iter__(v), collections.deque.maxlen.__get__(v))),
    (dict, dict.copy),
    *((kind, functools.partial(_wrapper_copy, kind)) for kind in _WRAPPERS))
_BASE_TYPES = {kind: copy for kind, copy in _BASE_COPIES}


def _subclassed(value, kind):
    """A subclass's value (`class Stack(list)`, `class Money(float)`, a namedtuple with methods
    added) as an object of its first plain base in the MRO: that base's data, copied without
    running the subclass's code; None where no base is plain data."""
    for base in kind.__mro__[1:]:
        if base.__dict__.get("_fields") is not None and base.__bases__ == (tuple,):
            return _namedtuple_copy(value, base)
        copy = _BASE_TYPES.get(base)
        if copy is not None:
            copied = copy(value)
            return copied if type(copied) is base else None
    return None


_VIEWS = {type({}.keys()): "dict_keys", type({}.values()): "dict_values",
          type({}.items()): "dict_items"}


def _number_value(value, kind):
    """fractions.Fraction, decimal.Decimal, sympy's Integer and Rational, and bytearray, exactly.
    The modules are not imported here (their import would cost every run): a value of theirs
    exists only where the solution imported them. Whatever the class's parts say, they cross as
    plain ints and a str, and the trainer builds its own value from them."""
    if kind is bytearray:
        return {"bytearray": value.hex()}
    name = kind.__dict__.get("__module__"), getattr(kind, "__qualname__", None)
    if name == ("fractions", "Fraction"):
        num, den = value.numerator, value.denominator
        if type(num) is int and type(den) is int:
            return {"Fraction": [hex(num), hex(den)]}
    if name in (("decimal", "Decimal"), ("_decimal", "Decimal"), ("_pydecimal", "Decimal")):
        text = str(value)
        if type(text) is str:
            return {"Decimal": text}
    if name[0] == "sympy.core.numbers" and name[1] in _SYMPY_RATIONALS:  # binomial(5, 2)
        num, den = value.p, value.q
        if type(num) is int and type(den) is int and den > 0:
            return {"sympy": [hex(num), hex(den)]}
    return None


# sympy's exact numbers: Integer (and its singletons 0, 1, -1) and Rational (and 1/2)
_SYMPY_RATIONALS = ("Integer", "Zero", "One", "NegativeOne", "Rational", "Half")


_DATETIMES = ("date", "datetime", "time", "timedelta")
_PATHS = ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
_ARRAY_KINDS = "biufcU"  # numpy dtype kinds whose tolist() is plain data


def _other_value(value, kind, depth, budget):
    """range; datetime's date, datetime, time and timedelta; pathlib's paths (their text); a numpy
    array of numbers, bools or strs, or of objects that are plain data (its dtype, shape and
    items). Whatever the class says, they cross as plain data the trainer rebuilds its own value
    from (so a class of the solution's posing as one of these gives only what a real one could).
    None of these modules is imported here."""
    if kind is range:
        return {"range": [encode(value.start), encode(value.stop), encode(value.step)]}
    module, name = getattr(kind, "__module__", None), getattr(kind, "__qualname__", None)
    if type(module) is not str or type(name) is not str:
        return None
    if module in ("pathlib", "pathlib._local") and name in _PATHS:  # its text, as os.fspath
        text = value.__fspath__()
        return {"path": [name, text]} if type(text) is str else None
    if module == "datetime" and name in _DATETIMES:
        if name == "timedelta":
            parts = [value.days, value.seconds, value.microseconds]
            return {"timedelta": parts} if all(type(p) is int for p in parts) else None
        text = value.isoformat()  # an aware value with its UTC offset
        return {name: text} if type(text) is str else None
    if module == "pandas" or module.startswith("pandas."):
        return _pandas_value(value, name, depth, budget)
    sub = None
    if not module.startswith("numpy"):  # a subclass of the solution's: its data, as ndarray's
        base = next((b for b in kind.__mro__[1:] if getattr(b, "__module__", None) == "numpy"
                     and getattr(b, "__qualname__", None) == "ndarray"), None)
        if base is not None:
            sub, value, module, name = name, base.view(value, base), "numpy", "ndarray"
    if module == "numpy" and name == "ndarray":
        dtype = value.dtype
        # an object array: its items as they are, each plain data (a solution's object: an error)
        if dtype.kind not in _ARRAY_KINDS + "O" or type(dtype.str) is not str:
            return None
        budget[0] -= value.size
        if budget[0] < 0:
            raise ValueError("result too large")
        return {"ndarray": [dtype.str, [int(n) for n in value.shape],
                            encode(value.tolist(), depth + 1, budget), *([sub] if sub else [])]}
    return None


# pandas' extension dtypes whose items are plain data (None for a missing one)
_PD_EXTENSIONS = ("Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype", "UInt8Dtype",
                  "UInt16Dtype", "UInt32Dtype", "UInt64Dtype", "Float32Dtype", "Float64Dtype",
                  "BooleanDtype", "StringDtype")


def _pandas_value(value, name, depth, budget):
    """A pandas DataFrame, Series or Index (RangeIndex, MultiIndex...) of plain values: each
    column's dtype and data (_pandas_array), the index, the names; the trainer rebuilds it with its
    own pandas. None for any other pandas object (a Timestamp, a GroupBy, a PeriodIndex)."""
    if name == "RangeIndex":
        parts = [value.start, value.stop, value.step]
        return {"pdrange": [*parts, encode(value.name, depth + 1, budget)]} if all(
            type(p) is int for p in parts) else None
    if name in ("Index", "DatetimeIndex", "TimedeltaIndex"):
        array = _pandas_array(value, depth, budget)
        freq = getattr(value, "freqstr", None) if name != "Index" else None  # "D", "h"
        return None if array is None or type(freq) not in (str, type(None)) else {
            "pdindex": [array, encode(value.name, depth + 1, budget), freq]}
    if name == "MultiIndex":  # each level an Index, the codes into it, the names
        levels = [_pandas_value(v, _qualname(type(v)), depth + 1, budget) for v in value.levels]
        return None if None in levels else {"pdmulti": [
            levels, [encode(c, depth + 1, budget) for c in value.codes],
            [encode(n, depth + 1, budget) for n in value.names]]}
    if name not in ("DataFrame", "Series"):
        return None
    index = value.index
    index = _pandas_value(index, _qualname(type(index)), depth + 1, budget)
    if name == "Series":
        array = _pandas_array(value, depth, budget)
        return None if None in (array, index) else {
            "series": [array, index, encode(value.name, depth + 1, budget)]}
    columns = value.columns
    columns = _pandas_value(columns, _qualname(type(columns)), depth + 1, budget)
    arrays = [_pandas_array(value.iloc[:, i], depth, budget) for i in range(value.shape[1])]
    return None if columns is None or index is None or None in arrays else {
        "frame": [columns, index, arrays]}


def _pandas_array(values, depth, budget):
    """The data of a Series or an Index: {"np": array} for numpy's numbers, bools and objects (as
    an array crosses), {"np64": [dtype, int64 array]} for its dates and durations, {"cat":
    [categories, codes, ordered]}, {"ext": [dtype name, items]} for pandas' nullable numbers and
    strings (None where missing). None for any other dtype (time zones, periods, intervals)."""
    dtype = values.dtype
    kind = type(dtype)
    module, name = getattr(kind, "__module__", ""), _qualname(kind)
    if type(module) is str and module.startswith("numpy"):
        if dtype.kind in "biufcO":
            return {"np": encode(values.to_numpy(), depth + 1, budget)}
        if dtype.kind in "Mm":
            return {"np64": [dtype.str, encode(values.to_numpy().view("i8"), depth + 1, budget)]}
        return None
    if name == "CategoricalDtype":
        codes = values.array
        categories = _pandas_value(codes.categories, _qualname(type(codes.categories)),
                                   depth + 1, budget)
        return None if categories is None else {
            "cat": [categories, encode(codes.codes, depth + 1, budget), codes.ordered is True]}
    if name in _PD_EXTENSIONS:
        items = values.to_numpy(dtype=object, na_value=None)
        return {"ext": [str(dtype), encode(items, depth + 1, budget)]}
    return None


def decode_input(value):
    """An input from the trainer (testplan.encode_input: the tagged JSON of encode) back to its
    value."""
    if type(value) is list:
        return [decode_input(v) for v in value] if any(type(v) in (list, dict)
                                                       for v in value) else value
    if type(value) is not dict:
        return value
    (tag, inner), = value.items()
    if tag == "int":
        return int(inner, 16)
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set,
                "frozenset": frozenset}[tag](decode_input(v) for v in inner)
    if tag == "dict":
        return {decode_input(k): decode_input(v) for k, v in inner}
    if tag == "float":
        return float(inner)
    if tag == "bytes":
        return bytes.fromhex(inner)
    if tag == "complex":
        return complex(decode_input(inner[0]), decode_input(inner[1]))
    raise ValueError(f"unknown input tag {tag!r}")


_COLLECTIONS = (collections.Counter, collections.OrderedDict, collections.defaultdict,
                collections.deque)
_FACTORIES = {getattr(builtins, n): n
              for n in ("list", "int", "set", "dict", "str", "float", "tuple", "bool")}


def _stdlib_value(value, kind, depth, budget):
    """The stdlib's value types, as what they are (the classes as they were before the solution
    ran): Counter, OrderedDict, defaultdict (its factory when it is a builtin type), deque, and a
    namedtuple (its class name and fields; the parent makes a namedtuple of its own: no method of
    the solution's class crosses)."""
    def pairs():
        return [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k,
                v in value.items()]
    if kind is _COLLECTIONS[0] or kind is _COLLECTIONS[1]:
        return {kind.__name__: pairs()}
    if kind is _COLLECTIONS[2]:
        factory = value.default_factory
        return {"defaultdict": [_FACTORIES.get(factory) if factory is not None else None, pairs()]}
    if kind is _COLLECTIONS[3]:
        return {"deque": [[encode(v, depth + 1, budget) for v in value], value.maxlen]}
    if kind in _WRAPPERS:  # UserList, UserDict, UserString: their data; ChainMap: its maps
        data = object.__getattribute__(value, "__dict__").get(_WRAPPERS[kind])
        return {kind.__name__: encode(data, depth + 1, budget)}
    fields = kind.__dict__.get("_fields")
    if (kind.__bases__ == (tuple,) and type(fields) is tuple and len(fields) == len(value) <= 255
            and all(type(f) is str for f in fields)):
        return {"namedtuple": [kind.__name__ if type(kind.__name__) is str else "?", list(fields),
                               [encode(v, depth + 1, budget) for v in value]]}
    return None


_PLAIN = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)
_ITERATORS = (type(iter(())), type(iter([])), type(x for x in ()), map, filter, zip, reversed,
              enumerate, range,
              type({}.keys()), type({}.values()), type({}.items()))


def materialise(value):
    """A step marked "iter" (the test passes the result to list(), sorted(), sum()...): a generator
    or other builtin iterator, or an iterable object of the solution's (a linked list with
    `__iter__`), becomes the list of its items, iterated as the builtin would; plain data stays as
    it is, and so do mappings (dict() reads their keys) and whatever cannot be iterated: left to
    encode."""
    kind = type(value)
    iterable = kind not in _PLAIN and not isinstance(value, _COLLECTIONS) and _has(kind, "__iter__")
    if kind in _ITERATORS or (iterable and not _has(kind, "keys")):
        items = []
        for item in value:
            items.append(item)
            if len(items) > MAX_ITEMS:
                raise ValueError("iterator too long")
        return items
    return value


def _has(kind, name) -> bool:
    """The class (not the instance: no __getattr__ of the solution's runs) defines `name`."""
    return any(name in vars(k) for k in kind.__mro__ if type(vars(k)) is type(vars(object)))


def _crossing(value):
    """(encode(value),) where the value crosses as data; None where it cannot (no data, or too
    large to cross: what the test reads of it is read here)."""
    try:
        return (encode(value),)
    except (TypeError, ValueError):
        return None


def read_attrs(value, attrs):
    """Read `attrs` in turn while the value cannot cross as data (an object of the solution's own,
    a linked-list node): from data (a subclass of a plain type, whose base's data encode sends; a
    numpy array, a DataFrame) the parent reads them. Returns the value, the attributes read, and
    its encoding where it stopped at data (_crossing; None otherwise)."""
    applied, sent = 0, None
    for attr in attrs:
        if isinstance(value, _PLAIN):
            break
        sent = _crossing(value)
        if sent is not None:
            break
        value = getattr(value, attr)
        applied += 1
    return value, applied, sent


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not numpy's C type
_TYPE_FLAGS, _TYPE_MRO = type.__dict__["__flags__"].__get__, type.__dict__["__mro__"].__get__
_TYPE_MODULE = type.__dict__["__module__"].__get__


def _to_data(value, name):
    """`value.tolist()` or `.item()`: numpy's own C method for an array or a numpy scalar (an
    ndarray subclass's `tolist` does not run), the value's method for anything else."""
    for base in _TYPE_MRO(type(value)):
        if not _TYPE_FLAGS(base) & _HEAPTYPE and _TYPE_MODULE(base) == "numpy" and (
                _qualname(base) in ("ndarray", "generic")):
            return getattr(base, name)(value)
    return getattr(value, name)()


_OP_TYPES = {t.__name__: t for t in (int, float, str, bool, complex)}


def _op_value(data):
    """An argument of a method_step's call: a builtin type by name (`astype(float)`), or data."""
    if type(data) is dict and set(data) == {"type"}:
        return _OP_TYPES[data["type"]]
    return decode_input(data)


def apply_ops(value, ops, data_from=0):
    """A method_step's (path_step's) attribute reads, calls and items, applied in turn while the
    value cannot cross as data (an object of the solution's: as pytest applies them) or a later
    call is one the trainer does not make on data (before `data_from`); from data (an array, a
    DataFrame, a subclass of a plain type) the trainer applies the rest. Returns as read_attrs."""
    applied, sent = 0, None
    for op in ops:
        if applied >= data_from:
            sent = _crossing(value)
            if sent is not None:
                break  # data: the rest is the trainer's
        if type(op) is str:
            value = getattr(value, op)
        elif op[0] == "[]":
            value = value[decode_input(op[1])]
        elif op[0] == "[:]":
            value = value[slice(*(None if p is None else decode_input(p) for p in op[1:]))]
        else:
            _, name, args, kwargs = op
            value = getattr(value, name)(*map(_op_value, args),
                                         **{k: _op_value(v) for k, v in kwargs.items()})
        applied += 1
    return value, applied, sent


# a compare step's comparison where an operand cannot cross: Python's own operator, compiled from
# this source in the step's namespace (its `bool` the builtin as it was before the solution ran)
_COMPARISONS = tuple((op, f"__gmts_builtins['bool'](__gmts_operands[0] {op} __gmts_operands[1])")
                     for op in ("==", "!=", "<", "<=", ">", ">=", "in", "not in"))


def compare(left, step, ns, dumps):
    """A compare step (`assert p == make(1, 2)`): both operands as data where both cross, each
    written out when evaluated (the right operand's call cannot change the left's; the trainer
    compares them); else the comparison made here, on the answer's objects, as pytest makes it
    (their `__eq__` decides). Returns the result's JSON."""
    first = _crossing(left)
    first = None if first is None else dumps(first[0])
    right = eval(step["right"], ns)
    second = _crossing(right)
    if first is not None and second is not None:
        return '{"ok": ' + first + ', "right": ' + dumps(second[0]) + "}"
    ns["__gmts_operands"] = (left, right)
    return dumps({"compared": eval(dict(_COMPARISONS)[step["compare"]], ns)})


def raised(e, namespace, frozen=_BUILTIN_ITEMS, classes=(), names=()):
    """The raised exception as data: its class's name, message, and each class of its MRO with its
    origin, decided against the builtins as they were before the solution ran: "builtins" (that very
    builtin class) or "other"; with `names` (of the solution's module, as the tests name its
    classes), "names": [name, whether it is the raised class itself] of those bound now to a class
    of the MRO; with `classes` ((path, class) resolved before the solution ran), "paths": those
    whose class is in the MRO (by identity, the MRO Python's issubclass walks: a metaclass's
    `__mro__` is not read)."""
    builtin = dict(frozen)
    kind = builtin["type"]
    whole = kind.__dict__["__mro__"].__get__(kind(e))  # the class's own MRO slot
    mro = []
    for cls in whole[:32]:
        name = getattr(cls, "__name__", "?")
        name = name if type(name) is str else "?"
        mro.append([name, "builtins" if builtin.get(name) is cls else "other"])
    text = builtin["str"]
    try:  # the builtins as they were: a solution rebinding builtins.str forges nothing
        message = text(e)
        message = message if kind(message) is text and len(message) <= MAX_MESSAGE else None
    except BaseException:  # noqa: BLE001 - a __str__ that raises: no message
        message = None
    out = {"exc": mro[0][0] if mro else "?", "msg": message, "mro": mro}
    try:  # PEP 678's notes, which pytest's `match` reads after the message: a list of str or none
        notes, size = builtin["getattr"](e, "__notes__", None), builtin["len"]
        if kind(notes) is builtin["list"] and size(notes) <= MAX_DEPTH and builtin["all"](
                kind(n) is text for n in notes) and builtin["sum"](
                    size(n) for n in notes) <= MAX_MESSAGE:
            out["notes"] = builtin["list"](notes)
        elif notes is not None:
            out["notes"] = None  # unreadable: a match over it fails
    except BaseException:  # noqa: BLE001 - a __notes__ property that raises: unreadable
        out["notes"] = None
    if classes:
        out["paths"] = [path for path, k in classes if any(c is k for c in whole)]
    if names:
        bound = [(n, namespace.get(n)) for n in names[:64] if type(n) is text]
        out["names"] = [[n, k is whole[0]] for n, k in bound if any(c is k for c in whole)]
    return out


def exception_parts(e, names, frozen=_BUILTIN_ITEMS) -> dict:
    """The attributes of a caught exception the test reads (`excinfo.value.args`, `.errno`,
    `cm.exception.code`; "__repr__": its repr), each read now and encoded as data: {name: {"ok":
    value}}, or {name: {}} where reading it raised or gave what is not data."""
    builtin = dict(frozen)
    out = {}
    for name in names[:64]:
        try:
            value = builtin["repr"](e) if name == "__repr__" else builtin["getattr"](e, name)
            out[name] = {"ok": encode(value)}
        except BaseException:  # noqa: BLE001 - a property that raises: that part fails
            out[name] = {}
    return out


def resolve_classes(paths) -> tuple:
    """((path, class), ...) for the exception classes the tests name at `paths` of modules they
    import, resolved now, before the solution is imported (None: not there, or not a subclass of
    BaseException, as an assertRaises of it never passes)."""
    out = []
    for path in paths:
        try:
            cls = _resolve(path)
        except Exception:  # noqa: BLE001 - a module that fails to import: no class
            cls = None
        ok = isinstance(cls, type) and issubclass(cls, BaseException)
        out.append((path, cls if ok else None))
    return tuple(out)


def resolve_stdlib(paths) -> tuple:
    """((path, class), ...) for the standard library's classes the tests pass to the answer's
    values (`types.GeneratorType`, `collections.abc.Iterator`: testplan.stdlib_class), resolved
    now, before the solution is imported; a path that is not a class is left out."""
    out = []
    for path in paths:
        try:
            cls = _resolve(path)
        except Exception:  # noqa: BLE001, S112 - not there: the step naming it raises KeyError
            continue
        if isinstance(cls, type):
            out.append((path, cls))
    return tuple(out)


# ---------------------------------------------------------------- the trainer's mocks

# the channel to the trainer's mocks (rewards/mocks.py): [fd this process writes requests to, fd
# it reads replies from]; the functions it uses are taken before the solution runs (a patch of
# os.write or json.dumps, the test's or the solution's, does not reach them; the units' results
# and the report are written with them too)
_mock_fds = None
_CHANNEL = (os.write, os.read, json.dumps, json.loads, type, str, isinstance, BaseException)
_inbox = bytearray()
_LOCK = _thread.allocate_lock()  # one request and its reply at a time (threads of the solution's)
_MUTABLE = (list, dict, set, bytearray)
_sent = []  # the mutable arguments sent in this unit (by reference: see _unit_sender)
_replied = {}  # ref -> the mutable value a mock returned in this unit (_reply_data)


def _send(request, reply=True):
    """One request to the trainer, and its reply (a line): blocks until it comes."""
    with _LOCK:
        return _exchange(request, reply)


def _exchange(request, reply, fds=None, channel=_CHANNEL, inbox=_inbox):
    write, read, dumps, loads = channel[:4]
    fds = fds or _mock_fds
    data = (dumps(request) + "\n").encode()
    while data:
        data = data[write(fds[0], data):]
    if not reply:
        return None
    while b"\n" not in inbox:
        chunk = read(fds[1], 1 << 16)
        if not chunk:
            raise RuntimeError("the trainer's mocks are gone")
        inbox.extend(chunk)
    end = inbox.index(b"\n")
    line = bytes(inbox[:end])
    del inbox[:end + 1]
    return loads(line)


def _unit_sender(fds, lock=_LOCK, exchange=_exchange, sent=_sent, replied=_replied):
    """The function telling the trainer that unit i begins (its earlier units' mocks are retired
    there, this one's given; i = the number of units: they are over), made before the solution
    runs: its references are its own, so a solution rebinding this module's names does not reach
    it. With it go the mutable arguments the ended unit sent, as they are now: a Mock keeps
    references to its arguments, so a list changed after the call is what its record holds (and
    the values its mocks returned, changed by the solution, are the mocks' again)."""
    def begin(i):
        with lock:
            now = []
            for value in sent:
                try:
                    now.append(encode(value))
                except Exception:  # noqa: BLE001 - no longer plain data: the run fails there
                    now.append(None)
            sent.clear()
            replied.clear()
            exchange(["unit", i, now], True, fds)
    return begin


def _arg(value):
    """An argument as data for the trainer: a stub as its handle, plain data as it is encoded, an
    object of the solution's as its type's name (the mock records it; it equals only ANY)."""
    if _CHANNEL[4](value) is _Remote:
        return ["h", object.__getattribute__(value, "_h")]
    try:
        data = ["d", encode(value)]
        if _CHANNEL[4](value) in _MUTABLE:
            _sent.append(value)
        return data
    except Exception:  # noqa: BLE001 - not plain data
        kind = _CHANNEL[4](value)
        if kind in (list, tuple):  # holding a stub: `s.send([s])`
            return ["seq", kind.__name__, [_arg(v) for v in value]]
        if kind is dict:
            try:
                return ["map", [[encode(k), _arg(v)] for k, v in value.items()]]
            except Exception:  # noqa: BLE001, S110 - a key that is not plain data
                pass
        name = _CHANNEL[4](value).__name__
        return ["o", name if _CHANNEL[4](name) is str else "?"]


def _ask(request):
    """The trainer's reply as a value: data, a stub for a mock, or the exception raised."""
    reply = _send(request)
    kind = reply[0]
    if kind == "d":
        return _reply_data(reply)
    if kind == "h":
        return _Remote(reply[1])
    if kind == "it":
        return _RemoteIteration(reply[1])
    if kind in ("seq", "map"):
        return _reply_value(reply)
    path, args = reply[1], [decode_input(a) for a in reply[2]]
    module, _, name = path.rpartition(".")
    try:
        if module == "builtins":
            cls = dict(_BUILTIN_ITEMS).get(name)
        else:
            import importlib
            cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        cls = None
    if not (_CHANNEL[4](cls) is type and issubclass(cls, _CHANNEL[7])):
        raise TypeError(f"a mock's side effect {path} is not an exception class")
    raise cls(*args)


def _reply_value(reply):
    """A reply that is a value: data, a stub, or a list, tuple or dict holding stubs."""
    kind = reply[0]
    if kind == "h":
        return _Remote(reply[1])
    if kind == "seq":
        items = [_reply_value(r) for r in reply[2]]
        return tuple(items) if reply[1] == "tuple" else items
    if kind == "map":
        return {decode_input(k): _reply_value(v) for k, v in reply[1]}
    if kind == "d":
        return _reply_data(reply)
    raise TypeError("a mocked value the trainer could not send")


def _reply_data(reply):
    """Data a mock returned; a mutable value is one object per ref in a unit (the trainer's
    mock returns the same object each time), kept with the unit's arguments (_unit_sender)."""
    if len(reply) < 3:
        return decode_input(reply[1])
    if reply[2] not in _replied:
        _replied[reply[2]] = value = decode_input(reply[1])
        _sent.append(value)
    return _replied[reply[2]]


class _RemoteIteration:
    """An iteration over a mock of the trainer's, held there: each item asked for (lazy, as
    unittest's: a loop left early leaves the rest of mock_open's lines to readlines())."""

    __slots__ = ("_i",)

    def __init__(self, index):
        object.__setattr__(self, "_i", index)

    def __iter__(self):
        return self

    def __next__(self):
        return _ask(["next", object.__getattribute__(self, "_i")])


_NOTES = ("__signature__", "__doc__", "__wrapped__")  # _Remote keeps these of its own


class _Remote:
    """A mock of the trainer's (a patched target, or what one returned): every attribute read,
    call, operator and iteration is the trainer's (_ask), performed on its own mock."""

    __slots__ = ("_h", "_own")

    def __init__(self, handle):
        object.__setattr__(self, "_h", handle)
        object.__setattr__(self, "_own", {})

    def __getattr__(self, name):
        own = object.__getattribute__(self, "_own")
        if name in own:
            return own[name]
        return _ask(["get", object.__getattribute__(self, "_h"), name])

    def __setattr__(self, name, value):
        # a library's note on a function it holds (matplotlib's switch_backend sets pyplot.show's
        # __signature__): kept here, as a MagicMock keeps it; nothing the trainer reads
        if name in _NOTES:
            object.__getattribute__(self, "_own")[name] = value
            return
        raise AttributeError("a mock's attributes are the test's to set")

    def __call__(self, *args, **kwargs):
        return _ask(["call", object.__getattribute__(self, "_h"), [_arg(a) for a in args],
                     {k: _arg(v) for k, v in kwargs.items()}])

    def _op(self, name, *args):
        return _ask(["op", object.__getattribute__(self, "_h"), name, [_arg(a) for a in args]])

    def __enter__(self):
        return self._op("__enter__")

    def __exit__(self, *exc):
        return self._op("__exit__", None, None, None)

    def __iter__(self):
        return _ask(["iter", object.__getattribute__(self, "_h")])

    def __next__(self):
        return self._op("__next__")

    def __getitem__(self, key):
        return self._op("__getitem__", key)

    def __len__(self):
        return self._op("__len__")

    def __bool__(self):
        return self._op("__bool__")

    def __eq__(self, other):
        return self._op("__eq__", other)

    def __ne__(self, other):
        return self._op("__ne__", other)

    def __hash__(self):
        return hash(object.__getattribute__(self, "_h"))

    def __str__(self):
        return self._op("__str__")

    def __int__(self):
        return self._op("__int__")

    def __float__(self):
        return self._op("__float__")

    def __contains__(self, item):
        return self._op("__contains__", item)

    def __fspath__(self):
        return self._op("__fspath__")

    def __repr__(self):
        return f"<mock {object.__getattribute__(self, '_h')}>"


def _resolve(path: str):
    import pkgutil
    return pkgutil.resolve_name(path)


_MISSING = object()  # a patch with create=True of an attribute its target did not have
_STRING_IO = io.StringIO


def patch_step(step, patches):
    """A test's patch while its block runs: the target replaced by a stub of the trainer's mock (or
    the value it gives), or a dict updated from data (patch.dict); undone by `unpatch`. A target
    that does not exist raises AttributeError, as under unittest."""
    if "patch_dict" in step:
        target = _resolve(step["patch_dict"])
        saved = dict(target)
        if step["clear"]:
            target.clear()
        target.update(decode_input(step["data"]))
        patches.append((target, None, saved))
    elif "patch" in step:
        owner_path, _, attr = step["patch"].rpartition(".")
        owner = _resolve(owner_path)
        # create=True: a missing attribute is made, and deleted again at the patch's end
        original = getattr(owner, attr, _MISSING) if step.get("create") else getattr(owner, attr)
        if "stream" in step:  # the test's own io.StringIO (io's, as it was before the solution)
            new = _STRING_IO(step["stream"])
        else:
            new = _Remote(step["handle"]) if "handle" in step else decode_input(step["data"])
        setattr(owner, attr, new)
        patches.append((owner, attr, original))
        return new
    else:
        for _ in range(min(step["unpatch"], len(patches))):
            unpatch(patches.pop())


def unpatch(patch):
    target, attr, original = patch
    if attr is None:
        target.clear()
        target.update(original)
    elif original is _MISSING:
        delattr(target, attr)
    else:
        setattr(target, attr, original)


def draws_digest(key, pos, rest) -> str:
    """A global random state's digest (testplan.draws_digest: the same text)."""
    import hashlib
    return hashlib.sha256(repr((list(key), pos, list(rest))).encode()).hexdigest()


def sync_draws(step) -> bool:
    """`random`'s or numpy's global state ({"draws": name}): is it still the one the plan last
    gave (digest "expect": the answer drew nothing since)? Then it becomes the plan's now (key
    None: the same key, position "pos"). A state the answer moved stays as it is: False."""
    if step["draws"] == "random":
        import random
        version, internal, gauss = random.getstate()
        if draws_digest(internal[:-1], internal[-1], (version, gauss)) != step["expect"]:
            return False
        key = tuple(step["key"]) if step["key"] is not None else internal[:-1]
        random.setstate((step["rest"][0], key + (step["pos"],), step["rest"][1]))
        return True
    import numpy
    kind, key, pos, has_gauss, cached = numpy.random.get_state()
    if draws_digest(key.tolist(), int(pos), (kind, int(has_gauss), float(cached))) != (
            step["expect"]):
        return False
    if step["key"] is not None:
        key = numpy.array(step["key"], dtype=numpy.uint32)
    numpy.random.set_state((step["rest"][0], key, step["pos"], *step["rest"][1:]))
    return True


def run_units(units, namespace, frozen=_BUILTIN_ITEMS, dumps=json.dumps, begin=None,
              classes=(), stdlib=()) -> str:
    """Each unit in a fresh copy of the solution's namespace. Every step runs, whatever an earlier
    one raised (the child is not told which steps the tests expect to raise). Results: {"ok":
    value[, "applied": n]} | {"ok": null} for run steps | raised's report for a step that raised,
    each serialised to JSON the moment its step returns (a list the solution returned and changes
    later is reported as it was returned). Returns the JSON of the list of units. `frozen`: the
    builtins' (name, object) pairs from before the solution ran, bound afresh (`__gmts_builtins`)
    before every step; `dumps`: json.dumps taken before the solution ran (a test's
    `@patch('json.dumps')` or the solution's rebinding does not reach the results); `begin`: tells
    the trainer's mocks that unit i begins (_unit_sender), where the tests have mocks; `classes`:
    resolve_classes'; `stdlib`: resolve_stdlib's (`__gmts_classes`)."""
    out, shared = [], {}  # shared: the test module's own mutable names, one object for all tests
    # the solution's names and the setup's (a helper the tests call on the expected side), bound
    # again before every step: rebinding one through a caller's frame changes no later step
    base = tuple(namespace.items())
    for index, steps in enumerate(units):
        if begin is not None:
            begin(index)
        ns, results, patches, capsys = dict(namespace), [], [], None
        # what the test bound, by name: the same objects before every step (mutations stay; a
        # rebinding by the solution, `f_globals["data"] = ...`, does not)
        held = dict(shared)
        for step in steps:
            ns.update(base)
            ns.update(held)
            ns["__gmts_builtins"] = dict(frozen)
            ns["__gmts_files"] = dict(_FILE_QUESTIONS)
            ns["__gmts_classes"] = dict(stdlib)
            ns["__gmts_to_data"] = _to_data
            try:
                # a big input the trainer computed, sent as data rather than as source
                if "bind" in step:
                    ns[step["bind"]] = held[step["bind"]] = decode_input(step["data"])
                    results.append('{"ok": null}')
                elif "draws" in step:  # the tests' seeded global random state (testplan)
                    results.append('{"ok": true}' if sync_draws(step) else '{"ok": false}')
                elif "capsys" in step:  # the test's capsys (capfd): what it prints from here on
                    capsys = _Capfd() if step.get("fd") else _Capsys()
                    held[step.get("name", "capsys")] = capsys
                    results.append('{"ok": null}')
                elif "tmp_path" in step:  # the test's tmp_path: a new empty folder of its own
                    import pathlib
                    import tempfile
                    held["tmp_path"] = pathlib.Path(tempfile.mkdtemp(prefix="pytest-"))
                    results.append('{"ok": null}')
                elif "patch" in step or "patch_dict" in step or "unpatch" in step:
                    new = patch_step(step, patches)
                    if "as" in step:  # `as out`: the test's stream, read in later steps
                        ns[step["as"]] = held[step["as"]] = new
                    results.append('{"ok": null}')
                elif "compare" in step:
                    left = eval(step["eval"], ns)
                    ns.update(base)  # the right operand's names as before the step, too
                    ns.update(held)
                    results.append(compare(left, step, ns, dumps))
                elif "eval" in step:
                    value = eval(step["eval"], ns)
                    if _CHANNEL[4](value) is _Remote and not step.get("iter") and not step.get(
                            "attrs"):  # a mock of the trainer's, returned: the judge's own
                        results.append(dumps({"ok": None, "mock": object.__getattribute__(
                            value, "_h")}))
                        continue
                    attrs = step.get("attrs", ())
                    if "ops" in step:  # a method_step: applied while the value is no data
                        attrs = step["ops"]
                        value, applied, sent = apply_ops(value, attrs,
                                                         step.get("data_from", 0))
                    else:
                        value, applied, sent = read_attrs(value, attrs)
                    if step.get("iter") and applied == len(attrs):
                        value = materialise(value)
                    # stopped at data: encoded there already (no code ran since)
                    results.append(dumps({"ok": sent[0] if sent else encode(value),
                                          "applied": applied}))
                else:
                    exec(step["run"], ns)  # noqa: S102 - the solution's step, in the sandbox
                    held.update((n, ns[n]) for n in step.get("binds", ()))
                    if step.get("share"):
                        shared.update((n, ns[n]) for n in step["binds"])
                    results.append('{"ok": null}')
            except BaseException as e:  # noqa: BLE001 - SystemExit in a call is a failure too
                try:
                    report = raised(e, namespace, frozen, classes, step.get("exc_names", ()))
                    if step.get("parts"):  # `as excinfo`: what the test reads of it
                        report["parts"] = exception_parts(e, step["parts"], frozen)
                    results.append(dumps(report))
                except BaseException:  # noqa: BLE001 - e.g. a message that cannot be encoded
                    results.append('{"exc": "?", "msg": null, "mro": []}')
        if capsys is not None:
            capsys.close()
        while patches:  # the unit's patches end with it
            try:
                unpatch(patches.pop())
            except BaseException:  # noqa: BLE001, S110 - a target the solution made unsettable
                pass
        out.append("[" + ", ".join(results) + "]")
    if begin is not None:
        begin(len(units))  # the units are over
    return "[" + ", ".join(out) + "]"




def _case_process(i, out_w, max_procs, cpu_s, file_bytes):
    """The forked solution process of case i: stdin from its input file, stdout into the pipe,
    stderr dropped; its own CPU limit; after the script, its non-daemon threads are waited for
    (`threading.Thread(target=main)` with a big stack is a common recursion idiom), as the
    interpreter would at exit."""
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        os.close(_report_fd)
        os.dup2(os.open(f"in{i}.txt", os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        code = 0
        try:
            import runpy
            runpy.run_path("solution.py", run_name="__main__")
            import threading
            for thread in threading.enumerate():
                if thread is not threading.main_thread() and not thread.daemon:
                    thread.join()
        except SystemExit as e:
            code = 0 if e.code in (None, 0) else 1
        sys.stdout.flush()
        os._exit(code)
    except BaseException:  # noqa: BLE001 - a crash of the program is exit 1
        try:
            sys.stdout.flush()
        finally:
            os._exit(1)


def run_cases(inputs, out_fds, out_caps, max_procs, file_mb, case_s, may_kill_all):
    """stdin/stdout programs: one forked process per input, each with its own limit of `case_s`
    seconds (wall clock and CPU). Its stdout goes through a pipe into the parent's file `out_fds[i]`
    (`out_caps[i]` bytes at most, the excess read and dropped: writes never fail), its input file is
    removed afterwards, and whatever it left running is killed before the next case (kill(-1): every
    process of the run but this one; only where the run has its own uid or pid namespace,
    `may_kill_all`). Returns [{"exit", "timed_out"}], up to the first case that timed out or
    exited with an error (a looping answer costs one case's limit, not every case's)."""
    import select
    out = []
    cpu_s = max(1, math.ceil(case_s))
    file_bytes = file_mb << 20
    for i, text in enumerate(inputs):
        with open(f"in{i}.txt", "w") as f:
            f.write(text)
        read_end, write_end = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            for fd in out_fds:
                os.close(fd)
            _case_process(i, write_end, max_procs, cpu_s, file_bytes)
        os.close(write_end)
        kept, status, timed_out, cap = 0, None, False, out_caps[i]
        open_pipe = True
        while status is None:
            left = start + case_s - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if open_pipe:
                ready, _, _ = select.select([read_end], [], [], min(left, 0.05))
                if ready:
                    chunk = os.read(read_end, 1 << 16)
                    if not chunk:
                        open_pipe = False
                    elif kept < cap:
                        chunk = chunk[:cap - kept]
                        os.write(out_fds[i], chunk)
                        kept += len(chunk)
            else:
                time.sleep(0.002)
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = wait_status
        if status is not None and open_pipe:  # exited: what it wrote before exiting is in the pipe
            os.set_blocking(read_end, False)
            try:
                while kept < cap and (chunk := os.read(read_end, 1 << 16)):
                    chunk = chunk[:cap - kept]
                    os.write(out_fds[i], chunk)
                    kept += len(chunk)
            except BlockingIOError:
                pass  # a process it left behind holds the pipe open
        os.close(read_end)
        if may_kill_all:
            try:
                # all the run's processes but this one (and a namespace's init)
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            os.kill(pid, signal.SIGKILL)
        if status is None:
            os.waitpid(pid, 0)
        os.remove(f"in{i}.txt")
        out.append({"exit": None if status is None else os.waitstatus_to_exitcode(status),
                    "timed_out": timed_out})
        if out[-1]["exit"] != 0:  # timed out or failed: the run fails whatever the other cases do
            break
    return out


def run_pytest(harness, workdir):
    """Untrusted tests: the installed pytest runs the test file (which imports the solution) in a
    process of its own, before the solution has run in this one; rewards/_pytest_runner.py writes
    the result to the parent's file `harness["fd"]`, marked with the run's token, which reaches the
    runner through a pipe and is dropped here before the solution is imported."""
    import subprocess
    with open(harness["file"], "w", encoding="utf-8") as f:
        f.write(harness["source"])
    import fcntl
    pipe = os.pipe()
    # not 0-2: stdin is closed, and the runner's stdin becomes /dev/null
    read_end, write_end = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in pipe)
    for fd in pipe:
        os.close(fd)
    os.write(write_end, harness.pop("token").encode())
    os.close(write_end)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "OMP_NUM_THREADS": "1"}
    try:
        argv = [sys.executable, "-I", harness["runner"], str(read_end), str(harness["fd"]),
                harness["file"]]
        # stdout and stderr: the run's own (what the tests print, pytest's failures)
        subprocess.run(argv, check=False, pass_fds=(read_end, harness["fd"]), env=env, cwd=workdir,
                       stdin=subprocess.DEVNULL)
    finally:
        os.close(read_end)
        os.close(harness["fd"])  # the solution, imported below, cannot add to the result


PRINT_KEPT = 1 << 20
_CaptureResult = collections.namedtuple("CaptureResult", "out err")  # pytest's, as data


class _Capsys:
    """pytest's capsys for one test: from its `{"capsys": true}` step to the unit's end,
    sys.stdout and sys.stderr are pytest's own kind of capture (a UTF-8 TextIOWrapper over bytes);
    readouterr() gives what was written since the last call (over PRINT_KEPT bytes: a failure)
    and starts again."""

    def __init__(self):
        self.saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.streams = tuple(
            io.TextIOWrapper(io.BytesIO(), encoding="UTF-8", newline="", write_through=True)
            for _ in range(2))

    def readouterr(self):
        texts = []
        for stream in self.streams:
            stream.flush()
            data = stream.buffer.getvalue()
            stream.buffer.seek(0)
            stream.buffer.truncate()
            if len(data) > PRINT_KEPT:
                raise ValueError("more printed than a test reads back")
            texts.append(data.decode("UTF-8", "replace"))
        return _CaptureResult(*texts)

    def close(self):
        sys.stdout, sys.stderr = self.saved


class _Capfd(_Capsys):
    """pytest's capfd for one test: file descriptors 1 and 2 themselves write to files of their
    own (what `os.write(1, ...)` or a C library prints is captured too), and sys.stdout and
    sys.stderr write there as well, in order; readouterr() reads and empties them."""

    def __init__(self):
        import tempfile
        self.saved = sys.stdout, sys.stderr
        for stream in self.saved:
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        # closed by close(), at the unit's end
        self.files = [tempfile.TemporaryFile(buffering=0) for _ in range(2)]  # noqa: SIM115
        self.kept = [os.dup(1), os.dup(2)]
        for fd, file in zip((1, 2), self.files):
            os.dup2(file.fileno(), fd)
        sys.stdout, sys.stderr = self.streams = tuple(
            io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="UTF-8", newline="",
                             write_through=True) for fd in (1, 2))

    def readouterr(self):
        texts = []
        for stream, file in zip(self.streams, self.files):
            stream.flush()
            size = os.lseek(file.fileno(), 0, os.SEEK_END)
            if size > PRINT_KEPT:
                raise ValueError("more printed than a test reads back")
            os.lseek(file.fileno(), 0, os.SEEK_SET)
            data = os.read(file.fileno(), size) if size else b""
            os.ftruncate(file.fileno(), 0)
            os.lseek(file.fileno(), 0, os.SEEK_SET)
            texts.append(data.decode("UTF-8", "replace"))
        return _CaptureResult(*texts)

    def close(self):
        for stream in self.streams:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, kept in zip((1, 2), self.kept):
            os.dup2(kept, fd)
            os.close(kept)
        for file in self.files:
            file.close()
        super().close()


class _Capped(io.RawIOBase):
    """A file descriptor that takes everything and writes only its first `cap` bytes."""

    def __init__(self, fd: int, cap: int):
        super().__init__()
        self.fd, self.left = fd, cap

    def writable(self):
        return True

    def write(self, data):
        n = len(data)
        if self.left > 0:
            try:
                self.left -= os.write(self.fd, bytes(data[:self.left]))
            except OSError:
                self.left = 0
        return n


_report_fd = None  # the parent's anonymous report file, passed as spec["report_fd"]


def report(obj):
    _write_report(json.dumps(obj))


def _write_report(text: str):
    _CHANNEL[0](_report_fd, (text + "\n").encode())  # os.write: a test may patch the module's


def work(spec):
    """Everything after privileges and limits: the solution, the units or cases, then the
    harness."""
    global _mock_fds
    _mock_fds = spec.get("mock_fds")
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries cannot give privileges back
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
    if not spec["net_isolated"]:
        block_sockets()
    os.chdir(spec["workdir"])
    with open("solution.py", "w", encoding="utf-8") as f:
        f.write(spec["solution"])
    if spec.get("cases") is not None:
        # own uid or pid ns
        may_kill_all = spec["drop"]["how"] != "fallback-user" or spec["net_isolated"]
        limits = spec["limits"]
        report({"cases": run_cases(spec["cases"], spec["out_fds"], spec["out_caps"],
                                   limits["max_procs"],
                                   limits["file_mb"], spec["case_s"], may_kill_all)})
        return
    if spec.get("harness"):
        run_pytest(spec.pop("harness"), spec["workdir"])
        sys.stdout.flush()
        if not spec["units"]:  # the solution ran under pytest; running it again here judges nothing
            if _mock_fds:
                _unit_sender(tuple(_mock_fds))(0)  # no unit: they are over
            report({"units": []})
            return
    frozen = _BUILTIN_ITEMS  # a local from here on: what the solution rebinds later is not read
    # the tests' exception classes of the modules they import, before the solution can rebind them
    classes = resolve_classes(spec.get("exc_paths") or ())
    # the standard library's classes the tests pass (`isinstance(r, types.GeneratorType)`), as
    # they are before the solution could rebind them
    stdlib = resolve_stdlib(spec.get("class_paths") or ())
    begin = _unit_sender(tuple(_mock_fds)) if _mock_fds else None
    dumps = _CHANNEL[2]  # json.dumps, whatever a test patches or the solution rebinds
    sys.stdout.flush()
    # what the solution prints while the tests call it is not judged (pytest captures it): the
    # first PRINT_KEPT bytes reach the run's stdout, the rest is dropped, so a solution that prints
    # megabytes while computing is not failed by the file-size limit
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_Capped(1, PRINT_KEPT)), encoding="utf-8",
                                  errors="replace", write_through=False)
    sys.path.insert(0, spec["workdir"])
    import importlib
    solution = importlib.import_module("solution")  # `from solution import f` works too
    if spec.get("setup"):
        exec(compile(spec["setup"], "setup.py", "exec"), vars(solution))  # noqa: S102
    namespace = {k: v for k, v in vars(solution).items() if not k.startswith("__")}
    units, functions = spec["units"], ""
    alt = spec.get("alt")
    names = [n for n in (alt or {}).get("names", ()) if n in namespace]
    # the tests' capitalised names are the solution's functions, not classes: the plan that sends
    # their results back as data
    if names and not any(isinstance(namespace[n], type) for n in names):
        units, functions = alt["units"], ', "functions": true'
    _write_report('{"units": ' + run_units(units, namespace, frozen, dumps, begin, classes,
                                           stdlib) + functions + "}")
    if _mock_fds:
        _send(["end"], reply=False)


def child(spec):
    try:
        drop = spec["drop"]
        # before the uid drop: RLIMIT_NPROC then counts the new uid's processes
        set_limits(spec["limits"])
        if drop["how"] == "bwrap-root":
            become(drop["uid"])
            enter_user_namespace(drop["uid"])
        elif drop["how"] == "fallback-root":
            drop_fallback(drop["uid"], drop["keep_dac"])
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("could not drop root")
        work(spec)
        sys.stdout.flush()
        os._exit(0)
    # SystemExit included: exiting is not passing, the report decides
    except BaseException:  # noqa: BLE001
        try:
            traceback.print_exc(limit=5)
            sys.stderr.flush()
        finally:
            os._exit(1)


def try_unshare():
    """Fallback only: new network + pid namespaces (root directly, others through a user
    namespace)."""
    for flags in (CLONE_NEWNET | CLONE_NEWPID, CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID):
        if _libc.unshare(flags) == 0:
            return True
    return False


def main():
    global _report_fd
    spec = json.loads(sys.stdin.read())
    os.close(0)
    _report_fd = spec["report_fd"]
    if spec["drop"]["how"].startswith("bwrap"):
        # bwrap made every namespace; its init is pid 1 and reaps the rest
        spec["net_isolated"] = True
        child(spec)
    # Fallback: unshare(CLONE_NEWPID) only moves our children into the new namespace, so fork: the
    # inner process is pid 1 there, and when it ends the kernel kills everything it left behind,
    # setsid() escapees included.
    spec["net_isolated"] = try_unshare() if spec.get("isolate", True) else False
    # tells the parent whether it must hunt for leftovers itself
    with open(spec["status_path"], "w") as f:
        f.write("namespaces" if spec["net_isolated"] else "none")
    pid = os.fork()
    if pid == 0:
        child(spec)
    os.close(_report_fd)
    for fd in spec.get("mock_fds") or ():  # the channel ends with the child
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    os._exit(min(255, abs(os.waitstatus_to_exitcode(status))))


if __name__ == "__main__":
    main()
