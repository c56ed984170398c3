"""Mocked TestCases attacked as an adversarial policy would, and honest answers an ordinary
programmer writes (issue 53's mocks, rewards/mocks.py). Each case holds the CORRECT verdict: the one
unittest itself gives (checked by test_expected_verdicts_are_unittests), or 0.0 for a solution that
reaches the channel's internals. Cases the trainer judges wrongly today fail here."""
import io
import json
import os
import subprocess
import sys
import textwrap
import time
import unittest

import pytest
from test_code_reward_mocks import GET, GET_HONEST, SMTP, block, reference, scores


OPEN = """
def test_lines(self):
    with patch('builtins.open', mock_open(read_data='h\\na\\nb\\n')) as m:
        self.assertEqual(task_func('f.txt'), ['a', 'b'])
    m.assert_called_once_with('f.txt')
"""
SLEEP = """
@patch('time.sleep')
def test_a(self, m):
    self.assertEqual(task_func(3), 'done')
    m.assert_called_once_with(3)

@patch('time.sleep')
def test_b(self, m):
    self.assertEqual(task_func(0), 'done')
    m.assert_not_called()
"""
POPEN = """
@patch('subprocess.Popen')
def test_p(self, m):
    self.assertEqual(task_func('s.py'), m.return_value)
    m.assert_called_once_with(['python3', 's.py'])
"""
RUN_LS = """
@patch('subprocess.run')
def test_run(self, m):
    task_func()
    m.assert_called_once_with(['ls', '-l'])
"""
JSON_A = """
@patch('requests.get')
def test_g(self, m):
    m.return_value.json.return_value = {'a': 1}
    self.assertEqual(task_func('u'), 2)
"""
WRITE = """
@patch('builtins.open', new_callable=mock_open)
def test_w(self, m):
    task_func('o.txt', 'hi')
    m.assert_called_once_with('o.txt', 'w')
    m().write.assert_called_once_with('hi')
"""

# name -> (test body, the tests' imports, solution, correct verdict)
# ------------------------------------------------ judged WRONGLY today (these fail)
WRONGLY = {
    # a handle it was never given: `type(stub)(h)` is a stub of any mock of the recipe (mocks.py
    # Session.perform checks only 0 <= h < len(handles)); the with-statement is skipped and
    # `instance` (handle 1) gets the sendmail the test asks for
    "forges_a_handle": (SMTP, "import smtplib", (
        "import smtplib\ndef task_func(to, msg):\n    smtplib.SMTP('localhost', 25)\n"
        "    type(smtplib.SMTP)(1).sendmail('me@x', [to], msg)\n    return True\n"), 0.0),
    # a handle as an argument is not checked at all (mocks.py Session.arg: handles[inner], a
    # negative index included): the mock is called with `instance`, never given to the child
    "forges_a_handle_argument": (
        ("@patch('smtplib.SMTP')\ndef test_send(self, mock_smtp):\n    instance = MagicMock()\n"
         "    mock_smtp.return_value.__enter__.return_value = instance\n    task_func()\n"
         "    mock_smtp.assert_called_once_with(instance)\n"), "import smtplib",
        "import __main__\ndef task_func():\n    __main__._ask(['call', 0, [['h', -1]], {}])\n",
        0.0),
    # the stub of test_a, kept and called in test_b: unittest asserts test_a's record when test_a
    # ends; here the asserts run after the whole run, so the later call counts for test_a
    "calls_a_kept_stub_in_a_later_test": (SLEEP, "import time", (
        "import time\n_kept = []\ndef task_func(n):\n    _kept.append(time.sleep)\n"
        "    if n == 0:\n        _kept[0](3)\n    return 'done'\n"), 0.0),
    # honest: next() on a file; the stub has no __next__ (_sandbox_child._Remote)
    "next_on_a_mock_open_file": (OPEN, "", (
        "def task_func(p):\n    with open(p) as f:\n        next(f)\n"
        "        return [line.strip() for line in f]\n"), 1.0),
    # honest: a loop left early, then the rest read; the stub's iteration takes every line at once
    # (Session.perform "iter"), so readlines() finds none left
    "iteration_left_early": ("""
def test_lines(self):
    with patch('builtins.open', mock_open(read_data='h\\na\\nb\\n')):
        self.assertEqual(task_func('f.txt'), ['a\\n', 'b\\n'])
""", "", ("def task_func(p):\n    with open(p) as f:\n        for line in f:\n            break\n"
          "        return f.readlines()\n"), 1.0),
    # honest: the function returns what Popen returned, and the test compares it with the mock
    "returns_the_mock_the_test_expects": (POPEN, "import subprocess", (
        "import subprocess\ndef task_func(s):\n"
        "    return subprocess.Popen(['python3', s])\n"), 1.0),
    # honest: a mocked method's value is one object, as the test configured it; each reply here
    # is a fresh copy (Session.reply), so a change through one read is lost at the next
    "changes_what_a_mock_returned": (JSON_A, "import requests", (
        "import requests\ndef task_func(u):\n    r = requests.get(u)\n    r.json()['a'] = 2\n"
        "    return r.json()['a']\n"), 1.0),
    # the same solution where the test expects the value before the change: unittest fails it
    "changes_what_a_mock_returned_wrong": (JSON_A.replace("task_func('u'), 2", "task_func('u'), 1"),
                                           "import requests", (
        "import requests\ndef task_func(u):\n    r = requests.get(u)\n    r.json()['a'] = 2\n"
        "    return r.json()['a']\n"), 0.0),
    # Mock keeps references to its arguments (unittest.mock's documented behaviour): the list
    # changed after the call is what the record holds, and the test is written for it; here the
    # argument is a snapshot taken at the call
    "argument_changed_after_the_call": (RUN_LS, "import subprocess", (
        "import subprocess\ndef task_func():\n    cmd = ['ls']\n    subprocess.run(cmd)\n"
        "    cmd.append('-l')\n"), 1.0),
    "argument_changed_after_the_call_wrong": (RUN_LS.replace("'ls', '-l'", "'ls'"),
                                              "import subprocess", (
        "import subprocess\ndef task_func():\n    cmd = ['ls']\n    subprocess.run(cmd)\n"
        "    cmd.append('-l')\n"), 0.0),
    # honest: a stub inside an argument (`[s]`) is sent as an object of the solution's (Opaque,
    # equal only to ANY; _sandbox_child._arg encodes plain data only), so the record differs
    "a_stub_inside_an_argument": ("""
@patch('smtplib.SMTP')
def test_send(self, mock_smtp):
    a = MagicMock()
    mock_smtp.side_effect = [a]
    task_func()
    a.send.assert_called_once_with([a])
""", "import smtplib", ("import smtplib\ndef task_func():\n    s = smtplib.SMTP()\n"
                        "    s.send([s])\n"), 1.0),
    # honest, BigCodeBench's usual socket shape (a name bound to `m.return_value.__enter__
    # .return_value`, then configured through it): refused under trusted_only, so 0.0 there
    "a_name_bound_to_a_mock_path": ("""
@patch('socket.socket')
def test_s(self, m):
    conn = m.return_value.__enter__.return_value
    conn.recv.side_effect = [b'ab', b'c', b'']
    self.assertEqual(task_func('h', 1), b'abc')
    conn.connect.assert_called_once_with(('h', 1))
""", "import socket", (
        "import socket\ndef task_func(h, p):\n"
        "    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:\n"
        "        s.connect((h, p))\n        out = b''\n        while True:\n"
        "            d = s.recv(1024)\n            if not d:\n                return out\n"
        "            out += d\n"), 1.0),
    # honest, BigCodeBench's psutil.process_iter / os.scandir shape: a mock returns a list of
    # mocks; mocks.Session.reply encodes only plain data or one mock, so the child gets TypeError
    "a_mock_returns_a_list_of_mocks": ("""
@patch('os.scandir')
def test_s(self, m):
    a = MagicMock(path='/d/x.txt')
    b = MagicMock(path='/d/y.py')
    m.return_value = [a, b]
    self.assertEqual(task_func('/d'), ['/d/x.txt'])
""", "import os", ("import os\ndef task_func(d):\n"
                  "    return [e.path for e in os.scandir(d) if e.path.endswith('.txt')]\n"), 1.0),
}

# ------------------------------------------------ judged rightly (regression)
RIGHTLY = {
    # the socket shape with a wrong answer (one recv): the configured side effect is the judge's
    "a_name_bound_to_a_mock_path_wrong": (
        WRONGLY["a_name_bound_to_a_mock_path"][0], "import socket", (
            "import socket\ndef task_func(h, p):\n"
            "    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:\n"
            "        s.connect((h, p))\n        return s.recv(1024)\n"), 0.0),
    # a name bound to a mock's path, then the path set again: the name keeps the old object
    # (unittest: the solution's s is the new mock, whose recv gives a mock), refused by the plan
    "a_mock_path_set_again_after_a_name_was_bound": ("""
@patch('socket.socket')
def test_s(self, m):
    conn = m.return_value.__enter__.return_value
    m.return_value.__enter__.return_value = MagicMock()
    conn.recv.side_effect = [b'ab', b'']
    self.assertEqual(task_func('h', 1), b'')
""", "import socket", ("import socket\ndef task_func(h, p):\n"
                       "    with socket.socket() as s:\n        return s.recv(1)\n"), 0.0),
    "forges_handle_zero_first": (SMTP, "import smtplib", (
        "import smtplib\ndef task_func(to, msg):\n    smtplib.SMTP('localhost', 25)\n"
        "    for h in range(8):\n        try:\n"
        "            type(smtplib.SMTP)(h).sendmail('me@x', [to], msg)\n            break\n"
        "        except Exception:\n            pass\n    return True\n"), 0.0),
    "forges_the_end": (GET, "import requests", (
        "import __main__\ndef task_func(u):\n    __main__._send(['end'], reply=False)\n"
        "    return 3\n"), 0.0),
    "module_alias": (GET, "import requests", (
        "import requests as r\ndef task_func(u):\n    return r.get(u, timeout=5).json()['k']\n"),
        1.0),
    "import_at_module_level_is_not_patched": (GET, "import requests", (
        "from requests import get\ndef task_func(u):\n    return get(u, timeout=5).json()['k']\n"),
        0.0),
    "json_loads_text_in_an_fstring": ("""
@patch('requests.get')
def test_get(self, mock_get):
    mock_get.return_value.text = '{"k": 3}'
    self.assertEqual(task_func('http://x'), 'k=3')
    mock_get.assert_called_once_with('http://x')
""", "import requests", ("import json, requests\ndef task_func(u):\n"
                         "    d = json.loads(requests.get(u).text)\n    return f\"k={d['k']}\"\n"),
        1.0),
    "readline_then_iteration": (OPEN, "", (
        "def task_func(p):\n    with open(p) as f:\n        f.readline()\n"
        "        return [line.strip() for line in f]\n"), 1.0),
    "csv_reader_on_a_mock_open_file": (OPEN, "", (
        "import csv\ndef task_func(p):\n    with open(p) as f:\n        r = csv.reader(f)\n"
        "        next(r)\n        return [x[0] for x in r]\n"), 1.0),
    "print_to_a_mock_open_file": ("""
@patch('builtins.open', new_callable=mock_open)
def test_w(self, m):
    task_func('o.txt', 'hi')
    m.return_value.write.assert_any_call('hi')
""", "", "def task_func(p, s):\n    with open(p, 'w') as f:\n        print(s, file=f)\n", 1.0),
    # honest, the unittest docs' own mock_open pattern (`m().write.assert_called_once_with`) after
    # `m.assert_called_once_with`: the test's own m() is a call of the judge's mock, after every
    # call of the solution's, as under unittest
    "write_through_m_call": (WRITE, "", (
        "def task_func(p, s):\n    with open(p, 'w') as f:\n        f.write(s)\n"), 1.0),
    "write_through_m_call_wrong_text": (WRITE, "", (
        "def task_func(p, s):\n    with open(p, 'w') as f:\n        f.write(s + '\\n')\n"),
        0.0),
    # the handle bound first (`handle = m()`), BigCodeBench's other spelling
    "write_through_a_bound_handle": (WRITE.replace(
        "m().write.assert_called_once_with('hi')",
        "handle = m()\n    handle.write.assert_called_once_with('hi')"), "", (
        "def task_func(p, s):\n    with open(p, 'w') as f:\n        f.write(s)\n"), 1.0),
    # the test's m() counts in the record: m was called twice when the last assert reads it, so
    # unittest fails the honest answer
    "the_tests_own_call_is_in_the_record": ("""
@patch('builtins.open', new_callable=mock_open)
def test_w(self, m):
    task_func('o.txt', 'hi')
    m().write.assert_called_once_with('hi')
    m.assert_called_once_with('o.txt', 'w')
""", "", "def task_func(p, s):\n    with open(p, 'w') as f:\n        f.write(s)\n", 0.0),
    # a side effect list: the test's own call takes the next item
    "the_tests_own_call_takes_the_next_side_effect": ("""
@patch('random.random', side_effect=[0.5, 0.25])
def test_r(self, m):
    self.assertEqual(task_func(), 0.5)
    self.assertEqual(m(), 0.25)
""", "import random", "import random\ndef task_func():\n    return random.random()\n", 1.0),
    "the_tests_own_call_takes_the_next_side_effect_wrong": ("""
@patch('random.random', side_effect=[0.5, 0.25])
def test_r(self, m):
    self.assertEqual(task_func(), 0.5)
    self.assertEqual(m(), 0.25)
""", "import random", ("import random\ndef task_func():\n    r = random.random()\n"
                      "    random.random()\n    return r\n"), 0.0),  # StopIteration at m()
    "write_twice": (WRITE, "", (
        "def task_func(p, s):\n    with open(p, 'w') as f:\n        f.write(s)\n"
        "        f.write(s)\n"), 0.0),
    "communicate_returns_a_tuple": ("""
@patch('subprocess.Popen')
def test_p(self, m):
    m.return_value.communicate.return_value = (b'out', b'err')
    self.assertEqual(task_func(), 'out')
""", "import subprocess", (
        "import subprocess\ndef task_func():\n"
        "    p = subprocess.Popen(['x'], stdout=subprocess.PIPE)\n    out, err = p.communicate()\n"
        "    return out.decode()\n"), 1.0),
    "exception_inside_a_with_block": ("""
@patch('smtplib.SMTP')
def test_send(self, mock_smtp):
    mock_smtp.return_value.__enter__.return_value.sendmail.side_effect = \\
        smtplib.SMTPException('x')
    self.assertFalse(task_func())
    mock_smtp.return_value.__exit__.assert_called_once()
""", "import smtplib", (
        "import smtplib\ndef task_func():\n    try:\n        with smtplib.SMTP('h') as s:\n"
        "            s.sendmail('a', ['b'], 'c')\n        return True\n"
        "    except smtplib.SMTPException:\n        return False\n"), 1.0),
    "returns_the_stub_where_a_value_is_expected": (GET, "import requests", (
        "import requests\ndef task_func(u):\n    r = requests.get(u, timeout=5)\n"
        "    return r.json()\n"), 0.0),
    "print_patched": ("""
@patch('builtins.print')
def test_p(self, m):
    task_func(['a', 'b'])
    m.assert_has_calls([call('a'), call('b')])
    self.assertEqual(m.call_count, 2)
""", "", "def task_func(xs):\n    for x in xs:\n        print(x)\n", 1.0),
    "print_patched_once_too_many": ("""
@patch('builtins.print')
def test_p(self, m):
    task_func(['a', 'b'])
    m.assert_has_calls([call('a'), call('b')])
    self.assertEqual(m.call_count, 2)
""", "", "def task_func(xs):\n    for x in xs:\n        print(x)\n    print()\n", 0.0),
    "input_side_effect_until_stopiteration": ("""
@patch('builtins.input', side_effect=['1', '2'])
def test_i(self, m):
    self.assertEqual(task_func(), 3)
""", "", ("def task_func():\n    s = 0\n    try:\n        while True:\n"
          "            s += int(input())\n    except StopIteration:\n        return s\n"), 1.0),
    "mock_open_bytes_json_load": ("""
@patch('builtins.open', new_callable=mock_open, read_data=b'{"a": 1}')
def test_j(self, m):
    self.assertEqual(task_func('f'), {'a': 1})
""", "", ("import json\ndef task_func(p):\n    with open(p, 'rb') as f:\n"
          "        return json.load(f)\n"), 1.0),
    # exceptions as side effects, rebuilt in the child from the test's arguments
    "json_decode_error_as_a_side_effect": ("""
@patch('requests.get')
def test_s(self, m):
    m.return_value.json.side_effect = json.JSONDecodeError('bad', 'doc', 0)
    self.assertIsNone(task_func('u'))
""", "import json, requests", (
        "import requests\ndef task_func(u):\n    try:\n        return requests.get(u).json()\n"
        "    except ValueError:\n        return None\n"), 1.0),
    "called_process_error_keeps_its_returncode": ("""
@patch('subprocess.run', side_effect=subprocess.CalledProcessError(3, 'x'))
def test_s(self, m):
    self.assertEqual(task_func(), 3)
""", "import subprocess", (
        "import subprocess\ndef task_func():\n    try:\n        subprocess.run(['x'], check=True)\n"
        "    except subprocess.CalledProcessError as e:\n        return e.returncode\n"), 1.0),
    "os_error_keeps_its_errno": ("""
@patch('os.remove', side_effect=FileNotFoundError(2, 'No such file'))
def test_s(self, m):
    self.assertEqual(task_func('f'), 2)
""", "import os", ("import os\ndef task_func(p):\n    try:\n        os.remove(p)\n"
                  "    except OSError as e:\n        return e.errno\n"), 1.0),
}
# ------------------------------------------------ identity of the values configuring mocks
# (unittest.mock keeps references: a value two mocks return is one object, a module-level one
# given to the mocks of two tests is one object for both, the test's own name is that object)
TWO_MOCKS_ONE_VALUE = """
@patch('requests.post')
@patch('requests.get')
def test_x(self, mock_get, mock_post):
    data = {'n': 1}
    mock_get.return_value.json.return_value = data
    mock_post.return_value.json.return_value = data
    self.assertEqual(task_func('u'), 2)
"""
SHARED_RESPONSE = """
@patch('requests.get')
def test_a(self, m):
    m.return_value.json.return_value = RESPONSE
    self.assertEqual(task_func('u'), ['a', 'b'])

@patch('requests.get')
def test_b(self, m):
    m.return_value.json.return_value = RESPONSE
    self.assertEqual(task_func('u'), ['a', 'b'])
"""
RESPONSE = "import requests\nRESPONSE = {'users': ['b', 'a'], 'next': None}"
READ_AFTER = """
@patch('requests.get')
def test_x(self, m):
    data = {'items': [3, 1, 2]}
    m.return_value.json.return_value = data
    self.assertEqual(task_func('u'), 3)
    self.assertEqual(data, {'items': [3, 1, 2]})
"""
SHARED_LOG = """
@patch('requests.get')
def test_a(self, m):
    m.return_value.json.return_value = LOG
    task_func('u')
    self.assertEqual(LOG, [1])

@patch('requests.get')
def test_b(self, m):
    m.return_value.json.return_value = LOG
    task_func('u')
    self.assertEqual(LOG, [1, 1])
"""
IDENTITY = {
    "two_mocks_return_one_object": (TWO_MOCKS_ONE_VALUE, "import requests", (
        "import requests\ndef task_func(u):\n    d = requests.get(u).json()\n    d['n'] += 1\n"
        "    return requests.post(u).json()['n']\n"), 1.0),
    "two_mocks_return_one_object_copied": (TWO_MOCKS_ONE_VALUE, "import requests", (
        "import requests\ndef task_func(u):\n    d = dict(requests.get(u).json())\n"
        "    d['n'] += 1\n    return requests.post(u).json()['n']\n"), 0.0),
    # test_a's pop empties the module-level response test_b's mock returns: KeyError there
    "a_shared_response_popped_in_the_first_test": (SHARED_RESPONSE, RESPONSE, (
        "import requests\ndef task_func(u):\n"
        "    return sorted(requests.get(u).json().pop('users'))\n"), 0.0),
    "a_shared_response_read": (SHARED_RESPONSE, RESPONSE, (
        "import requests\ndef task_func(u):\n"
        "    return sorted(requests.get(u).json()['users'])\n"), 1.0),
    "a_shared_response_sorted_in_place": (SHARED_RESPONSE, RESPONSE, (
        "import requests\ndef task_func(u):\n    users = requests.get(u).json()['users']\n"
        "    users.sort()\n    return users\n"), 1.0),
    # the test's own name, read after the call, is what the solution left
    "the_tests_name_read_after_the_call": (READ_AFTER, "import requests", (
        "import requests\ndef task_func(u):\n    return max(requests.get(u).json()['items'])\n"),
        1.0),
    "the_tests_name_read_after_the_call_sorted": (READ_AFTER, "import requests", (
        "import requests\ndef task_func(u):\n    items = requests.get(u).json()['items']\n"
        "    items.sort()\n    return items[-1]\n"), 0.0),
    # read between two calls: judged on the value as the test bound it (an honest solution
    # changes nothing), not refused
    "a_value_read_between_two_calls": ("""
@patch('requests.get')
def test_x(self, m):
    data = {'a': 1, 'b': 2}
    m.return_value.json.return_value = data
    self.assertEqual(task_func('a'), data['a'])
    self.assertEqual(task_func('b'), data['b'])
""", "import requests", ("import requests\ndef task_func(k):\n"
                         "    return requests.get('u').json()[k]\n"), 1.0),
    # each test's asserts read the shared list as that test left it (the judge replays the run
    # unit by unit), not as the last test did
    "a_shared_list_each_test_reads_as_it_left_it": (SHARED_LOG, "import requests\nLOG = []", (
        "import requests\ndef task_func(u):\n    requests.get(u).json().append(1)\n"), 1.0),
    "a_shared_list_appended_once": (SHARED_LOG, "import requests\nLOG = []", (
        "import requests\ndef task_func(u):\n    log = requests.get(u).json()\n"
        "    if not log:\n        log.append(1)\n"), 0.0),
}
# ------------------------------------------------ patchers started by hand (BigCodeBench's setUp)
PATCHER = """
def setUp(self):
    self.patcher = patch('requests.get')
    self.mock_get = self.patcher.start()
    self.addCleanup(self.patcher.stop)

def test_a(self):
    self.mock_get.return_value.json.return_value = {'k': 3}
    self.assertEqual(task_func('u'), 3)
    self.mock_get.assert_called_once_with('u', timeout=5)

def test_b(self):
    self.mock_get.return_value.json.return_value = {'k': 4}
    self.assertEqual(task_func('v'), 4)
"""
PATCHERS = """
def setUp(self):
    self.exists = patch('os.path.exists', return_value=True).start()
    self.listdir_patcher = patch.object(os, 'listdir')
    self.listdir = self.listdir_patcher.start()
    self.addCleanup(patch.stopall)

def tearDown(self):
    self.listdir_patcher.stop()

def test_l(self):
    self.listdir.return_value = ['b.txt', 'a.txt', 'c.csv']
    self.assertEqual(task_func('/d'), ['a.txt', 'b.txt'])
    self.exists.assert_called_once_with('/d')
    self.listdir.assert_called_once_with('/d')
"""
LISTDIR = ("import os\ndef task_func(d):\n    if not os.path.exists(d):\n        return []\n"
           "    return sorted(f for f in os.listdir(d) if f.endswith('.txt'))\n")
STARTED = {
    "a_patcher_started_in_setup": (PATCHER, "import requests", GET_HONEST.replace(
        "    if r.status_code != 200:\n        return None\n", ""), 1.0),
    "a_patcher_started_in_setup_wrong": (PATCHER, "import requests", (
        "import requests\ndef task_func(u):\n    return requests.get(u).json()['k']\n"), 0.0),
    "patchers_stopped_in_teardown_and_by_stopall": (PATCHERS, "import os", LISTDIR, 1.0),
    "patchers_stopped_in_teardown_and_by_stopall_wrong": (PATCHERS, "import os", (
        "import os\ndef task_func(d):\n"
        "    return sorted(f for f in os.listdir(d) if f.endswith('.txt'))\n"), 0.0),
}
# ------------------------------------------------ side effect functions of the tests'
RETRY = """
@patch('requests.get')
def test_x(self, m):
    def fake(url, timeout=None):
        if url == 'a' and timeout == 3:
            return resp
        raise requests.ConnectionError('down: ' + url)
    resp = MagicMock(status_code=200)
    m.side_effect = fake
    self.assertEqual(task_func(['a', 'b']), [200, 'down: b'])
    m.assert_called_with('b', timeout=3)
"""
GETENV = """
@patch('os.getenv')
def test_env(self, m):
    m.side_effect = lambda key, default=None: ENV.get(key, default)
    self.assertEqual(task_func(), 'alice@/home/alice:-')
"""
ENV = "import os\nENV = {'USER': 'alice', 'HOME': '/home/alice'}"
EFFECTS = {
    "a_side_effect_def_returning_a_mock_or_raising": (RETRY, "import requests", (
        "import requests\ndef task_func(us):\n    out = []\n    for u in us:\n        try:\n"
        "            out.append(requests.get(u, timeout=3).status_code)\n"
        "        except requests.ConnectionError as e:\n            out.append(str(e))\n"
        "    return out\n"), 1.0),
    "a_side_effect_def_returning_a_mock_or_raising_no_timeout": (RETRY, "import requests", (
        "import requests\ndef task_func(us):\n    out = []\n    for u in us:\n        try:\n"
        "            out.append(requests.get(u).status_code)\n"
        "        except requests.ConnectionError as e:\n            out.append(str(e))\n"
        "    return out\n"), 0.0),
    "a_side_effect_lambda_reading_a_module_dict": (GETENV, ENV, (
        "import os\ndef task_func():\n"
        "    return f\"{os.getenv('USER')}@{os.getenv('HOME')}:{os.getenv('SHELL', '-')}\"\n"),
        1.0),
    "a_side_effect_lambda_reading_a_module_dict_wrong": (GETENV, ENV, (
        "import os\ndef task_func():\n"
        "    return f\"{os.getenv('USER')}@{os.getenv('HOME')}:{os.getenv('SHELL')}\"\n"), 0.0),
}
CREATE = """
@patch('os.gmts_helper', create=True)
def test_created(self, m):
    m.return_value = 7
    self.assertEqual(task_func(), 8)

def test_gone_afterwards(self):
    self.assertFalse(there())
"""
CREATED = {  # patch(..., create=True): the attribute made for the test, deleted after it
    "a_patch_that_creates_its_target": (CREATE, "import os", (
        "import os\ndef task_func():\n    return os.gmts_helper() + 1\n"
        "def there():\n    return hasattr(os, 'gmts_helper')\n"), 1.0),
    "a_patch_that_creates_its_target_wrong": (CREATE, "import os", (
        "import os\ndef task_func():\n    return os.gmts_helper()\n"
        "def there():\n    return hasattr(os, 'gmts_helper')\n"), 0.0),
    "a_created_target_kept_by_the_solution": (CREATE, "import os", (
        "import os\ndef task_func():\n    return os.gmts_helper() + 1\n"
        "def there():\n    return True\n"), 0.0),
}
CASES = {**WRONGLY, **RIGHTLY, **IDENTITY, **STARTED, **EFFECTS, **CREATED}


# honest idioms the plan still refuses under trusted_only (rewards/README.md, mocks): 0.0 there
NOT_JUDGED_YET = {}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=NOT_JUDGED_YET[n]))
    if n in NOT_JUDGED_YET else n for n in CASES])
def test_mocked_case_is_judged_as_unittest_would(name):
    body, imports, solution, expected = CASES[name]
    ref = dict(reference(body, imports), timeout=4)
    assert scores(block(solution), ref) == (expected, expected), name


# cases whose solution reaches the child's channel (__main__._ask): no unittest oracle for them
ORACLE_SKIPS = {"forges_a_handle_argument", "forges_the_end"}


@pytest.mark.parametrize("name", sorted(set(CASES) - ORACLE_SKIPS))
def test_expected_verdicts_are_unittests(name):
    """The verdict a case holds is the one unittest gives on the real mocks (in this process: the
    solutions here touch nothing but the mocks)."""
    body, imports, solution, expected = CASES[name]
    solution_ns = {"__name__": "solution"}
    exec(solution, solution_ns)  # noqa: S102 - the cases above, written here
    tests_ns = dict(solution_ns, __name__="red_tests")
    exec(reference(body, imports)["tests"], tests_ns)  # noqa: S102
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(tests_ns["TestCases"])
    result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
    assert float(result.wasSuccessful()) == expected


# a chain of 100 child mocks with 10 KB names (1 MB on the channel, far below its 16 MiB): every
# call of the last one makes each ancestor record a call whose dotted name holds every name below
# it (unittest.mock's _increment_mock_call): ~85 MB kept in the trainer per call (measured)
MEMORY_BOMB = textwrap.dedent("""
    import requests
    def task_func(u):
        m = requests.get
        for i in range(100):
            m = getattr(m, 'a' * 10000 + str(i))
        for _ in range(16):
            m()
        return 3
    """)
PEAK = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))
sys.path[:0] = {paths!r}
from test_code_reward_mocks import GET, reference
from gmts.rewards import sandbox
solution = {solution!r}
ref = reference(GET, "import requests")
r = sandbox.run_python(solution, tests=ref["tests"], entry_point="task_func", timeout=10)
print(int(r.passed), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)
"""


def trainer_peak_mb(solution: str) -> tuple[int, int]:
    """(passed, the trainer process's peak RSS in MB) for one run, in a fresh process capped at
    3 GB of address space (soft: the judge sets its own)."""
    out = subprocess.run([sys.executable, "-c", PEAK.format(paths=sys.path, solution=solution)],
                         capture_output=True, text=True, timeout=120, check=True)
    passed, peak = map(int, out.stdout.split()[-2:])
    return passed, peak


def test_the_trainers_memory_is_bounded_by_the_channels_bytes():
    """What a run may make the trainer keep is bounded by the bytes it sends (16 MiB): an honest
    run peaks at ~230 MB here (this process imports the tests), the bomb (~1 MB sent) at ~1.6 GB
    today; it must stay within 300 MB of the honest run."""
    passed, honest_peak = trainer_peak_mb(GET_HONEST)
    assert passed == 1
    passed, bomb_peak = trainer_peak_mb(MEMORY_BOMB)
    assert passed == 0
    assert bomb_peak < honest_peak + 300, (honest_peak, bomb_peak)


def test_a_flood_of_operators_on_many_mocks_is_bounded():
    """Every operator on each of ~1000 mocks (each makes a MagicMock per magic method, which the
    1,000-mock bound does not count): 0, and the run ends."""
    flood = textwrap.dedent("""
        import os, requests
        OPS = (len, bool, str, int, float, iter, os.fspath, lambda x: x == 1, lambda x: x != 1,
               lambda x: 1 in x, lambda x: x < 1, lambda x: x[0], lambda x: x.__enter__())
        def task_func(u):
            for i in range(990):
                h = getattr(requests.get, f'a{i}')
                for op in OPS:
                    try:
                        op(h)
                    except Exception:
                        pass
            return 3
        """)
    passed, peak = trainer_peak_mb(flood)
    assert passed == 0
    assert peak < trainer_peak_mb(GET_HONEST)[1] + 300, peak


# ------------------------------------------------ the channel's handles and unit boundaries
# (rewards/mocks.py Session: given handles, units begun by the child's run_units, bounded chains)
def session_of(body: str, imports: str):
    from gmts.rewards import mocks, testplan
    plan = testplan.build_plan(reference(body, imports)["tests"], "task_func")
    return mocks.Session(plan.mocks, mocks.unit_handles([u.steps for u in plan.units]))


def test_a_handle_is_usable_only_once_given_and_while_its_unit_runs():
    session = session_of(SLEEP, "import time")
    with pytest.raises(ValueError, match="malformed"):
        session.answer(["call", 0, [], {}])  # no unit began yet
    session.answer(["unit", 0, []])
    session.answer(["call", 0, [["d", 3]], {}])
    for request in (["call", 1, [], {}], ["call", 0, [["h", -1]], {}],
                    ["call", 0, [["h", 1]], {}], ["unit", 0, []], ["unit", 2, []],
                    ["unit", "1", []], ["unit", 1], ["unit", 1, [[1]]]):
        with pytest.raises(ValueError, match="malformed"):
            session.answer(request)
    session.answer(["unit", 1, []])
    with pytest.raises(ValueError, match="malformed"):
        session.answer(["call", 0, [], {}])  # test_a's stub, kept: retired
    assert session.handles[0].call_count == 1 and session.handles[1].call_count == 0
    assert not session.finished()
    session.answer(["unit", 2, []])
    assert session.finished()


def test_chains_of_child_mocks_and_attribute_names_are_bounded():
    from gmts.rewards import mocks
    session = session_of(SLEEP, "import time")
    session.answer(["unit", 0, []])
    for name in ("a" * (mocks.MAX_NAME + 1), "a-b", "", 3):
        with pytest.raises(ValueError, match="malformed"):
            session.answer(["get", 0, name])
    h = 0
    for _ in range(mocks.MAX_DEPTH):
        h = session.answer(["get", h, "a"])[1]
    with pytest.raises(ValueError, match="malformed"):
        session.answer(["get", h, "a"])


# solutions reaching the child's channel to move a unit's boundary: 0, however honest otherwise
BOUNDARY_ATTACKS = {
    # begins test_b's unit early (to reach its mock during test_a): the child's own begin of
    # test_b then comes out of order
    "forges_a_unit_begin": (
        "import time, __main__\ndef task_func(n):\n    if n:\n        time.sleep(n)\n"
        "        __main__._ask(['unit', 1])\n    return 'done'\n"),
    # drops the child's begins by rebinding the module's channel functions, calls test_a's stub
    # (kept) in test_b, then begins test_b itself: the call would be test_a's
    "suppresses_the_unit_begins": (
        "import time, __main__\n_orig, _kept = __main__._exchange, []\n"
        "def _x(request, reply, *a, **k):\n    if request[0] == 'unit' and request[1]:\n"
        "        return None\n    return _orig(request, reply, *a, **k)\n"
        "__main__._exchange = _x\n__main__._send = lambda r, reply=True: _x(r, reply)\n"
        "def task_func(n):\n    _kept.append(time.sleep)\n    if n == 0:\n        _kept[0](3)\n"
        "        _orig(['unit', 1, []], True)\n    return 'done'\n"),
}


@pytest.mark.parametrize("name", list(BOUNDARY_ATTACKS))
def test_unit_boundaries_are_the_trainers(name):
    ref = dict(reference(SLEEP, "import time"), timeout=4)
    assert scores(block(BOUNDARY_ATTACKS[name]), ref) == (0.0, 0.0)


def test_a_mock_path_set_again_after_a_name_was_bound_is_refused():
    from gmts.rewards import testplan
    body, imports = CASES["a_mock_path_set_again_after_a_name_was_bound"][:2]
    plan = testplan.build_plan(reference(body, imports)["tests"], "task_func")
    assert "set again after a name was bound" in plan.refusal, plan.refusal


@pytest.mark.parametrize("extra", [0, 1])
def test_the_channel_performs_no_request_past_its_bound(extra):
    """MAX_REQUESTS requests are answered; one more breaks the channel before it is performed (the
    trainer's mock never sees it); the child's "end" is no request."""
    from gmts.rewards import sandbox
    performed = []
    channel = sandbox._Channel(lambda request: performed.append(request) or ["d", 0])
    channel.MAX_REQUESTS = 5
    lines = [["call", 0, [["d", i]], {}] for i in range(5 + extra)] + [["end"]]
    os.write(channel.child_w, "".join(json.dumps(x) + "\n" for x in lines).encode())
    channel.close(channel.child_ends())
    served = channel.serve(time.monotonic() + 10)
    channel.close([channel.requests, channel.replies])
    assert served == ("broken" if extra else "ok")
    assert performed == lines[:5]


# side effects whose cost or reach the solution's arguments would set: never run by the trainer
UNBOUNDED_EFFECTS = {
    "repeat": "lambda n: 'x' * n",
    "power": "lambda n: 2 ** n",
    "format_width": "lambda n: f'{1:{n}}'",
    "percent": "lambda n: '%*d' % (n, 1)",
    "hashing_into_a_set": "lambda xs: len(set(xs))",
    "round_to_huge_digits": "lambda n: round(1, n)",
    "comprehension": "lambda xs: [x for x in xs for y in xs]",
    "a_call_of_the_tests": "lambda x: helper(x)",
    "mutating_the_tests_list": "lambda x: LOG.append(x)",
    "private_attribute": "lambda x: x.__class__",
    "range": "lambda n: list(range(n))",
    "join_by_an_argument": "lambda sep, xs: sep.join(xs)",
}


@pytest.mark.parametrize("name", sorted(UNBOUNDED_EFFECTS))
def test_side_effects_of_unbounded_cost_are_refused(name):
    from gmts.rewards import testplan
    body = (f"@patch('os.getenv')\ndef test_x(self, m):\n    m.side_effect = "
            f"{UNBOUNDED_EFFECTS[name]}\n    self.assertEqual(task_func(3), 3)\n")
    imports = "import os\nLOG = []\ndef helper(x):\n    return x\n"
    plan = testplan.build_plan(reference(body, imports)["tests"], "task_func")
    assert plan.trusted == 0 and "unittest.mock" in plan.refusal, plan.refusal


def test_a_side_effect_loop_in_a_def_is_refused():
    from gmts.rewards import testplan
    body = ("@patch('os.getenv')\ndef test_x(self, m):\n    def fake(n):\n        out = ''\n"
            "        while len(out) < n:\n            out = out + 'x'\n        return out\n"
            "    m.side_effect = fake\n    self.assertEqual(task_func(3), 'xxx')\n")
    plan = testplan.build_plan(reference(body, "import os")["tests"], "task_func")
    assert plan.trusted == 0 and "side effect with While" in plan.refusal, plan.refusal


def test_a_name_a_side_effect_reads_bound_again_is_refused():
    """A lambda reads its free names when called (unittest: the later binding); the trainer's
    Session binds them when the test configures the side effect: a later binding is pytest's."""
    from gmts.rewards import testplan
    body = ("@patch('os.getenv')\ndef test_x(self, m):\n    prefix = 'a'\n"
            "    m.side_effect = lambda k: prefix + k\n    prefix = 'b'\n"
            "    self.assertEqual(task_func(), 'bx')\n")
    plan = testplan.build_plan(reference(body, "import os")["tests"], "task_func")
    assert plan.trusted == 0 and "side effect reads bound again" in plan.refusal, plan.refusal
