"""One step's reward time: the same answers scored one after another and concurrently
(rewards.Scorer), in turn.

    python bench/bench_reward_time.py               # both cases, 3 rounds (bench/README.md)
    python bench/bench_reward_time.py --code 256 --rounds 5

code: --code answers to one MBPP problem (task 2, three asserts), as a paper-coder step's answers
are all code: a third right, a third wrong, a third not Python; each one a sandboxed run
(rewards/code.py), the built-in reward chosen per row (train.py without --reward). Concurrent:
--workers threads (default: twice the CPUs).
judge: --judge answers scored by a custom reward that waits --judge-ms per answer the way a model
judge behind an HTTP endpoint does (time.sleep releases the GIL as a socket read does), with
--judge-workers threads.
Each round scores the same answers sequentially (concurrent=False), then concurrently; the scores
must be equal.
"""

import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MBPP_2 = {
    "tests": "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))\n"
    "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))\n"
    "assert set(similar_elements((11, 12, 14, 13),(17, 15, 14, 13))) == set((13, 14))\n"
}
ANSWERS = [
    "```python\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```",
    "```python\ndef similar_elements(a, b):\n    return tuple(set(a) | set(b))\n```",
    "```python\ndef similar_elements(a, b)\n    return a\n```",
]
JUDGE = (
    "import time\ndef judge(completion, answer, **fields):\n"
    "    time.sleep({s})\n    return float(len(completion) % 2)\n"
)


class Row:
    def __init__(self, answer, reward, i):
        self.answer, self.reward, self.id, self.fields = (
            answer,
            reward,
            f"bench/{i}",
            {"question": "q"},
        )


def timed(scorer, completions, rows, concurrent):
    start = time.perf_counter()
    scores = scorer.score(completions, rows, concurrent=concurrent).total
    return time.perf_counter() - start, scores


def side_by_side(name, scorer, completions, rows, rounds):
    sequential, concurrent = [], []
    for _ in range(rounds):
        t_seq, s_seq = timed(scorer, completions, rows, False)
        t_con, s_con = timed(scorer, completions, rows, True)
        assert s_seq == s_con, f"{name}: the scores differ"
        sequential.append(t_seq)
        concurrent.append(t_con)
    a, b = statistics.median(sequential), statistics.median(concurrent)
    print(
        f"{name}: {len(completions)} answers, {scorer.workers} threads; sequential {a:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in sequential)}), concurrent {b:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in concurrent)}): {a / b:.2f}x; "
        f"mean reward {sum(s_seq) / len(s_seq):.3f}",
        flush=True,
    )


def main():
    from gmts import rewards

    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", type=int, default=96, help="code answers (0 = skip)")
    p.add_argument(
        "--workers", type=int, default=0, help="threads for the code case (0 = twice the CPUs)"
    )
    p.add_argument(
        "--judge", type=int, default=64, help="answers for the waiting custom reward (0 = skip)"
    )
    p.add_argument("--judge-ms", type=float, default=50.0)
    p.add_argument("--judge-workers", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start",
        flush=True,
    )
    if args.code:
        completions = [ANSWERS[i % 3] for i in range(args.code)]
        rows = [Row(MBPP_2, "code", i) for i in range(args.code)]
        side_by_side(
            "code (built-in, per row)",
            rewards.Scorer(workers=args.workers or None),
            completions,
            rows,
            args.rounds,
        )
    if args.judge:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "judge.py")
            with open(path, "w") as f:
                f.write(JUDGE.format(s=args.judge_ms / 1000))
            scorer = rewards.Scorer(
                rewards.load_rewards([f"{path}:judge"]), workers=args.judge_workers
            )
            completions = [f"answer {'x' * (i % 5)}" for i in range(args.judge)]
            side_by_side(
                f"custom judge waiting {args.judge_ms:.0f} ms",
                scorer,
                completions,
                [Row("a", "gsm8k", i) for i in range(args.judge)],
                args.rounds,
            )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
