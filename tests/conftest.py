import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# one thread per process, children included (mp.spawn's gloo ranks, kernels): each of -n auto's
# workers has a core
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
import pathlib
import subprocess
import sys
import time

import pytest
import torch

torch.set_num_threads(1)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The environment of the command lines the entry-point tests run: offline, one thread, the project
# importable.
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
           PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

# ------------------------------------------------------------------ one worker per CPU, and one
# more (pytest.ini's -n auto; pytest_xdist_auto_num_workers below)
# pytest-xdist runs the suite on workers; each takes the next unit of work of the queue when it is
# almost done with its own. A unit is one test, except:
# - The sandbox tests (SANDBOX_TESTS: node id prefixes) are two units, the first two: SANDBOX_SECOND
#   and the rest. Each runs on one worker, one test after another, at the worker's own priority.
#   Their leak checks count the processes and files of the worker's own run uids: under xdist each
#   worker's runs draw their uids from its own slice of the machine's (pytest_configure below), so
#   no two workers share one. Under xdist, any other test that takes
#   a run uid fails, naming SANDBOX_TESTS.
# - The tests of a module in RUN_MODULES are one unit: they share a module fixture that trains a
#   run, which each worker would train again.
# The queue's order is the collection's: the sandbox groups, then LONG_FIRST (node id prefixes,
# from --durations on 2 cores), the longest first, then the rest in file order. A long unit started
# last would run alone while the other workers wait. The extra worker takes the CPU the sandbox
# tests leave while their runs sleep or wait for a time limit.
SANDBOX_TESTS = (
    "tests/test_sandbox.py",
    "tests/test_code_reward",                                   # every test_code_reward*.py
    "tests/test_rewards.py",
    "tests/test_data.py::test_local_rows_choose_their_domain",  # scores a code row
    "tests/test_data.py::test_other_builtin_formats_from_a_data_folder",   # scores code rows
)
# About half of the sandbox tests' time (--durations on 2 cores), on a worker of its own
SANDBOX_SECOND = (
    "tests/test_sandbox.py",
    "tests/test_code_reward_round3.py",
    "tests/test_code_reward_round5.py",
    "tests/test_code_reward_mocks.py",
    "tests/test_code_reward_checked_parts.py",
)
RUN_MODULES = ("tests/test_bad_input.py", "tests/test_lora.py", "tests/test_run_history.py",
               "tests/test_run_safety.py")
LONG_FIRST = (
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[03",
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[02",
    "tests/test_learning_check.py",
    "tests/test_bench_smoke.py",
    "tests/test_compile.py::test_inductor_decode_step",      # compiles: long where no cache is
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom",
    "tests/test_your_task.py::test_hub_data_set_not_in_the_cache",
    "tests/test_run_safety.py",
    "tests/test_crash_series.py",
    "tests/test_distributed.py::test_torchrun",
    "tests/test_run_history.py",
    "tests/test_gpu_check.py",
    "tests/test_your_task.py::test_the_your_task_page_runs_end_to_end",
    "tests/test_reward_isolation.py",
    "tests/test_workers.py",
    "tests/test_distributed.py::test_shutdown_frees_the_process_group",
    "tests/test_smollm2.py",
    "tests/test_entry_points.py",
    "tests/test_gpu_bench.py",
    "tests/test_install.py",
    "tests/test_bad_input.py",
    "tests/test_lora.py",
    "tests/test_run_end.py",
)


def in_sandbox_group(nodeid):
    return nodeid.startswith(SANDBOX_TESTS)


def _unit(nodeid):
    """The unit of work a test belongs to (see above)."""
    if in_sandbox_group(nodeid):
        return "sandbox-2" if nodeid.startswith(SANDBOX_SECOND) else "sandbox-1"
    return nodeid.split("::")[0] if nodeid.startswith(RUN_MODULES) else nodeid


def _queue_rank(item):
    """Where `item` is in the queue: the sandbox group, LONG_FIRST in order, then the rest."""
    if in_sandbox_group(item.nodeid):
        return -1
    return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)),
                len(LONG_FIRST))


def pytest_configure(config):
    """On an xdist worker: its sandbox runs, and those of the processes it starts, draw their uids
    from its own slice (one of `workercount`) of the machine's (GMTS_SANDBOX_UIDS, environment:
    rewards.sandbox.run_uids), so a leak check counts only its own runs."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    from gmts.rewards.sandbox import run_uids
    uids, index = run_uids(), int(worker["workerid"].removeprefix("gw"))
    size = len(uids) // worker["workercount"]
    first = uids.start + index * size
    os.environ["GMTS_SANDBOX_UIDS"] = ENV["GMTS_SANDBOX_UIDS"] = f"{first}-{first + size - 1}"


@pytest.hookimpl(optionalhook=True)    # an xdist hook
def pytest_xdist_auto_num_workers(config):
    """-n auto: one worker per CPU this process may use, and one more (see above)."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items):
    items.sort(key=_queue_rank)        # stable: each rank keeps its file order


@pytest.hookimpl(optionalhook=True)    # an xdist hook: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """For --dist load (what -n gives): xdist's scheduler of units of work (--dist loadscope's) with
    the units above, queued in the collection's order. (xdist's --dist loadgroup puts its groups in
    the node ids, which pytest 9.2 no longer lets it change: pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _unit(nodeid)
    config.option.loadscopereorder = False     # not by size: the order above
    return Units(config, log)


OTHERS_NICE = 5     # what a worker adds to its niceness when it first runs a test outside the group
_niced = []         # [True] once this worker has


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a test outside SANDBOX_TESTS may not take a run uid, in its fixtures neither: it
    would run beside the sandbox tests, on another worker. Its worker (and what it starts) yields
    the CPU to the sandbox tests' workers: their groups are the longest units of work and their
    tests time their runs. A worker runs its group before anything else, so the niceness, which
    only root can take back, never reaches a sandbox test."""
    if not hasattr(item.config, "workerinput") or in_sandbox_group(item.nodeid):  # not a worker's
        return (yield)
    if not _niced:
        os.nice(OTHERS_NICE)
        _niced.append(True)
    from gmts.rewards import sandbox
    # where a run takes its uid (test_workers.py checks that it still exists)
    reserve = getattr(sandbox, "_reserve_uid", None)
    if reserve is None:
        return (yield)

    def refuse(*args, **kwargs):
        pytest.fail(f"{item.nodeid} runs code in the code reward's sandbox: add it to "
                    "SANDBOX_TESTS in tests/conftest.py, so that it runs on a sandbox tests' "
                    "worker", pytrace=False)
    sandbox._reserve_uid = refuse
    try:
        return (yield)
    finally:
        sandbox._reserve_uid = reserve


# shared/data: public files some tests read, kept beside the clone (../shared/data), never
# committed; another folder with GMTS_TEST_DATA=DIR. Without them those tests skip and say what is
# missing and how to get it.
SHARED_DATA = os.path.abspath(os.environ.get("GMTS_TEST_DATA")
                              or os.path.join(ROOT, "..", "shared", "data"))
_FETCH = {
    "gsm8k": "GSM8K's train.jsonl and test.jsonl (openai/grade-school-math); data/ downloads them, "
             "sha256 pinned: GMTS_DATA_DIR=DIR python -c \"from gmts import data; "
             "data.load_problems('gsm8k', 'train'); data.load_problems('gsm8k', 'test')\"",
    "math500": "MATH-500's test.jsonl; data/ downloads it, sha256 pinned: "
               "GMTS_DATA_DIR=DIR python -c \"from gmts import data; "
               "data.load_problems('math500', 'test')\"",
    "qwen2.5-tokenizer": "the Qwen2.5 tokenizer: hf download Qwen/Qwen2.5-0.5B-Instruct vocab.json "
                         "merges.txt tokenizer_config.json --local-dir DIR/qwen2.5-tokenizer",
    "qwen2.5-configs": "Qwen2.5-{0.5B,1.5B}-Instruct's config.json: hf download "
                       "Qwen/Qwen2.5-1.5B-Instruct config.json --local-dir "
                       "DIR/qwen2.5-configs/Qwen2.5-1.5B-Instruct (and 0.5B)",
}


def shared_data_missing(*parts):
    """Why a test that reads SHARED_DATA/<parts> skips (a line saying what and how to get it), or
    None if there."""
    path = os.path.join(SHARED_DATA, *parts)
    if os.path.exists(path):
        return None
    return (f"no {path}: shared/data holds public files beside the clone, not in the repo; to run "
            f"this test get {_FETCH[parts[0]]}, with DIR = {SHARED_DATA} (or set "
            "GMTS_TEST_DATA=DIR)")


def needs_shared_data(*parts):
    """pytest mark: skip, saying what to fetch, unless SHARED_DATA/<parts> exists."""
    reason = shared_data_missing(*parts)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


_batch_server = []      # [(process, its stderr file)]: tests/_cli_batch.py, one per test process


def _server():
    if not _batch_server or _batch_server[0][0].poll() is not None:
        import tempfile
        err = tempfile.TemporaryFile()  # noqa: SIM115 (open while the server lives)
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "_cli_batch.py")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True, env=ENV, cwd=ROOT, start_new_session=True)
        _batch_server[:] = [(proc, err)]
    return _batch_server[0]


def _server_stderr(err):
    err.seek(0)
    return err.read().decode(errors="replace")[-3000:]


def run_batch(cases, timeout=900):
    """[(script, args)] -> [{"rc", "stdout", "stderr"}], each as its own command line
    (tests/_cli_batch.py: one warm process per test process, each case in a fork of it)."""
    import select
    proc, err = _server()
    proc.stdin.write(json.dumps(cases) + "\n")
    proc.stdin.flush()
    if not select.select([proc.stdout], [], [], timeout)[0]:
        os.killpg(proc.pid, 9)          # the server and the case it runs
        proc.wait()
        raise subprocess.TimeoutExpired(proc.args, timeout)
    line = proc.stdout.readline()
    assert line, _server_stderr(err)    # the server died
    return json.loads(line)


def run_python(argv, cwd=None, env=None, timeout=900):
    """`python *argv` as a subprocess.CompletedProcess (`argv`: [script, *args], ["-c", code,
    *args] or ["-m", module, *args]), in `cwd` (default ROOT) with ENV and `env` (a value None:
    unset), run in a fork of run_batch's warm process: for a command whose start-up is not what
    the test is about (the fork has imported torch, so `env` cannot change what torch reads at its
    import). tests/test_workers.py checks it against the command line."""
    script, *args = argv
    options = {"cwd": str(cwd or ROOT),
               "env": {k: None if v is None else str(v) for k, v in (env or {}).items()}}
    [result] = run_batch([(str(script), [str(a) for a in args], options)], timeout)
    return subprocess.CompletedProcess([sys.executable, *argv], result["rc"], result["stdout"],
                                       result["stderr"])


def pytest_sessionfinish(session):
    for proc, err in _batch_server:     # its stdin ends: it exits
        proc.stdin.close()
        proc.wait(timeout=60)
        err.close()
    _batch_server.clear()


def inside_start_up(proc, timeout=120):
    """Waits until the process `proc` maps torch's library: every entry point sets its Ctrl-C
    handler before it imports torch, and the import takes seconds, so a signal sent now arrives
    during start-up and after the handler, however loaded the machine is."""
    maps, deadline = f"/proc/{proc.pid}/maps", time.time() + timeout
    while os.path.exists(maps) and time.time() < deadline and proc.poll() is None:
        with open(maps) as fh:
            if "libtorch" in fh.read():
                return
        time.sleep(0.01)
    if not os.path.exists(maps):     # no /proc (not Linux): past interpreter start-up, one hopes
        time.sleep(0.5)


def _in_gloo_group(rank, world, worker, out_dir, args):
    """One spawned process: worker(rank, world, *args) inside a gloo group begun and ended as
    train.py does (distributed.init_group, a barrier, distributed.shutdown); its result goes to
    out_dir/{rank}.pt, then the names of the gloo threads still alive to {rank}.threads.json."""
    from gmts.trainer import distributed
    # A forked child's first use of torch's thread pool rebuilds the pool the fork left behind; the
    # rebuild is not thread-safe, and transformers loads weights on 4 threads of its own ("pool
    # INTERNAL ASSERT FAILED ... Invalid thread pool!" now and then): rebuild it here, before any.
    torch.set_num_threads(1)
    distributed.init_group("gloo", init_method=f"file://{out_dir}/init", rank=rank,
                           world_size=world)
    try:
        torch.save(worker(rank, world, *args), os.path.join(out_dir, f"{rank}.pt"))
        distributed.barrier()             # both processes leave together
    finally:
        distributed.shutdown()
    with open(os.path.join(out_dir, f"{rank}.threads.json"), "w") as f:
        json.dump(gloo_threads(), f)


def gloo_threads():
    """The names of this process's threads that gloo runs (none where there is no /proc)."""
    tasks = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []  # Linux
    names = [pathlib.Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in tasks]
    return [n for n in names if "gloo" in n]


def spawn_gloo(worker, out_dir, *args, world=2):
    """[worker(rank, world, *args) for each rank], run in `world` spawned processes sharing one gloo
    group (out_dir: where they meet and leave their results), checking that each ended it for real:
    a gloo thread left alive into the interpreter's teardown aborts a finished process now and then
    ("terminate called without an active exception", SIGABRT), so a thread still alive after
    shutdown fails here every time rather than by chance."""
    import torch.multiprocessing as mp
    # forked where the OS can (Linux): a spawned process would import torch, transformers and the
    # test module again, some 6 CPU-seconds each; the workers seed what they build
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(_in_gloo_group, args=(world, worker, str(out_dir), args), nprocs=world,
                       join=True, start_method=method)
    for rank in range(world):
        with open(os.path.join(str(out_dir), f"{rank}.threads.json")) as f:
            assert json.load(f) == [], f"rank {rank}: gloo threads alive after shutdown"
    return [torch.load(os.path.join(str(out_dir), f"{rank}.pt"), weights_only=False)
            for rank in range(world)]


def tiny_qwen2(vocab_size=64, hidden=16, layers=2, dtype=torch.float32, seed=0):
    """A tiny random Qwen2ForCausalLM built from a config (no download)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.eval()  # no dropout: gradients must be deterministic
    return model


SAMPLER_EOS, SAMPLER_PAD = [5, 7], 0     # the sampler tests' end-of-sequence ids and pad id


def sampler_prompts():
    """Three prompts of different lengths (token ids < 64, tiny_qwen2's vocabulary)."""
    return [[3, 9, 11, 4], [12, 13], [20, 21, 22, 23, 24, 25]]


def sampler_kwargs(seed, **kw):
    """rollout.sample's keyword arguments for the sampler tests: G = 4, 16 new tokens, τ = 1, a
    generator seeded with `seed`; `kw` overrides them."""
    return {"group_size": 4, "max_new_tokens": 16, "eos_token_ids": SAMPLER_EOS,
            "pad_token_id": SAMPLER_PAD, "temperature": 1.0,
            "generator": torch.Generator().manual_seed(seed), **kw}


def build_byte_tokenizer():
    """A byte-level tokenizer with Qwen's chat tokens, built in memory (gmts/tools/toy.py): no
    download."""
    from gmts.tools.toy import byte_tokenizer
    return byte_tokenizer()


def write_tiny_model(path, seed=0, hidden=32, layers=2, favour=None):
    """A tiny random Qwen2 + the byte-level tokenizer saved as an ordinary transformers folder.
    `favour` biases it toward a few characters so that its groups of answers get mixed rewards
    (gmts/tools/toy.py explains how)."""
    from gmts.tools.toy import save_tiny_model
    return save_tiny_model(path, seed=seed, hidden=hidden, layers=layers, favour=favour)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def digit_model_dir(tmp_path_factory):
    """A tiny model that mostly answers "1", "2" or stops: on `digit_data` its groups get mixed
    rewards."""
    return write_tiny_model(tmp_path_factory.mktemp("digit-qwen2"), favour="12 ")


@pytest.fixture(scope="session")
def digit_data(tmp_path_factory):
    from gmts.tools.toy import write_digit_data
    return write_digit_data(tmp_path_factory.mktemp("data") / "digits.jsonl")
