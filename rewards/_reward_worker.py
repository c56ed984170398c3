"""The worker process of rewards/isolated.py: imports a run's own reward functions (--reward
FILE:fn) and scores batches sent over its stdin until it closes, each call announced (start, end) so
that the trainer can bound it. Started by isolated.WorkerProcess, never imported by the trainer."""
import os
import pickle
import sys
import threading
import time

from gmts import rewards
from gmts.rewards.isolated import _HEADER


def serve():
    """The worker: imports the SPECs' rewards, then scores batches until its stdin closes."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)                                    # the user's prints: to stderr, not the pipe
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    lock = threading.Lock()
    parent = os.getppid()

    def send(obj):
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        with lock:
            out.write(_HEADER.pack(len(data)) + data)

    def watch_parent():                              # the trainer gone (kill -9): go too
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    path, specs, trusted_only, workers = _read(inp)
    sys.path[:] = path
    rewards._CATCH = BaseException                   # SystemExit, KeyboardInterrupt: the user's
    try:
        loaded = [rewards.load_reward(s, trusted_only=trusted_only) for s in specs]
    except rewards.RewardError as err:
        send(("failed", str(err), err.details))
        return
    except BaseException as err:                     # noqa: BLE001 (sys.exit at import time)
        send(("failed", f"--reward {specs[0]}: importing it raised {rewards._one_line(err)}",
              rewards._user_traceback(err)))
        return
    send(("ready", [r.metadata() for r in loaded]))
    scorer = rewards.Scorer(workers=workers)
    while True:
        msg = _read(inp)
        if msg is None:
            return
        _, jobs, concurrent = msg
        try:
            values = scorer._run([_job(loaded, k, blob, send) for k, blob in enumerate(jobs)],
                                 concurrent)
        except rewards.RewardError as err:
            send(("error", str(err), err.details))
            continue
        send(("scores", values))


def _read(inp):
    head = inp.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    size, data = _HEADER.unpack(head)[0], b""
    while len(data) < size:
        chunk = inp.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return pickle.loads(data)


def _job(loaded, k, blob, send):
    """Scorer._run's job for job k: its own unpickled copy of the arguments, the user's function
    wrapped to announce the call's start and end."""
    index, problem_id, completion, answer, fields = pickle.loads(blob)
    reward = loaded[index]
    fn = reward.fn
    if reward.is_async:
        async def announced(*args, **kwargs):
            send(("start", k))
            try:
                return await fn(*args, **kwargs)
            finally:
                send(("end", k))
    else:
        def announced(*args, **kwargs):
            send(("start", k))
            try:
                return fn(*args, **kwargs)
            finally:
                send(("end", k))
    row = rewards._Row(answer, "", problem_id, fields)
    return announced, reward, completion, row, reward.concurrent
