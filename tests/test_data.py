"""data/: built-in sources from a data folder (no downloads), local files and their errors, the
arithmetic task, templates, the download cache's checksums, and the decontamination report."""
import gzip
import hashlib
import json
import os
import pathlib

import pytest

from gmts import data
from conftest import SHARED_DATA, needs_shared_data, shared_data_missing
from gmts.data import arithmetic, files, templates
from gmts.rewards import get_reward

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = SHARED_DATA                       # ../shared/data (tests/conftest.py says what it holds)
needs_gsm8k = needs_shared_data("gsm8k")


@pytest.fixture(autouse=True)
def never_download(monkeypatch):
    monkeypatch.setenv("GMTS_OFFLINE", "1")


def write_jsonl(path, rows, raw_lines=()):
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
        f.writelines(line + "\n" for line in raw_lines)
    return str(path)


# ------------------------------------------------------------------ built-in sources from
# shared/data


@needs_gsm8k
def test_gsm8k_from_relative_data_dir(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("GMTS_DATA_DIR", os.path.relpath(SHARED, REPO))
    test = data.load_problems("gsm8k", "test")
    train = data.load_problems("gsm8k", "train", limit=5)
    assert len(test) == 1319 and len(train) == 5
    first = test[0]
    assert (first.id == "gsm8k/test/0" and first.answer == "18" and first.domain == "math"
            and first.reward == "gsm8k")
    assert first.question.startswith("Janet")
    assert first.messages == [{"role": "system", "content": templates.MATH_SYSTEM},
                              {"role": "user", "content": first.question}]
    assert (templates.MATH_SYSTEM
            == "Please reason step by step, and put your final answer within \\boxed{}.")
    assert train[0].answer == "72" and train[0].question.startswith("Natalia")
    assert [p.id for p in data.load_problems("gsm8k", "test", limit=3)] == [p.id for p in test[:3]]
    with pytest.raises(ValueError, match="splits"):
        data.load_problems("gsm8k", "dev")
    with pytest.raises(ValueError, match="local files"):
        data.load_problems("gsm8k", "test", question_field="q")


@needs_shared_data("math500", "test.jsonl")
def test_math500_and_math_test_split(monkeypatch):
    monkeypatch.setenv("GMTS_DATA_DIR", SHARED)
    problems = data.load_problems("math500", "test")
    assert len(problems) == 500 and all(p.reward == "math" for p in problems)
    assert data.load_problems("math", "test", limit=2)[1].answer == problems[1].answer
    assert get_reward("math")(f"so \\boxed{{{problems[0].answer}}}", problems[0].answer) == 1.0


def test_offline_missing_file_names_file_and_origin(tmp_path, monkeypatch):
    monkeypatch.setenv("GMTS_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        data.load_problems("gsm8k", "test")
    message = str(err.value)
    assert (str(tmp_path / "gsm8k" / "test.jsonl") in message
            and "openai/grade-school-math" in message)
    assert "3730d312" in message  # the sha256 to check a hand-placed file against
    # parquet sources also accept a .jsonl copy
    with pytest.raises(FileNotFoundError, match="JSON lines"):
        data.load_problems("kodcode", "train")


@needs_gsm8k
def test_checksum_mismatch_is_refused(tmp_path, monkeypatch):
    (tmp_path / "gsm8k").mkdir()
    with open(os.path.join(SHARED, "gsm8k", "test.jsonl"), "rb") as f:
        content = f.read()
    (tmp_path / "gsm8k" / "test.jsonl").write_bytes(content.replace(b"#### 18", b"#### 19", 1))
    monkeypatch.setenv("GMTS_DATA_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="sha256"):
        data.load_problems("gsm8k", "test")


def test_download_records_and_checks_checksums(tmp_path, monkeypatch):
    source = write_jsonl(tmp_path / "origin.jsonl", [{"question": "q", "answer": "1"}])
    digest = hashlib.sha256(pathlib.Path(source).read_bytes()).hexdigest()
    monkeypatch.setenv("GMTS_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GMTS_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # file:// so no network is used
    pinned = files.RemoteFile("demo/a.jsonl", "file://" + source, digest)
    assert files.fetch(pinned) == str(tmp_path / "cache" / "demo" / "a.jsonl")
    with pytest.raises(ValueError, match="sha256"):
        files.fetch(files.RemoteFile("demo/b.jsonl", "file://" + source, "0" * 64))
    unpinned = files.RemoteFile("demo/c.jsonl", "file://" + source, None)
    path = files.fetch(unpinned)
    # recorded at first download
    assert pathlib.Path(path + ".sha256").read_text().strip() == digest
    with open(path, "a") as f:
        f.write("\n")
    with pytest.raises(ValueError, match="sha256"):  # and checked on later loads
        files.fetch(unpinned)
    with pytest.raises(FileNotFoundError, match="could not download"):
        files.fetch(
            files.RemoteFile("demo/d.jsonl", "file://" + str(tmp_path / "missing.jsonl"), None))


def test_other_builtin_formats_from_a_data_folder(tmp_path, monkeypatch):
    """Rows in each upstream format, placed by hand (the real files cannot be downloaded in
    tests)."""
    for name in ("csqa", "csqa2", "humaneval", "mbpp", "kodcode"):
        (tmp_path / name).mkdir()
    write_jsonl(tmp_path / "csqa" / "dev_rand_split.jsonl",
                [{"id": "x", "answerKey": "B", "question": {
        "stem": "Where do fish live?",
                    "choices": [{"label": "B", "text": "water"}, {"label": "A", "text": "air"}]}}])
    with gzip.open(tmp_path / "csqa2" / "CSQA2_dev.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "y", "question": "Is water wet?", "answer": "no"}) + "\n")
    with gzip.open(tmp_path / "humaneval" / "HumanEval.jsonl.gz", "wt") as f:
        f.write(json.dumps({"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    "
                                                                "\"\"\"Add.\"\"\"\n",
                            "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
                            "entry_point": "add"}) + "\n")
    write_jsonl(tmp_path / "mbpp" / "mbpp.jsonl", [
        {"task_id": t, "text": f"Write add number {t}.", "test_list": ["assert add(1, 2) == 3"],
         "test_setup_code": ""} for t in (5, 11, 12, 600, 601)])
    write_jsonl(tmp_path / "kodcode" / "train.jsonl", [{"question": "Add two numbers.", "test": (
        "from solution import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"), "test_info": [
        {"function_name": "add", "function_declaration": "def add(a, b):"}]}])
    monkeypatch.setenv("GMTS_DATA_DIR", str(tmp_path))

    csqa = data.load_problems("csqa", "test")[0]
    assert csqa.question == "Where do fish live?\n\nA. air\nB. water" and csqa.answer == "B"
    # paper: same as math
    assert csqa.reward == "choice" and csqa.messages[0]["content"] == templates.MATH_SYSTEM
    csqa2 = data.load_problems("csqa2", "test", template="choice-letter")[0]
    assert csqa2.answer == "B" and csqa2.question.endswith("A. yes\nB. no")
    assert [p.id for p in data.load_problems("mbpp", "test")] == ["mbpp/test/0", "mbpp/test/1"]
    assert len(data.load_problems("mbpp", "train")) == 1 and len(
        data.load_problems("mbpp", "prompt")) == 1
    solution = "```python\ndef add(a, b):\n    return a + b\n```"
    for source, split in (("humaneval", "test"), ("mbpp", "test"), ("kodcode", "train")):
        problem = data.load_problems(source, split)[0]
        assert problem.domain == "code" and problem.messages[0]["content"] == templates.QWEN_SYSTEM
        assert "self-contained Python script" in problem.messages[1]["content"]
        assert get_reward(problem.reward)(solution, problem.answer) == 1.0, source
        assert (get_reward(problem.reward)(solution.replace("a + b", "a - b"), problem.answer)
                == 0.0), source
    # starter code
    assert "def add(a, b):" in data.load_problems("kodcode", "train")[0].messages[1]["content"]


# ------------------------------------------------------------------ local files


def test_local_jsonl_defaults_and_field_mapping(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl",
                       [{"question": "1+1?", "answer": 2}, {"question": "2+2?", "answer": "4"}])
    problems = data.load_problems(path, limit=1)
    assert len(problems) == 1 and problems[0].id == "mine/0" and problems[0].answer == "2"
    assert problems[0].reward == "gsm8k" and problems[0].domain == "math"
    other = write_jsonl(tmp_path / "other.jsonl",
                        [{"q": "What is 3+4?", "gold": "7", "id": "custom-1"}])
    problem = data.load_problems(other, question_field="q", answer_field="gold", reward="math")[0]
    assert (problem.id, problem.question, problem.answer, problem.reward) == (
        "custom-1", "What is 3+4?", "7", "math")


def test_question_field_formats_several_fields(tmp_path):
    rows = [{"Body": "Tom has 3 apples and buys 4.", "Question": "How many now?", "Answer": "7"},
            {"Body": "Ann has {5} pens.", "Question": "How many?", "Answer": 5}]
    path = write_jsonl(tmp_path / "split.jsonl", rows)
    first, second = data.load_problems(path, question_field="{Body} {Question}",
                                       answer_field="Answer")
    assert first.question == "Tom has 3 apples and buys 4. How many now?" and first.answer == "7"
    # braces in a VALUE are kept as text
    assert second.question == "Ann has {5} pens. How many?"
    assert first.messages[-1] == {"role": "user", "content": first.question}
    literal = data.load_problems(path, question_field="Q: {Question} {{context}}",
                                 answer_field="Answer")[0]
    assert literal.question == "Q: How many now? {context}"
    assert (data.load_problems(path, question_field="Question", answer_field="Answer")[0].question
            == "How many now?")
    gap = write_jsonl(tmp_path / "gap.jsonl", [rows[0], {"Body": "x", "Answer": "1"}])
    with pytest.raises(ValueError, match=r"gap\.jsonl:2: no field 'Question' for question_field "
                                         r"'\{Body\} \{Question\}' "
                                         r"\(fields: \['Answer', 'Body'\]\)"):
        data.load_problems(gap, question_field="{Body} {Question}", answer_field="Answer")
    with pytest.raises(ValueError, match="not a valid format"):
        data.load_problems(path, question_field="{Body", answer_field="Answer")
    with pytest.raises(ValueError, match="not a plain field name"):
        data.load_problems(path, question_field="{Body[0]}", answer_field="Answer")


def test_local_rows_choose_their_domain(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"question": "Sky colour?", "choices": ["red", "blue"], "answer": "blue"},
        {"question": "Pick", "choices": ["x", "y", "z"], "answer": 2},
        {"question": "Which? A. x B. y", "domain": "choice", "answer": "(b)"},
        {"question": "Write add.", "tests": ["assert add(1, 2) == 3"]},
        {"question": "Echo", "cases": [{"input": "5\n", "output": "5\n"}]},
        {"problem": "x?", "final_answer": "\\frac{1}{2}", "reward": "math"},
    ])
    blue, z, b, add, echo, frac = data.load_problems(path)
    assert (blue.domain, blue.answer, blue.question) == ("choice", "B",
                                                         "Sky colour?\n\nA. red\nB. blue")
    assert z.answer == "C" and b.answer == "B"
    assert add.domain == "code" and add.answer["tests"] == "assert add(1, 2) == 3"
    assert echo.answer == {"cases": [{"input": "5\n", "output": "5\n"}]}
    assert get_reward("code")("```python\nprint(input())\n```", echo.answer) == 1.0
    assert frac.reward == "math" and get_reward(frac.reward)("\\boxed{0.5}", frac.answer) == 1.0


def test_malformed_local_data_errors_name_the_place(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "a", "answer": "1"}],
                      raw_lines=["", "{not json"])
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: invalid JSON"):
        data.load_problems(bad)
    missing = write_jsonl(tmp_path / "missing.jsonl",
                          [{"question": "a", "answer": "1"}, {"text": "b"}])
    with pytest.raises(ValueError, match=r"missing\.jsonl:2: no question field "
                                         r".*text.*question_field"):
        data.load_problems(missing)
    no_answer = write_jsonl(tmp_path / "noanswer.jsonl", [{"question": "a"}])
    with pytest.raises(ValueError, match=r"noanswer\.jsonl:1: no answer field"):
        data.load_problems(no_answer)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ValueError, match="empty file"):
        data.load_problems(str(tmp_path / "empty.jsonl"))
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(ValueError, match="empty file"):
        data.load_problems(str(tmp_path / "empty.json"))
    (tmp_path / "broken.json").write_text('[{"question": "a",\n "answer": }]')
    with pytest.raises(ValueError, match=r"broken\.json:2: invalid JSON"):
        data.load_problems(str(tmp_path / "broken.json"))
    (tmp_path / "list.jsonl").write_text('["not", "an object"]\n')
    with pytest.raises(ValueError, match=r"list\.jsonl:1: expected a JSON object"):
        data.load_problems(str(tmp_path / "list.jsonl"))
    bad_choice = write_jsonl(tmp_path / "c.jsonl",
                             [{"question": "q", "choices": ["a", "b"], "answer": "maybe"}])
    with pytest.raises(ValueError, match=r"c\.jsonl:1: answer 'maybe'"):
        data.load_problems(bad_choice)
    with pytest.raises(ValueError, match="domain must be"):
        data.load_problems(
            write_jsonl(tmp_path / "d.jsonl",
                        [{"question": "q", "answer": "1", "domain": "poetry"}]))
    with pytest.raises(FileNotFoundError):
        data.load_problems(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="unknown source"):
        data.load_problems("gsm9k")
    with pytest.raises(ValueError, match="local files take"):
        data.load_problems(str(tmp_path / "list.jsonl"), digits=3)


def test_json_file_forms(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"question": "q1", "answer": "1"}]))
    (tmp_path / "b.json").write_text(
        json.dumps({"data": [{"question": "q2", "answer": "2"}], "version": 1}))
    assert data.load_problems(str(tmp_path / "a.json"))[0].answer == "1"
    assert data.load_problems(str(tmp_path / "b.json"))[0].answer == "2"


# ------------------------------------------------------------------ arithmetic


def test_arithmetic_is_deterministic_correct_and_split_disjoint():
    a = data.load_problems("arithmetic", "train", seed=3, n=50)
    assert [p.question for p in a] == [
        p.question for p in data.load_problems("arithmetic", "train", seed=3, n=50)]
    assert [p.question for p in a] != [
        p.question for p in data.load_problems("arithmetic", "train", seed=4, n=50)]
    for p in data.load_problems("arithmetic", "train", n=300, digits=2, terms=4, ops="+-*"):
        expression = p.question.removeprefix("What is ").removesuffix("?")
        # the independent check: Python's own precedence rules
        assert int(p.answer) == eval(expression)
        assert (p.reward == "gsm8k"
                and get_reward(p.reward)(f"\\boxed{{{p.answer}}}", p.answer) == 1.0)
    train = {
        p.question for p in data.load_problems("arithmetic", "train", n=3000, digits=1, terms=3)}
    test = {p.question for p in data.load_problems("arithmetic", "test", n=200, digits=1, terms=3)}
    assert len(train) == 3000 and len(test) == 200 and not train & test
    big = data.load_problems("arithmetic", "test", n=20, digits=4, min_digits=4, terms=2)
    assert all(len(t) == 4 for p in big for t in p.question[8:-1].split(" ")[::2])
    with pytest.raises(ValueError, match="distinct"):
        arithmetic.generate("test", n=500, digits=1, terms=2, ops="+")
    with pytest.raises(ValueError, match="bad arithmetic options"):
        data.load_problems("arithmetic", "train", ops="/")
    with pytest.raises(ValueError, match="splits"):
        data.load_problems("arithmetic", "holdout")


def test_arithmetic_max_operand():
    # operands uniform on 0..max_operand: 31 x 31 = 961 sums of two, of which the hash puts about 1
    # in 10 in test
    test = data.load_problems("arithmetic", "test", n=100, max_operand=30, terms=2, ops="+")
    train = data.load_problems("arithmetic", "train", n=800, max_operand=30, terms=2, ops="+")
    operands = [int(t) for p in test + train for t in p.question[8:-1].split(" + ")]
    assert min(operands) == 0 and max(operands) == 30 and len(set(operands)) == 31
    assert all(int(p.answer) == sum(int(t) for t in p.question[8:-1].split(" + ")) for p in test
               + train)
    assert not {p.question for p in test} & {p.question for p in train}
    # the existing digit streams are untouched by the new knob
    assert ([p.question for p in data.load_problems("arithmetic", "test", n=5, digits=2, terms=2)]
            == [p.question for p in data.load_problems("arithmetic", "test", n=5, digits=2,
                                                       terms=2, max_operand=None)])
    # all there are
    every_test_sum = arithmetic.generate("test", n=102, max_operand=30, terms=2, ops="+")
    assert len({r["question"] for r in every_test_sum}) == 102
    # a default n is a ceiling (all 859 train sums, not an error); an n you give is exact
    assert len(arithmetic.generate("train", max_operand=30, terms=2, ops="+")) == 961 - 102
    with pytest.raises(ValueError, match="distinct"):
        arithmetic.generate("test", n=103, max_operand=30, terms=2, ops="+")
    for bad in ({"max_operand": 30, "digits": 2}, {"max_operand": 30, "min_digits": 1},
                {"max_operand": 0}, {"max_operand": "30"}, {"max_operand": True}):
        with pytest.raises(ValueError, match="bad arithmetic options"):
            arithmetic.generate("test", n=5, terms=2, **bad)


def test_small_model_prompts():
    problem = data.load_problems("arithmetic", "test", n=1, template="plain-number")[0]
    assert problem.messages == [{"role": "system", "content": "Answer with just the number."},
                                {"role": "user", "content": problem.question}]
    assert (problem.prompt
            == f"Answer with just the number.\n\nQuestion: {problem.question}\nAnswer:")
    # a bare number scores
    assert get_reward(problem.reward)(f"{problem.answer}", problem.answer) == 1.0
    custom = data.load_problems("arithmetic", "test", n=1, system_prompt="Reply with digits only.")[
        0]
    assert custom.messages[0]["content"] == "Reply with digits only."
    bare = data.load_problems("arithmetic", "test", n=1, system_prompt="")[0]
    assert bare.messages == [{"role": "user", "content": bare.question}]
    assert bare.prompt == f"Question: {bare.question}\nAnswer:"
    with pytest.raises(ValueError, match="unknown template"):
        data.load_problems("arithmetic", "test", n=1, template="fancy")


def test_render_prompt_with_and_without_chat_template():
    problem = data.load_problems("arithmetic", "test", n=1)[0]

    class Plain:
        chat_template = None

    assert data.render_prompt(problem, Plain()) == problem.prompt
    tokenizer_dir = os.path.join(SHARED, "qwen2.5-tokenizer")
    if shared_data_missing("qwen2.5-tokenizer"):
        pytest.skip(shared_data_missing("qwen2.5-tokenizer"))
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = data.render_prompt(problem, tokenizer)
    assert text == (
        f"<|im_start|>system\n{templates.MATH_SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\n{problem.question}<|im_end|>\n<|im_start|>assistant\n")


# ------------------------------------------------------------------ decontamination


def test_decontamination_report_finds_overlaps():
    def make(pid, text):
        return data.Problem(id=pid, question=text, answer="1", domain="math", reward="gsm8k")

    shared_sentence = ("a train leaves the station at nine and travels at sixty miles per hour "
                       "until noon today")
    train = [make("t/0", "Completely different words here."),
             make("t/1", "Intro. " + shared_sentence + " More."), make("t/2", "What is 2 + 2?")]
    evaluation = [make("e/0", shared_sentence + "? How far?"), make("e/1", "what is 2+2"),
                  make("e/2", "Unrelated.")]
    report = data.decontamination_report(train, evaluation)
    assert report["overlapping_train"] == 2 and report["overlapping_eval"] == 2
    assert {(e["train_id"], e["eval_id"]) for e in report["examples"]} == {
        ("t/1", "e/0"), ("t/2", "e/1")}
    assert "2/3 train" in data.format_report(report)
    assert data.decontamination_report(train[:1], evaluation)["overlapping_train"] == 0


@needs_gsm8k
def test_decontamination_on_gsm8k(monkeypatch):
    monkeypatch.setenv("GMTS_DATA_DIR", SHARED)
    train, test = data.load_problems("gsm8k", "train"), data.load_problems("gsm8k", "test")
    report = data.decontamination_report(train, test)
    assert report["train"] == 7473 and report["eval"] == 1319
    # a handful of shared 13-word phrases, no wholesale copies
    assert 0 < report["overlapping_train"] < 20
    assert data.decontamination_report(train, train[:50])["overlapping_eval"] == 50


def test_builtin_sources_listed():
    assert set(data.BUILTIN_SOURCES) >= {"gsm8k", "math", "math500", "csqa", "csqa2", "humaneval",
                                         "mbpp", "kodcode", "arithmetic"}
