"""A user's reward function cannot take the trainer down (rewards/isolated.py): each way it can fail
is one line naming it, the trainer's process survives, a call gets copies and bounded time, a signal
ends the wait; train.py stops with nothing of the step kept and resumes exactly."""

import os
import signal
import subprocess
import sys
import time

import pytest

from gmts import rewards
from gmts.rewards import _Row
from test_bad_input import ENV, ROOT, read_jsonl, run_batch, train_args
from test_run_safety import same_metrics

USER = '''
import ctypes, os, signal, sys, time

def exits(completion, answer, **fields):
    sys.exit(3)

def hard_exit(completion, answer, **fields):
    os._exit(0)

def segfault(completion, answer, **fields):
    ctypes.string_at(0)

def interrupts(completion, answer, **fields):
    raise KeyboardInterrupt

def hangs(completion, answer, **fields):
    time.sleep(1000)

def huge(completion, answer, **fields):
    return 1e39          # finite in Python, infinite in float32

def mutates(completion, answer, **fields):
    """Counts its calls in its row: with copies, every call sees the row as the data has it."""
    fields["seen"] = fields.get("seen", 0) + 1
    answer.append("x")
    return float(fields["seen"] + len(answer))

def prints(completion, answer, **fields):
    print("a line on stdout")
    return 0.5
'''
IMPORT_EXITS = "import sys\nsys.exit(4)\ndef f(completion, answer, **fields):\n    return 0.0\n"


@pytest.fixture
def user(tmp_path):
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "import_exits.py").write_text(IMPORT_EXITS)
    return str(tmp_path / "user.py")


def rows(answer="1"):
    return [_Row(answer, "", f"p{i}", {"question": "q"}) for i in range(3)]


@pytest.mark.parametrize("name, said", [
    ("exits", "exits raised SystemExit: 3 on problem p0"),
    ("hard_exit", "hard_exit ended its worker process (exit status 0, without returning"),
    ("segfault", "segfault ended its worker process (killed by signal 11 (SIGSEGV)) on problem p0"),
    ("interrupts", "interrupts raised KeyboardInterrupt on problem p0"),
    ("hangs", "hangs did not return within 1 s on problem p0"),
    ("huge", "huge returned 1e+39 for problem p0"),
])
def test_each_failure_is_one_line_naming_the_reward_and_the_trainer_goes_on(user, name, said):
    scorer = rewards.scorer_for([f"{user}:{name}", "gsm8k"], timeout=1)
    t = time.monotonic()
    with pytest.raises(rewards.RewardError) as err:
        scorer.score(["1"], rows()[:1])
    assert time.monotonic() - t < 30                     # the hang: 1 s and a kill, not 1000 s
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"--reward {user}:{name}: ") and said in line, line
    # the same scorer starts a fresh worker: a reward that works in it scores at once
    fine = rewards.scorer_for([f"{user}:prints", "gsm8k"], timeout=1)
    assert fine.score(["1"], rows()[:1]).values == {"prints": [0.5], "gsm8k": [1.0]}
    fine.close()
    scorer.close()


def test_an_exit_at_import_is_one_line(user, tmp_path):
    path = str(tmp_path / "import_exits.py")
    with pytest.raises(rewards.RewardError, match="importing .* raised SystemExit: 4"):
        rewards.scorer_for([f"{path}:f"])


def test_a_worker_that_died_is_started_again_by_the_next_batch(user):
    scorer = rewards.scorer_for([f"{user}:hangs", f"{user}:prints"], timeout=0.5)
    pid = scorer.rewards[0][0].worker.proc.pid
    with pytest.raises(rewards.RewardError, match="did not return"):
        scorer.score(["1"], rows()[:1])
    assert scorer.rewards[0][0].worker.proc is None
    with pytest.raises(ProcessLookupError):      # the hung worker was killed, not left behind
        os.kill(pid, 0)
    with pytest.raises(rewards.RewardError, match="did not return"):
        scorer.score(["1"], rows()[:1])          # a fresh worker, the same verdict
    scorer.close()


def test_each_call_gets_copies_so_a_mutation_changes_nothing(user):
    """Without copies the row's count would grow from call to call (and differ after a resume,
    which reloads the data): every call returns seen 1 + the answer's 1 + the appended 1."""
    problems = rows(["a"])
    scorer = rewards.scorer_for([f"{user}:mutates"], workers=1)
    first = scorer.score(["a"] * 6, problems * 2).values["mutates"]
    again = scorer.score(["a"] * 6, problems * 2).values["mutates"]
    assert first == again == [3.0] * 6
    assert all(p.fields == {"question": "q"} and p.answer == ["a"] for p in problems)
    scorer.close()


def test_a_signal_ends_the_wait_on_a_hung_reward_at_once(user):
    scorer = rewards.scorer_for([f"{user}:hangs"], timeout=600)
    t0 = time.monotonic()
    rewards.set_interrupt_check(lambda: 15 if time.monotonic() - t0 > 0.5 else 0)
    try:
        with pytest.raises(rewards.ScoringStopped) as stopped:
            scorer.score(["1"], rows()[:1])
    finally:
        rewards.set_interrupt_check(None)
    # 0.5 s until the "signal", a poll of 0.2 s, a kill: far below a second's slack
    assert stopped.value.signum == 15 and time.monotonic() - t0 < 5
    assert scorer.rewards[0][0].worker.proc is None


def test_the_weighted_sum_must_be_finite_in_float32_too(user, tmp_path):
    (tmp_path / "big.py").write_text("def big(completion, answer, **fields):\n    return 3e38\n")
    scorer = rewards.scorer_for([f"{tmp_path / 'big.py'}:big"], "2")
    with pytest.raises(rewards.RewardError, match="--reward-weights: R = 6e\\+38 for problem p0"):
        scorer.score(["1"], rows()[:1])
    scorer.close()


# --------------------------------------------------------------------------------------------------
# train.py end to end: a reward that fails in step 2 (a flag file next to it says how).

STEP_TWO = '''
import os, time
FLAG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flag")
calls = 0

def r(completion, answer, **fields):
    global calls
    calls += 1
    if calls > 8 and os.path.exists(FLAG):       # step 1 is 2 prompts x 4 answers
        how = open(FLAG).read()
        if how == "hang":
            open(FLAG + ".hanging", "w").write(str(os.getpid()))
            time.sleep(1000)
        os._exit(0)
    return 1.0 if completion.strip() == answer else 0.0
'''


def test_a_reward_that_exits_or_hangs_in_step_2_stops_the_run_which_resumes_exactly(
        digit_model_dir, digit_data, tmp_path):
    (tmp_path / "r.py").write_text(STEP_TWO)
    (tmp_path / "clean").mkdir()
    clean = tmp_path / "clean" / "r.py"
    clean.write_text(STEP_TWO)
    flag = tmp_path / "flag"
    reward = ["--reward", f"{tmp_path / 'r.py'}:r"]
    exits, hangs, straight = tmp_path / "exits", tmp_path / "hangs", tmp_path / "straight"
    flag.write_text("exit")
    failed, done = run_batch([("train.py", train_args(digit_model_dir, digit_data, exits, *reward)),
                              # the straight run: the same reward, with no flag beside it
                              ("train.py", train_args(digit_model_dir, digit_data, straight,
                                                      "--reward", f"{clean}:r"))])
    assert done["rc"] == 0, done["stderr"][-2000:]
    line = f"error: --reward {tmp_path / 'r.py'}:r: r ended its worker process (exit status 0"
    lines = failed["stderr"].strip().splitlines()
    assert failed["rc"] == 1 and lines[-1].startswith(line), failed["stderr"][-2000:]
    assert lines[-1].endswith(f"the run stopped in step 2, which is not kept: resume with "
                              f"--resume {exits}")
    assert [m["step"] for m in read_jsonl(exits / "metrics.jsonl")] == [1]

    # a hang, and SIGTERM: the run stops within seconds, not after the 600 s --reward-timeout
    flag.write_text("hang")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "train.py"),
         *train_args(digit_model_dir, digit_data, hangs, *reward, "--reward-timeout", "600")],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hanging = tmp_path / "flag.hanging"
    deadline = time.time() + 300
    while not (hanging.exists() and hanging.read_text()) and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.1)
    assert hanging.exists(), proc.communicate()
    worker = int(hanging.read_text())
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert time.monotonic() - t < 30, "the signal did not end the wait"   # 0.2 s polls + exit
    assert (f"gmts: stopped by signal 15 in step 2, while rewards were scoring (the step is not "
            f"kept); resume with --resume {hangs}") in err
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)                        # the hung worker did not outlive the run

    flag.unlink()
    results = run_batch([
        ("train.py", train_args(digit_model_dir, digit_data, exits, *reward, "--resume",
                                str(exits))),
        ("train.py", train_args(digit_model_dir, digit_data, hangs, *reward, "--resume",
                                str(hangs)))])
    for result in results:
        assert result["rc"] == 0, result["stderr"][-2000:]
    want = read_jsonl(straight / "metrics.jsonl")
    assert len(want) == 2
    for run in (exits, hangs):
        assert same_metrics(read_jsonl(run / "metrics.jsonl"), want)
