"""Decontamination check: does any training question share a word n-gram with an evaluation
question?

Questions are lower-cased and split into words (punctuation and LaTeX markup dropped); two questions
overlap if they share n consecutive words (n = 13 by default, the GPT-3 paper's choice). A question
shorter than n words is compared as a whole, so short exact duplicates are still found. Run it
before training and read the report.
"""
import re

_WORD = re.compile(r"[a-z0-9]+")


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def decontamination_report(train, evaluation, n: int = 13, max_examples: int = 10) -> dict:
    """{n, train, eval, overlapping_train, overlapping_eval, examples: [{train_id, eval_id,
    ngram}]}. `train` and `evaluation` are lists of data.Problem (anything with .id and
    .question)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    owners: dict[tuple, list] = {}          # n-gram -> every eval question holding it
    for problem in evaluation:
        for gram in _ngrams(problem.question, n):
            owners.setdefault(gram, []).append(problem.id)
    train_hits, eval_hits, examples = set(), set(), []
    for problem in train:
        for gram in _ngrams(problem.question, n):
            if gram in owners:
                train_hits.add(problem.id)
                eval_hits.update(owners[gram])
                if len(examples) < max_examples and (not examples
                                                     or examples[-1]["train_id"] != problem.id):
                    examples.append({"train_id": problem.id, "eval_id": owners[gram][0],
                                     "ngram": " ".join(gram)})
    return {"n": n, "train": len(train), "eval": len(evaluation),
            "overlapping_train": len(train_hits), "overlapping_eval": len(eval_hits),
            "examples": examples}


def format_report(report: dict) -> str:
    line = (f"decontamination ({report['n']}-gram): "
            f"{report['overlapping_train']}/{report['train']} train questions share an n-gram with "
            f"{report['overlapping_eval']}/{report['eval']} eval questions")
    return "\n".join(
        [line] + [
            f"  {e['train_id']} ~ {e['eval_id']}: \"{e['ngram']}\"" for e in report["examples"]])
