"""unittest.mock in TestCases judged by the trainer (issue 53): the mocks and their record live in
the trainer (rewards/mocks.py), the child's patched targets are stubs asking it over a live channel.
Each shape: an honest answer 1.0 and a wrong one 0.0 under get_reward("code") and trusted_only."""
import json
import textwrap
from pathlib import Path

import pytest

from gmts import data
from gmts.rewards import get_reward, sandbox, testplan

ROWS = Path(__file__).with_name("code_rows")


def block(src: str) -> str:
    return f"```python\n{src}```\n"


def scores(answer: str, reference) -> tuple[float, float]:
    return (get_reward("code")(answer, reference),
            get_reward("code", trusted_only=True)(answer, reference))


def reference(body: str, imports: str = "", decorator: str = "") -> dict:
    tests = ("import unittest\nfrom unittest.mock import patch, MagicMock, Mock, mock_open, call"
             "\n" + imports + "\n\n" + decorator + "class TestCases(unittest.TestCase):\n"
             + textwrap.indent(textwrap.dedent(body), "    "))
    return {"tests": tests, "entry_point": "task_func"}


def judged(ref: dict) -> testplan.Plan:
    """The plan judges every test case here (no harness) and patches."""
    plan = testplan.build_plan(ref["tests"], ref["entry_point"])
    assert plan.harness is None and plan.untrusted == 0, plan.refusal
    assert any("patch" in s or "patch_dict" in s for u in plan.units for s in u.steps)
    return plan


GET = """
@patch('requests.get')
def test_get(self, mock_get):
    mock_get.return_value.json.return_value = {'k': 3}
    mock_get.return_value.status_code = 200
    self.assertEqual(task_func('http://x'), 3)
    mock_get.assert_called_once_with('http://x', timeout=5)
    self.assertEqual(mock_get.call_count, 1)
"""
GET_HONEST = ("import requests\ndef task_func(u):\n    r = requests.get(u, timeout=5)\n"
              "    if r.status_code != 200:\n        return None\n    return r.json()['k']\n")
SMTP = """
@patch('smtplib.SMTP')
def test_send(self, mock_smtp):
    instance = MagicMock()
    mock_smtp.return_value.__enter__.return_value = instance
    self.assertTrue(task_func('a@x', 'hi'))
    mock_smtp.assert_called_once_with('localhost', 25)
    instance.sendmail.assert_called_once_with('me@x', ['a@x'], 'hi')
"""

# shape -> (test body, extra imports, honest task_func, wrong ones)
SHAPES = {
    "requests_get": (GET, "import requests", GET_HONEST, [
        "def task_func(u):\n    return 3\n",  # the right value, never calling requests.get
        # called twice: assert_called_once_with fails
        ("import requests\ndef task_func(u):\n    requests.get(u, timeout=5)\n"
        "    return requests.get(u, timeout=5).json()['k']\n"),
        # other arguments
        "import requests\ndef task_func(u):\n    return requests.get(u).json()['k']\n"]),
    "decorator_order": ("""
        @patch('os.path.exists')
        @patch('os.listdir')
        def test_list(self, mock_listdir, mock_exists):
            mock_exists.return_value = True
            mock_listdir.return_value = ['b.txt', 'a.txt', 'c.csv']
            self.assertEqual(task_func('/d'), ['a.txt', 'b.txt'])
            mock_listdir.assert_called_once_with('/d')
            mock_exists.assert_called_once_with('/d')
        """, "import os",
        ("import os\ndef task_func(d):\n    if not os.path.exists(d):\n        return []\n"
         "    return sorted(f for f in os.listdir(d) if f.endswith('.txt'))\n"),
        ["import os\ndef task_func(d):\n    return sorted(os.listdir(d))\n",
         ("import os\ndef task_func(d):\n"
         "    return sorted(f for f in os.listdir(d) if f.endswith('.txt'))\n")]),
    "keywords_and_class_level": ("""
        def test_run(self, mock_run):
            mock_run.return_value.stdout = 'hello\\n'
            mock_run.return_value.returncode = 0
            self.assertEqual(task_func(['echo', 'hello']), 'hello')
            mock_run.assert_called_once_with(['echo', 'hello'], capture_output=True, text=True)

        @patch('time.sleep', return_value=None)
        def test_sleep(self, mock_sleep, mock_run):
            mock_run.return_value.stdout = 'x\\n'
            self.assertEqual(task_func(['x']), 'x')
            mock_sleep.assert_called_once_with(1)
        """, "import subprocess",
        ("import subprocess, time\ndef task_func(cmd):\n    time.sleep(1)\n"
         "    out = subprocess.run(cmd, capture_output=True, text=True)\n"
         "    return out.stdout.strip()\n"),
        [("import subprocess\ndef task_func(cmd):\n"
         "    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()\n")]),
    "side_effect_list_and_exception": ("""
        @patch('requests.get',
               side_effect=[requests.ConnectionError('down'), MagicMock(status_code=200)])
        def test_retry(self, mock_get):
            self.assertEqual(task_func('u'), 200)
            self.assertEqual(mock_get.call_count, 2)

        @patch('requests.get')
        def test_error(self, mock_get):
            mock_get.side_effect = requests.Timeout
            self.assertIsNone(task_func('u'))
        """, "import requests",
        ("import requests\ndef task_func(u):\n    for _ in range(3):\n        try:\n"
         "            return requests.get(u).status_code\n"
         "        except requests.ConnectionError:\n            continue\n"
         "        except requests.Timeout:\n            return None\n"),
        [("import requests\ndef task_func(u):\n    try:\n        return requests.get(u).status_code"
         "\n    except requests.RequestException:\n        return 200\n")]),
    "mock_open": ("""
        def test_lines(self):
            with patch('builtins.open', mock_open(read_data='a\\nb\\n')) as m:
                self.assertEqual(task_func('f.txt'), 2)
            m.assert_called_once_with('f.txt')

        @patch('builtins.open', new_callable=mock_open, read_data='x\\ny\\nz\\n')
        def test_iter(self, m):
            self.assertEqual(task_func('g.txt'), 3)
        """, "",
        ("def task_func(path):\n    with open(path) as f:\n"
         "        return sum(1 for line in f if line.strip())\n"),
        ["def task_func(path):\n    return 2\n",
         ("def task_func(path):\n    with open(path, 'rb') as f:\n"
          "        return len(f.readlines())\n")]),
    "patch_dict_environ": ("""
        @patch.dict(os.environ, {'APP_MODE': 'test'})
        def test_env(self):
            self.assertEqual(task_func(), 'test')

        def test_env_block(self):
            with patch.dict('os.environ', {'APP_MODE': 'prod'}, clear=True):
                self.assertEqual(task_func(), 'prod')
            self.assertEqual(task_func(), 'none')
        """, "import os",
        "import os\ndef task_func():\n    return os.environ.get('APP_MODE', 'none')\n",
        ["def task_func():\n    return 'test'\n"]),
    "smtp_context_manager": (SMTP, "import smtplib",
        ("import smtplib\ndef task_func(to, msg):\n    with smtplib.SMTP('localhost', 25) as s:\n"
         "        s.sendmail('me@x', [to], msg)\n    return True\n"),
        [("import smtplib\ndef task_func(to, msg):\n    s = smtplib.SMTP('localhost', 25)\n"
         "    s.sendmail('me@x', [to], msg)\n    return True\n")]),
    # the child writes its results with json.dumps taken before anything ran: a test patching it
    # reaches only the solution
    "patches_json_dumps": ("""
        @patch('json.dumps', return_value='{}')
        def test_dump(self, m):
            self.assertEqual(task_func({'a': 1}), '{}')
            m.assert_called_once_with({'a': 1})
        """, "import json", "import json\ndef task_func(d):\n    return json.dumps(d)\n",
        ["def task_func(d):\n    return '{}'\n"]),
    # a plain Mock: true, no len(), as Python has it (the operators run on the trainer's mock)
    "plain_mock_defaults": ("""
        @patch('requests.get')
        def test_plain(self, mock_get):
            mock_get.return_value = Mock(status_code=200, text='ok')
            self.assertEqual(task_func('u'), 'ok')
        """, "import requests",
        ("import requests\ndef task_func(u):\n    r = requests.get(u)\n"
         "    if r and r.status_code == 200:\n        return r.text\n    return None\n"),
        [("import requests\ndef task_func(u):\n    r = requests.get(u)\n"
         "    return r.text if len(r) else None\n")]),
    "new_value_and_call_list": ("""
        @patch('random.randint', new=MagicMock(side_effect=[4, 2, 6]))
        def test_rolls(self):
            self.assertEqual(task_func(3), [4, 2, 6])

        @patch('random.choice')
        def test_calls(self, mock_choice):
            mock_choice.side_effect = ['a', 'b']
            self.assertEqual(task_func(0, ['x', 'y']), 'ab')
            self.assertEqual(mock_choice.call_args_list, [call(['x', 'y']), call(['x', 'y'])])
        """, "import random",
        ("import random\ndef task_func(n, letters=None):\n    if letters:\n"
         "        return random.choice(letters) + random.choice(letters)\n"
         "    return [random.randint(1, 6) for _ in range(n)]\n"),
        ["def task_func(n, letters=None):\n    return 'ab' if letters else [4, 2, 6]\n"]),
    # side effect functions of the tests' (a lambda, a local def), run by the trainer's mocks
    "side_effect_functions": ("""
        @patch('os.path.exists')
        def test_lambda(self, m):
            m.side_effect = lambda p: p.endswith('.txt') and not p.startswith('tmp')
            self.assertEqual(task_func(['a.txt', 'b.py', 'tmp.txt']), ['a.txt'])
            self.assertEqual(m.call_count, 3)

        @patch('os.path.exists')
        def test_def(self, m):
            def fake(path):
                if path == 'secret':
                    raise PermissionError(13, 'denied')
                return True
            m.side_effect = fake
            self.assertEqual(task_func(['x', 'secret', 'y']), ['x', 'y'])
        """, "import os",
        ("import os\ndef task_func(ps):\n    out = []\n    for p in ps:\n        try:\n"
         "            if os.path.exists(p):\n                out.append(p)\n"
         "        except PermissionError as e:\n            assert e.errno == 13\n"
         "    return out\n"),
        ["import os\ndef task_func(ps):\n    return [p for p in ps if os.path.exists(p)]\n",
         "def task_func(ps):\n    return [p for p in ps if p.endswith('.txt')] or ['x', 'y']\n"]),
}

# a class-level @patch: every test method gets its mock as the last argument
CLASS_PATCHES = {"keywords_and_class_level": "@patch('subprocess.run')\n"}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_mock_shapes_honest_and_wrong(shape):
    body, imports, honest, wrongs = SHAPES[shape]
    ref = reference(body, imports, CLASS_PATCHES.get(shape, ""))
    judged(ref)
    assert scores(block(honest), ref) == (1.0, 1.0)
    for wrong in wrongs:
        assert scores(block(wrong), ref) == (0.0, 0.0), wrong


# ------------------------------------------------ adversarial solutions

ADVERSARIAL = {
    # the record is the trainer's: unittest.mock patched in the child changes no assert
    "patches_unittest_mock": (
        "import unittest.mock\n"
        "unittest.mock.NonCallableMock.assert_called_once_with = lambda *a, **k: None\n"
        "unittest.mock.NonCallableMock.call_count = 1\n"
        "def task_func(u):\n    return 3\n"),
    # the stub's API that would rewrite or bypass the record is not reachable
    "resets_the_record": (
        "import requests\ndef task_func(u):\n    r = requests.get(u, timeout=5)\n"
        "    requests.get(u, timeout=5)\n    requests.get.reset_mock()\n"
        "    return r.json()['k']\n"),
    "reads_return_value_without_calling": (
        "import requests\ndef task_func(u):\n"
        "    return requests.get.return_value.json.return_value['k']\n"),
    # a mock is no answer: it is not plain data
    "returns_the_proxy": (
        "import requests\ndef task_func(u):\n    return requests.get(u, timeout=5)\n"),
    # junk on every fd it can write: a malformed request breaks the channel (0, no crash)
    "writes_junk_on_every_fd": (
        "import os\ndef task_func(u):\n    for fd in range(3, 64):\n        try:\n"
        "            os.write(fd, b'{not json\\n[\"call\", 99999]\\n')\n"
        "        except OSError:\n            pass\n    return 3\n"),
    # closing the channel: its own calls fail
    "closes_every_fd": (
        "import os, requests\ndef task_func(u):\n    for fd in range(3, 64):\n        try:\n"
        "            os.close(fd)\n        except OSError:\n            pass\n"
        "    return requests.get(u, timeout=5).json()['k']\n"),
    # reading the replies meant for the stub: the stub then waits, past the time limit
    "reads_the_replies": (
        "import os, requests, threading\ndef task_func(u):\n"
        "    for fd in range(3, 64):\n"
        "        threading.Thread(target=lambda fd=fd: os.read(fd, 1 << 16), daemon=True).start()\n"
        "    return requests.get(u, timeout=5).json()['k']\n"),
    # a forged request is only a call it could have made: recorded as one
    "forges_a_request": (
        "import os, json, requests\ndef task_func(u):\n"
        "    r = requests.get(u, timeout=5)\n"
        "    for fd in range(3, 64):\n        try:\n"
        "            os.write(fd, b'[\"call\", 0, [[\"d\", \"http://x\"]], {}]\\n')\n"
        "        except OSError:\n            pass\n    return r.json()['k']\n"),
    # a new mock per attribute: the trainer stops at MAX_HANDLES
    "reaches_many_mocks": (
        "import requests\ndef task_func(u):\n    for i in range(10 ** 6):\n"
        "        getattr(requests.get, f'a{i}')\n    return 3\n"),
    # flooding the channel: the run stops (request or byte bound, or the time limit)
    "floods": (
        "import requests\ndef task_func(u):\n    for _ in range(10 ** 7):\n"
        "        requests.get(u, timeout=5)\n    return 3\n"),
}


@pytest.mark.parametrize("attack", sorted(ADVERSARIAL))
def test_adversarial_solutions_score_zero(attack):
    ref = reference(GET, "import requests")
    result = sandbox.run_python(ADVERSARIAL[attack], tests=ref["tests"], entry_point="task_func",
                                timeout=4)
    assert not result.passed and result.trusted
    assert scores(block(ADVERSARIAL[attack]), dict(ref, timeout=4)) == (0.0, 0.0)


def test_threads_calling_a_stub_at_once():
    """Requests from threads of the solution's are one at a time: each reply reaches its call."""
    ref = reference("""
        @patch('requests.get')
        def test_many(self, mock_get):
            mock_get.return_value.json.return_value = {'k': 2}
            self.assertEqual(task_func([f'u{i}' for i in range(16)]), 32)
            self.assertEqual(mock_get.call_count, 16)
        """, "import requests")
    judged(ref)
    honest = ("import requests\nfrom concurrent.futures import ThreadPoolExecutor\n"
              "def task_func(urls):\n    with ThreadPoolExecutor(8) as pool:\n"
              "        return sum(pool.map(lambda u: requests.get(u).json()['k'], urls))\n")
    assert scores(block(honest), ref) == (1.0, 1.0)


def test_without_namespaces_too():
    """The fallback sandbox (no bwrap) passes the channel the same way."""
    ref = reference(GET, "import requests")
    for solution, passed in ((GET_HONEST, True), ("def task_func(u):\n    return 3\n", False),
                             (ADVERSARIAL["writes_junk_on_every_fd"], False)):
        result = sandbox.run_python(solution, tests=ref["tests"], entry_point="task_func",
                                    isolate=False, timeout=4)
        assert result.passed is passed


def test_forged_requests_are_calls_in_the_record():
    """The same forged request, by a solution that calls once: the trainer's record holds two
    calls."""
    plan = judged(reference(GET, "import requests"))
    session = sandbox.mocks.Session(plan.mocks)
    session.answer(["call", 0, [["d", "http://x"]], {"timeout": ["d", 5]}])
    session.answer(["call", 0, [["d", "http://x"]], {}])
    assert session.handles[0].call_count == 2


def test_malformed_requests_raise_and_are_never_answered():
    plan = judged(reference(GET, "import requests"))
    session = sandbox.mocks.Session(plan.mocks)
    for request in (["call", 7, [], {}], ["get"], "x", ["op", 0, "__del__", []],
                    ["call", 0, [["z", 1]], {}], ["nope", 0]):
        with pytest.raises((ValueError, IndexError, TypeError)):
            session.answer(request)
    assert session.handles[0].call_count == 0


def test_missing_target_fails_as_under_unittest():
    ref = reference("""
        @patch('os.no_such_function')
        def test_x(self, m):
            m.return_value = 1
            self.assertEqual(task_func(), 1)
        """, "import os")
    judged(ref)
    honest = "import os\ndef task_func():\n    return 1\n"
    assert scores(block(honest), ref) == (0.0, 0.0)  # AttributeError under patch, as unittest


def test_patches_hold_only_for_the_test():
    """A patch ends with its block and its test: the next test sees the real target."""
    ref = reference("""
        def test_a(self):
            with patch('os.getcwd', return_value='/mocked'):
                self.assertEqual(task_func(), '/mocked')
            self.assertNotEqual(task_func(), '/mocked')

        def test_b(self):
            self.assertNotEqual(task_func(), '/mocked')
        """, "import os")
    judged(ref)
    honest = "import os\ndef task_func():\n    return os.getcwd()\n"
    assert scores(block(honest), ref) == (1.0, 1.0)
    sticky = ("import os\n_seen = []\ndef task_func():\n    _seen.append(os.getcwd())\n"
              "    return _seen[0]\n")
    assert scores(block(sticky), ref) == (0.0, 0.0)


# shapes still refused under trusted_only (pytest in the sandbox in the default mode)
REFUSED = {
    # a side effect whose cost the solution's argument sets ('x' * n): never run by the trainer
    "side_effect_function_of_unbounded_cost": ("""
        @patch('os.urandom')
        def test_u(self, m):
            m.side_effect = lambda n: b'x' * n
            self.assertEqual(task_func(3), b'xxx')
        """, "import os\ndef task_func(n):\n    return os.urandom(n)\n"),
    "autospec": ("""
        @patch('os.getcwd', autospec=True)
        def test_cwd(self, m):
            m.return_value = '/a'
            self.assertEqual(task_func(), '/a')
        """, "import os\ndef task_func():\n    return os.getcwd()\n"),
    "mock_as_argument": ("""
        def test_calls(self):
            m = MagicMock(return_value=3)
            self.assertEqual(task_func(m), 6)
            m.assert_called_once_with()
        """, "def task_func(f):\n    return f() * 2\n"),
    "configured_after_a_call": ("""
        @patch('os.getcwd')
        def test_cwd(self, m):
            m.return_value = '/a'
            self.assertEqual(task_func(), '/a')
            m.return_value = '/b'
            self.assertEqual(task_func(), '/b')
        """, "import os\ndef task_func():\n    return os.getcwd()\n"),
    # the test's own call of a mock is in the record: before a later call of the solution's, the
    # asserts (run after the whole run) would read it out of order
    "the_tests_own_mock_call_before_a_later_call": ("""
        @patch('os.getcwd')
        def test_cwd(self, m):
            task_func()
            m().strip.assert_not_called()
            task_func()
        """, "import os\ndef task_func():\n    return os.getcwd()\n"),
    # a name bound to an object inside a value configuring a mock, read after the solution ran:
    # the run's mocks hold the outer value, whose inner object the child may have replaced
    "a_value_inside_a_configured_one_read_after": ("""
        @patch('os.stat')
        def test_s(self, m):
            sizes = [3, 1, 2]
            m.return_value = {'sizes': sizes}
            self.assertEqual(task_func(), 3)
            self.assertEqual(sizes, [3, 1, 2])
        """, "import os\ndef task_func():\n    return max(os.stat('x')['sizes'])\n"),
    # a patcher started by hand and never stopped: under unittest it patches the later tests too
    "a_patch_started_and_never_stopped": ("""
        def setUp(self):
            self.m = patch('os.getcwd', return_value='/a').start()

        def test_cwd(self):
            self.assertEqual(task_func(), '/a')
        """, "import os\ndef task_func():\n    return os.getcwd()\n"),
    # a value the run's mocks hold (given to a mock in test_a), given to the solution in test_b:
    # a copy in the child would be a second object where unittest has one
    "a_value_configuring_a_mock_given_to_the_solution": ("""
        DATA = {'n': 1}

        @patch('os.stat')
        def test_a(self, m):
            m.return_value = self.DATA
            self.assertEqual(task_func(None), 2)

        def test_b(self):
            self.assertEqual(task_func(self.DATA), 2)
        """, ("import os\ndef task_func(d):\n"
              "    return (d if d is not None else os.stat('x'))['n'] + 1\n")),
    "record_read_before_a_call": ("""
        @patch('os.getcwd', return_value='/a')
        def test_cwd(self, m):
            task_func()
            self.assertEqual(m.call_count, 1)
            task_func()
        """, "import os\ndef task_func():\n    return os.getcwd()\n"),
}


@pytest.mark.parametrize("shape", sorted(REFUSED))
def test_shapes_not_judged_are_refused_with_one_reason(shape):
    body, honest = REFUSED[shape]
    ref = reference(body, "import os")
    plan = testplan.build_plan(ref["tests"], "task_func")
    assert plan.trusted == 0 and plan.harness is not None
    assert plan.refusal.startswith("line 5 (TestCases): unittest.mock"), plan.refusal
    result = sandbox.run_python(honest, tests=ref["tests"], entry_point="task_func",
                                trusted_only=True)
    assert result.refused and result.stderr == f"refused (trusted_only): {plan.refusal}"
    assert scores(block(honest), ref) == (1.0, 0.0)  # pytest in the sandbox; refused


# ------------------------------------------------ BigCodeBench rows with mocks

# row index -> wrong bodies of task_func (each fails at least one of the row's tests)
ROW_WRONGS = {
    0: ["    return requests.get(api_url, timeout=5).json()[key]\n",  # no status check
        ("    response = requests.get(api_url)\n    if response.status_code != 200:\n"
         "        raise ValueError('bad')\n    return response.json()[key]\n")],  # no timeout
    1: [("    if not os.path.exists(script_path):\n        raise ValueError('missing')\n"
         "    code = subprocess.run(['python3', script_path], check=False).returncode\n"
         "    return code if wait else None\n"),  # runs and waits even when told not to
        ("    if not os.path.exists(script_path):\n        raise ValueError('missing')\n"
         "    return subprocess.run(['python3', script_path], check=True).returncode\n")],
    2: [("    counts = {}\n    for name in sorted(os.listdir(directory)):\n"
         "        with open(os.path.join(directory, name)) as f:\n"
         "            n = sum(1 for line in f if line.strip())\n"
         "        if name.endswith('.txt'):\n            counts[name] = n\n    return counts\n"),
        ("    counts = {}\n    for name in sorted(os.listdir(directory)):\n"
         "        if name.endswith('.txt'):\n"
         "            with open(os.path.join(directory, name)) as f:\n"
         "                counts[name] = len(f.readlines())\n    return counts\n")],
    3: [("    with smtplib.SMTP(server, port) as smtp:\n"
         "        smtp.sendmail('noreply@example.com', recipients,\n"
         "                      f'Subject: {subject}\\n\\n{body}')\n"
         "    return len(recipients)\n"),  # no retry
        ("    for attempt in range(retries + 1):\n        try:\n"
         "            with smtplib.SMTP(server, port) as smtp:\n"
         "                smtp.sendmail('noreply@example.com', recipients, body)\n"
         "            return len(recipients)\n        except smtplib.SMTPException:\n"
         "            if attempt == retries:\n                raise\n            time.sleep(1)\n")],
    4: ["    return sorted(json.loads(urllib.request.urlopen(url).read().decode('utf-8')))\n",
        ("    with urllib.request.urlopen(url) as response:\n"
         "        return list(json.loads(response.read().decode('utf-8')))\n")],
    # setUp's patcher, a side effect function raising, `m().write` read after the call
    5: [("    try:\n        response = requests.get(url)\n"  # no timeout
         "        response.raise_for_status()\n    except requests.HTTPError:\n        return -1\n"
         "    items = response.json()['items']\n    with open(out_path, 'w') as f:\n"
         "        for item in items:\n            f.write(f'{item}\\n')\n    return len(items)\n"),
        ("    with open(out_path, 'w') as f:\n        try:\n"  # opens the file first
         "            response = requests.get(url, timeout=10)\n"
         "            response.raise_for_status()\n        except requests.HTTPError:\n"
         "            return -1\n        items = response.json()['items']\n"
         "        for item in items:\n            f.write(f'{item}\\n')\n    return len(items)\n"),
        ("    try:\n        response = requests.get(url, timeout=10)\n"  # no status check
         "    except requests.HTTPError:\n        return -1\n"
         "    items = response.json()['items']\n    with open(out_path, 'w') as f:\n"
         "        f.write('\\n'.join(items) + '\\n')\n    return len(items)\n")],
}


@pytest.mark.parametrize("index", sorted(ROW_WRONGS))
def test_bigcodebench_rows_with_mocks(index):
    path = ROWS / "bigcodebench_mocks.jsonl"
    problem = data.load_problems(str(path), question_field="complete_prompt")[index]
    row = [json.loads(line) for line in path.read_text().splitlines()][index]
    plan = testplan.build_plan(problem.answer["tests"], "task_func")
    assert plan.harness is None and plan.untrusted == 0 and plan.trusted >= 2, plan.refusal
    assert plan.mocks
    honest = block(row["code_prompt"] + row["canonical_solution"])
    assert scores(honest, problem.answer) == (1.0, 1.0)
    for wrong in ROW_WRONGS[index]:
        assert scores(block(row["code_prompt"] + wrong), problem.answer) == (0.0, 0.0), wrong


KODCODE_MOCKS = """from unittest.mock import patch
from solution import ask_age

@patch('builtins.input', return_value='41')
def test_age(mock_input):
    assert ask_age() == 42
    mock_input.assert_called_once_with('age? ')

def test_age_block():
    with patch('builtins.input', side_effect=['x', '7']) as m:
        assert ask_age() == 8
    assert m.call_count == 2
"""


def test_pytest_functions_with_patches():
    """KodCode's shape: `from solution import f` and pytest functions with `@patch` or `with
    patch(...)`: held by the trainer as in a TestCase (a decorator's mock is the function's
    parameter)."""
    plan = testplan.build_plan(KODCODE_MOCKS)
    assert plan.harness is None and plan.trusted == 3 and plan.mocks
    honest = ("def ask_age():\n    while True:\n        s = input('age? ')\n"
              "        if s.isdigit():\n            return int(s) + 1\n")
    assert scores(block(honest), KODCODE_MOCKS) == (1.0, 1.0)
    for wrong in ("def ask_age():\n    return int(input('age? ')) + 1\n",  # no retry
                  "def ask_age():\n    return 42 if int(input()) == 41 else 8\n"):  # no prompt
        assert scores(block(wrong), KODCODE_MOCKS) == (0.0, 0.0)


def test_the_plan_and_the_trainer_name_the_same_operators():
    """The operators the plan lets a test configure on a mock (testplan.MOCK_OPERATORS) are the
    ones the trainer's mocks apply for the child (mocks.OPERATIONS), and the judge's entry point
    lives above both modules (rewards/_judge_worker.py), so neither imports the other."""
    from gmts.rewards import _judge_worker, mocks
    assert frozenset(mocks.OPERATIONS) == testplan.MOCK_OPERATORS
    assert callable(_judge_worker.verdict) and not hasattr(testplan, "mocks")


@pytest.mark.parametrize("index", sorted(ROW_WRONGS))
def test_bigcodebench_mock_rows_verdicts_are_unittests(index):
    """The verdicts above are real unittest's on real mocks (in this process: the rows' solutions
    touch nothing but their mocks)."""
    import io
    import unittest
    row = [json.loads(line) for line in (ROWS / "bigcodebench_mocks.jsonl").read_text()
           .splitlines()][index]
    for body, expected in [(row["canonical_solution"], True),
                           *((w, False) for w in ROW_WRONGS[index])]:
        ns = {"__name__": "bigcodebench_row"}
        exec(row["code_prompt"] + body + "\n" + row["test"], ns)  # noqa: S102 - the rows here
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(ns["TestCases"])
        result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
        assert result.wasSuccessful() is expected, body
