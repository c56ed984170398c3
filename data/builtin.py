"""Built-in sources: where each file comes from, and how one row becomes (question, answer, domain,
reward). Each source's splits, then its origin (downloaded once into the cache folder, see
data/files.py):

    gsm8k      train 7473, test 1319
               github openai/grade-school-math @3101c7d (sha256 pinned)
    math       train = MATH-12K, test = MATH-500
               train: HF hiyouga/math12k parquet (needs pyarrow); test as math500
    math500    test 500
               github jincan333/MAS-TTS @ae8f961 data/math500 (sha256 pinned)
    csqa       train 9741, test = dev 1221
               CommonsenseQA's official S3 files (the official test has no labels)
    csqa2      train, test = dev
               github allenai/csqa2 dataset/*.json.gz (yes/no -> choices A/B)
    humaneval  test 164
               github openai/human-eval data/HumanEval.jsonl.gz
    mbpp       train/validation/test/prompt
               github google-research/google-research mbpp/mbpp.jsonl (by task_id)
    kodcode    train
               HF KodCode/KodCode-Light-RL-10K parquet (needs pyarrow)

Files without a pinned sha256 have theirs recorded at first download and checked afterwards.
"""
from .files import RemoteFile

_GSM8K = ("https://raw.githubusercontent.com/openai/grade-school-math/"
          "3101c7d5072418e28b9008a6636bde82a006892c/grade_school_math/data/")
_MATH500 = RemoteFile("math500/test.jsonl", "https://raw.githubusercontent.com/jincan333/MAS-TTS/"
                      "ae8f961818d47860cfbde256b72cbb5c326e6b85/data/math500/test.jsonl",
                      "34943b1a3660c7dc63c7bc89b5ecefc0ffdeeee32501c2ad161cdec34d7a4b4c")
_HF = "https://huggingface.co/datasets/"
_CSQA = "https://s3.amazonaws.com/commensenseqa/"
_CSQA2 = "https://raw.githubusercontent.com/allenai/csqa2/master/dataset/"

FILES = {
    "gsm8k": {
        "train": RemoteFile("gsm8k/train.jsonl", _GSM8K + "train.jsonl",
                            "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
        "test": RemoteFile("gsm8k/test.jsonl", _GSM8K + "test.jsonl",
                           "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14")},
    "math": {"train": RemoteFile("math12k/train.parquet",
                                 _HF
                                 + "hiyouga/math12k/resolve/main/data/train-00000-of-00001.parquet",
                                 None),
             "test": _MATH500},
    "math500": {"test": _MATH500},
    "csqa": {
        "train": RemoteFile("csqa/train_rand_split.jsonl", _CSQA + "train_rand_split.jsonl", None),
             "test": RemoteFile("csqa/dev_rand_split.jsonl", _CSQA + "dev_rand_split.jsonl", None)},
    "csqa2": {
        "train": RemoteFile("csqa2/CSQA2_train.jsonl.gz", _CSQA2 + "CSQA2_train.json.gz", None),
              "test": RemoteFile("csqa2/CSQA2_dev.jsonl.gz", _CSQA2 + "CSQA2_dev.json.gz", None)},
    "humaneval": {"test": RemoteFile("humaneval/HumanEval.jsonl.gz",
                                     "https://raw.githubusercontent.com/openai/human-eval/"
                                     "master/data/HumanEval.jsonl.gz", None)},
    "mbpp": {
        split: RemoteFile("mbpp/mbpp.jsonl", "https://raw.githubusercontent.com/google-research/"
                               "google-research/master/mbpp/mbpp.jsonl", None)
             for split in ("train", "validation", "test", "prompt")},
    "kodcode": {
        "train": RemoteFile("kodcode/train.parquet",
                            _HF + "KodCode/KodCode-Light-RL-10K/resolve/main/"
                                    "data/train-00000-of-00001.parquet", None)},
}
MBPP_TASK_IDS = {"prompt": range(1, 11), "test": range(11, 511), "validation": range(511, 601),
                 "train": range(601, 975)}


def _field(row, name, where):
    if name not in row:
        raise ValueError(f"{where}: missing field {name!r} (fields: {sorted(row)})")
    return row[name]


def gsm8k(row, where):
    answer = str(_field(row, "answer", where))
    if "####" not in answer:
        raise ValueError(f"{where}: GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return {"question": _field(row, "question", where),
            "answer": answer.rsplit("####", 1)[1].strip(),
                "domain": "math", "reward": "gsm8k"}


def math(row, where):
    return {"question": _field(row, "problem", where),
                "answer": str(_field(row, "answer", where)).strip(), "domain": "math",
                "reward": "math"}


def csqa(row, where):
    question = _field(row, "question", where)
    choices = sorted(_field(question, "choices", where), key=lambda c: c["label"])
    return {"question": question["stem"], "choices": [c["text"] for c in choices],
                "answer": _field(row, "answerKey", where), "domain": "choice", "reward": "choice"}


def csqa2(row, where):
    answer = str(_field(row, "answer", where)).strip().lower()
    if answer not in ("yes", "no"):
        raise ValueError(f"{where}: CSQA2 answer must be yes or no, got {answer!r}")
    return {"question": _field(row, "question", where), "choices": ["yes", "no"],
                "answer": "A" if answer == "yes" else "B", "domain": "choice", "reward": "choice"}


def humaneval(row, where):
    prompt = _field(row, "prompt", where)
    return {"question": f"Complete this Python function:\n```python\n{prompt.rstrip()}\n```",
                "answer": {"tests": _field(row, "test", where),
                        "entry_point": _field(row, "entry_point", where),
                        # the harness runs prompt + completion: the prompt's helpers are there
                        "prompt": prompt},
                "domain": "code", "reward": "code"}


def mbpp(row, where):
    tests = _field(row, "test_list", where)
    # Judged: test_list and challenge_test_list (the suite's whole check). Shown: the task text and
    # the first test, as InCoder, bigcode-evaluation-harness and EvalPlus's MBPP+ prompt it (the
    # name, the signature and the return format). The paper's few-shot prompt shows all three
    # tests, but most rows have an empty challenge_test_list: every judged assert would be in the
    # question, and a table of the shown examples would score 1 (rewards/README.md, MBPP).
    judged = tests + list(row.get("challenge_test_list") or [])
    return {"question": f"{_field(row, 'text', where)}\nYour code should pass this test:\n"
                + (tests[0] if tests else ""),
                "answer": {"tests": "\n".join(judged), "setup": row.get("test_setup_code") or ""},
                "domain": "code", "reward": "code"}


def kodcode(row, where):
    declarations = [t.get("function_declaration") for t in (row.get("test_info") or [])
                    if isinstance(t, dict)]
    return {"question": _field(row, "question", where),
                "answer": {"tests": _field(row, "test", where)},
                "starter_code": "\n".join(d for d in declarations if d) or None, "domain": "code",
                "reward": "code"}


CONVERTERS = {"gsm8k": gsm8k, "math": math, "math500": math, "csqa": csqa, "csqa2": csqa2,
              "humaneval": humaneval, "mbpp": mbpp, "kodcode": kodcode}
