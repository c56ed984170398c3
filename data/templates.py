"""Prompt templates. A template turns (question, domain) into chat messages and a plain-text prompt.

    math          the paper's math/commonsense template (appendix A.3): system "Please reason step
                  by step, and put your final answer within \\boxed{}.", user = the question.
                  Default for math and choice.
    code          the paper's code template: Qwen's default system prompt; the user asks for a
                  self-contained Python script in a markdown code block (with the starter code when
                  the problem has one).
    plain-number  short answers for small models that rarely write \\boxed{}: "Answer with just the
                  number." Pair it with the gsm8k reward (last number).
    choice-letter short answers for multiple choice: "Answer with just the letter of the correct
                  option."
    none          no system message; the user message is the question.

`system_prompt=` replaces the template's system message ("" drops it). A plain prompt (for
tokenizers without a chat template) is "<system>\\n\\nQuestion: <user>\\nAnswer:".
"""
MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SYSTEMS = {
    "math": MATH_SYSTEM,
    "code": QWEN_SYSTEM,
    "plain-number": "Answer with just the number.",
    "choice-letter": "Answer with just the letter of the correct option.",
    "none": "",
}
TEMPLATES = tuple(SYSTEMS)
DEFAULT_TEMPLATE = {"math": "math", "choice": "math", "code": "code"}


def code_user_message(question: str, starter_code: str | None = None) -> str:
    text = ("Please provide a self-contained Python script that solves the following "
            f"problem:\n{question.strip()}\n")
    if starter_code:
        text += ("\nYou will use the following starter code to write the solution to the "
                 f"problem:\n```python\n{starter_code.rstrip()}\n```\n")
    return text + "\nPlease reason step by step, and put your code answer in a markdown code block."


def format_choices(stem: str, choices: list[str]) -> str:
    letters = "ABCDEFGHIJ"
    if not 2 <= len(choices) <= len(letters):
        raise ValueError(f"a multiple-choice question needs 2 to 10 choices, got {len(choices)}: "
                         f"{stem[:80]!r}")
    return stem.strip() + "\n\n" + "\n".join(f"{letters[i]}. {str(c).strip()}" for i,
                                             c in enumerate(choices))


def build(question: str, domain: str, template: str | None = None, system_prompt: str | None = None,
          starter_code: str | None = None) -> tuple[list[dict], str]:
    """(messages, plain prompt) for one question. `question` already holds the choices for multiple
    choice."""
    template = template or DEFAULT_TEMPLATE[domain]
    if template not in SYSTEMS:
        raise ValueError(f"unknown template {template!r}; choose one of {TEMPLATES}")
    system = SYSTEMS[template] if system_prompt is None else system_prompt
    user = code_user_message(question, starter_code) if template == "code" else question.strip()
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}]
    prompt = (f"{system}\n\n" if system else "") + f"Question: {user}\nAnswer:"
    return messages, prompt
