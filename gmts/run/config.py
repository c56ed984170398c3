"""The run's configuration: one dataclass, and a command line generated from it; the presets it
reads are gmts/run/presets.py's.

Precedence: dataclass defaults < --preset < explicit flags. The resolved config is written to the
run directory (config.json) and a resumed run reads it back.
"""
import argparse
import copy
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field, fields

from gmts.method.options import KL_COVERAGE, LOSS_NORMS, SCOPES, SELECTORS, STD_MODES
from gmts.run.presets import PRESET_NOTES, PRESETS, preset_data_settings, preset_note
from gmts.run.validate import DTYPE_NAMES, SEED_RANGE, TRAIN_RULES, check, spec_rule


def option(default, help_text, valid=None, switch=False):
    """A Config field: its default (a list: a fresh one per Config), its --help text and the values
    it takes on its own, a tuple of choices or a range ('>= 1', '[0, 1)': range_problem); switch:
    an auto | on | off field, whose flag alone means on and --no-flag off."""
    meta = {"help": help_text, "valid": valid, "switch": switch}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Config:
    # --- model ------------------------------------------------------------------------------------
    model: str = option("Qwen/Qwen2.5-1.5B-Instruct", "hub id or local folder")
    tokenizer: str = option("", "tokenizer hub id or folder (default: the --model's)")
    dtype: str = option("auto", "auto (bf16 on a GPU with bf16, else float32) | float32 | bfloat16 "
                                "| float16", DTYPE_NAMES)
    device: str = option("auto", "auto (cuda if available) | cpu | cuda | cuda:1 ...")
    gradient_checkpointing: str = option("auto", "recompute activations in backward: auto (on "
                                                 "where the memory plan without it does not fit "
                                                 "the GPU; off on a CPU) | on | off", switch=True)
    lora_rank: int = option(0, "train LoRA adapters of this rank (needs peft); 0 = full "
                               "fine-tuning", ">= 0")
    lora_alpha: float = option(0.0, "LoRA alpha; 0 = 2 x rank (default: 0, i.e. 2 x rank)", ">= 0")
    chunk_size: int = option(1024, "tokens per chunk in the output head (memory vs speed)", ">= 1")
    # --- data -------------------------------------------------------------------------------------
    data: str = option("gsm8k", "built-in source (gsm8k, math, math500, csqa, csqa2, humaneval, "
                                "mbpp, kodcode, arithmetic) or a local .jsonl/.json file "
                                "(data/README.md)")
    split: str = option("train", "split of --data to train on")
    limit: int = option(0, "use only the first N training problems (0 = all)", ">= 0")
    question_field: str = option("", "column holding the question in a local file, or a format "
                                     "over the row's columns, e.g. '{Body} {Question}' (default: "
                                     "the first of question, problem, prompt, input)")
    answer_field: str = option("", "column holding the reference answer in a local file (default: "
                                   "the first of answer, final_answer, target, output; code: "
                                   "tests, test, cases)")
    template: str = option("", "prompt template: math | code | plain-number | choice-letter | "
                               "none (default: the source's own)")
    system_prompt: str = option(None, "override the template's system prompt ('' = none; default: "
                                      "the template's own)")
    task_options: str = option("", "JSON options for the task, e.g. '{\"digits\": 2}' for "
                                   "arithmetic (default: none)")
    max_prompt_tokens: int = option(1024, "problems with longer prompts are skipped (counted)",
                                    ">= 1")
    reward: list = option([], "a reward for every answer, repeatable: gsm8k | math | choice | "
                              "code | path/file.py:function | package.module:function; R = the "
                              "weighted sum (default: each row's own reward; docs/your_task.md)")
    reward_weights: str = option("", "weights of the --reward functions in order, e.g. 1,0.1 "
                                     "(default: all 1)")
    reward_workers: int = option(0, "threads scoring a step's answers concurrently (0 = twice "
                                    "this process's CPUs; 1 = one after another)", ">= 0")
    reward_timeout: float = option(60.0, "seconds one call of a --reward function of your own may "
                                         "take; a longer one stops the run, named (they run in a "
                                         "process of their own: docs/your_task.md)", "> 0")
    code_trusted_only: bool = option(False, "code reward: score 0 (without running) any problem "
                                            "whose tests could only be judged inside the sandbox "
                                            "(rewards/README.md)")
    # --- rollout ----------------------------------------------------------------------------------
    prompts_per_step: int = option(8, "prompts per rollout batch (Q); one optimizer step each "
                                      "unless --mini-batch-size is smaller", ">= 1")
    group_size: int = option(8, "answers sampled per prompt (G)",
                             ">= 2 (a group of one answer has no baseline)")
    max_new_tokens: int = option(256, "completion length limit", ">= 1")
    temperature: float = option(1.0, "sampling temperature τ; the trained policy is softmax(z/τ) "
                                     "(training rollouts never use top-k/top-p)")
    rollout_batch_size: int = option(0, "prompts per generation call (bounds KV-cache memory; 0 = "
                                        "all)", ">= 0 (0 = all prompts at once)")
    compile: bool = option(False, "torch.compile the sampler's decode step over its static KV "
                                  "cache (CUDA graphs on a GPU): faster decoding after a compile "
                                  "of seconds to minutes per rollout shape (bench/README.md, "
                                  '"Rollout"); same samples up to float rounding')
    # --- algorithm --------------------------------------------------------------------------------
    algo: str = option("grpo", "grpo (ε1=ε2=0.2, β allowed) | dapo (β=0, ε2=0.28, dynamic "
                               "sampling)", ("grpo", "dapo"))
    eps_low: float = option(0.2, "ε1: lower clip", "[0, 1) (the ratio is clipped at 1 - ε1 > 0)")
    eps_high: float = option(-1.0, "ε2: upper clip; -1 = by --algo (default: -1, i.e. 0.2 for "
                                   "grpo, 0.28 for dapo)",
                           ">= 0 (ε2; leave it out for the --algo default)")
    beta: float = option(0.0, "k3 KL weight (loads a frozen reference model only when > 0; with "
                              "LoRA the reference is the same model with its adapters off)", ">= 0")
    kl_coverage: str = option("selected", "KL term on selected tokens only | all valid tokens",
                              KL_COVERAGE)
    adv_std: str = option("unbiased", "advantage std: unbiased | biased | none (Dr. GRPO)",
                          STD_MODES)
    ppo_epochs: int = option(1, "passes over each rollout batch (E); every pass takes one "
                                "optimizer step per mini-batch", ">= 1")
    mini_batch_size: int = option(0, "prompts per optimizer step (b; whole groups, must divide "
                                     "--prompts-per-step): the rollout batch splits into Q/b "
                                     "shuffled mini-batches, each scored, selected and normalised "
                                     "on its own at the current θ (the paper's A.3 off-policy "
                                     "regime; 0 = --prompts-per-step, one on-policy step)")
    dynamic_sampling: str = option("auto", "drop all-equal groups and sample more: auto (on for "
                                           "dapo) | on | off", ("auto", "on", "off"))
    max_sampling_tries: int = option(4, "dynamic sampling: rollout batches tried per step", ">= 1")
    overlong_buffer: int = option(0, "DAPO's soft overlong punishment: the reward loses up to "
                                     "--overlong-penalty over the last N tokens before "
                                     "--max-new-tokens, linearly (0 = off). It moves the "
                                     "advantage only: accuracy, reward_mean and dynamic sampling "
                                     "see the checker's reward. Use it when a run learns to pad "
                                     "to the limit")
    overlong_penalty: float = option(1.0, "the reward an answer cut at --max-new-tokens loses "
                                          "(with --overlong-buffer)", ">= 0")
    # --- selection --------------------------------------------------------------------------------
    selector: str = option("none", "none | ets | gmts | random", SELECTORS)
    ratio: float = option(0.2, "ρ: share of the batch's valid tokens trained on", "(0, 1]")
    select_scope: str = option("batch", "batch (paper text) | group (authors' GRPO-Zero fork)",
                               SCOPES)
    bottom: bool = option(False, "keep the LOWEST-scoring tokens (the paper's ablation)")
    exclude_zero_adv: bool = option(False, "leave all-equal-reward groups out of the ranking")
    loss_norm: str = option("selected", "selected (the paper's 1/S, S = selected tokens) | all "
                                        "(1/valid tokens: the authors' code, verl; TRL's "
                                        "bnpo/dapo with top_entropy_quantile) | sequence (each "
                                        "answer by its full length: TRL's grpo) | "
                                        "sequence-selected (each answer by its selected count; "
                                        "refused with a selector)", LOSS_NORMS)
    # --- optimisation -----------------------------------------------------------------------------
    steps: int = option(100, "optimizer steps", ">= 1")
    micro_batch_size: int = option(8, "answers per forward/backward (must divide Q x G)", ">= 1")
    micro_batch_tokens: int = option(0, "if > 0: a token budget per forward/backward instead of "
                                        "--micro-batch-size rows (rows x padded prompt + answer "
                                        "width; answers grouped by length; a longer answer gets a "
                                        "pass alone)", ">= 0")
    lr: float = option(1e-6, "AdamW learning rate", "> 0")
    weight_decay: float = option(0.0, "AdamW weight decay", ">= 0")
    adam_beta1: float = option(0.9, "AdamW β1", "[0, 1)")
    adam_beta2: float = option(0.999, "AdamW β2", "[0, 1)")
    warmup_steps: int = option(0, "linear warm-up steps, then constant", ">= 0")
    max_grad_norm: float = option(1.0, "clip the gradient norm (0 = off)", ">= 0")
    fsdp: bool = option(False, "under torchrun: shard each decoder layer's weights, grads and "
                               "AdamW states over the processes (FSDP)")
    optimizer_offload: bool = option(False, "keep AdamW's float32 master weights and moments in "
                                            "CPU memory (GPU memory for time)")
    max_bad_steps: int = option(3, "steps with a non-finite loss/gradient are skipped and logged; "
                                   "stop after this many in a row", ">= 1")
    # --- output -----------------------------------------------------------------------------------
    seed: int = option(0, "seeds everything (sampling, data order, adapter init)", SEED_RANGE)
    deterministic: bool = option(False, "PyTorch's deterministic algorithms: a GPU run repeats "
                                        "bit for bit and --resume continues it exactly (slower "
                                        "backward; without it a GPU's atomic additions reorder "
                                        "sums from run to run)")
    output_dir: str = option("runs/gmts", "where config, metrics and checkpoints go")
    save_every: int = option(50, "checkpoint every N steps (and at the end; 0 = end only)", ">= 0")
    keep_checkpoints: int = option(2, "how many recent checkpoints to keep", ">= 1")
    log_samples: int = option(2, "sample completions written per step", ">= 0")
    log_grad_noise: bool = option(False, "log the gradient noise between two halves of each "
                                         "optimizer batch (grad_noise_ratio, grad_noise_scale: "
                                         'gmts/METHOD.md, "How concentrated an update is"); costs '
                                         "one float32 copy of the trainable parameters")
    resume: str = option("", "run directory or checkpoint folder to continue from (default: none, "
                             "a fresh run)")
    overwrite: bool = option(False, "start a fresh run in an --output-dir that holds one (deletes "
                                    "its metrics, samples and checkpoints)")
    eval_every: int = option(0, "evaluate every N steps and after the last (0 = never)", ">= 0")
    eval_data: str = option("", "evaluation sources, space-separated name[:split] (e.g. "
                                "'gsm8k:test math500'; default: none)")
    eval_limit: int = option(100, "evaluation problems", ">= 0")
    eval_samples: int = option(1, "samples per evaluation problem", ">= 1")
    eval_temperature: float = option(0.0, "evaluation temperature (0 = greedy)")
    eval_max_rows: int = option(0, "answers one evaluation sampling call holds (its KV cache; 0 = "
                                   "a step's rollout call: --rollout-batch-size x --group-size)",
                                ">= 0 (0 = a step's rollout call)")
    eval_before: bool = option(False, "also evaluate before the first step (needs --eval-data; "
                                      "with --eval-every, the end prints before and after)")
    report_to: str = option("none", "also log metrics, samples and config to: none | tensorboard "
                                    "| wandb (optional installs; wandb works offline with "
                                    "WANDB_MODE=offline)", ("none", "tensorboard", "wandb"))
    preset: str = option("", "named settings (explicit flags override): cpu-demo | recipe-gsm8k | "
                             "paper-math | paper-math-7b | paper-base | paper-base-7b | "
                             "paper-coder | paper-coder-7b | paper-qwen3-8b (README's presets "
                             "table); --print-config shows the result (default: none)")


FIELD_RULES = [spec_rule(f.name, f.metadata["valid"], f.type is int) for f in fields(Config)
               if f.metadata["valid"]]

def shown_default(value):
    """How --help names a default: on / off for a switch, none for an unset value, else the value
    itself."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "" or value == []:
        return "none"
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def with_default(help_text, value):
    """`help_text` and one '(default: ...)', unless the text names its default itself."""
    return (help_text if re.search(r"\bdefault\b", help_text)
            else f"{help_text} (default: {shown_default(value)})")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help of every entry point: the description as written (what it does, examples), then every
    option with exactly one default (with_default)."""

    def _get_help_string(self, action):
        # BooleanOptionalAction's own, 3.11
        text = (action.help or "").replace(" (default: %(default)s)", "")
        return (text if action.default is argparse.SUPPRESS
                else with_default(text, action.default).strip())

    def _format_action(self, action):
        # an option without a help text still names its default (argparse shows no help line)
        if (action.help is None and action.option_strings
                and action.default is not argparse.SUPPRESS):
            action = copy.copy(action)
            action.help = ""
            action.help = self._get_help_string(action)
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """A bad flag is one line; --help opens with a short synopsis and the description, then the
    options."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("usage", "%(prog)s [options]")
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one clear line naming the flag, not a screenful of usage
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


DESCRIPTION = """GRPO/DAPO with token selection in the policy loss: ETS (the 20% highest-entropy
tokens), GMTS (the top 20% by |entropy x omega|), random, or none (plain GRPO/DAPO). Each step
samples G answers per prompt, scores them with a program, takes advantages per group and trains the
clipped policy loss on the selected tokens.

  python train.py --preset cpu-demo --selector gmts   # SmolLM2-135M learns 0..30 sums on a CPU
  python train.py --selector gmts                     # Qwen2.5-1.5B-Instruct on GSM8K: a GPU run
  python train.py --preset paper-math --print-config  # what a preset sets (explicit flags
                                                      # override it)
  python train.py --resume runs/gmts                  # continue a run from its last checkpoint

Defaults < --preset < explicit flags. Offline, --model and --data take local paths. What a run
writes: docs/training.md; the method: gmts/METHOD.md."""

# The --help sections: the Config field that opens each (fields keep the dataclass's order).
SECTIONS = {"model": "model", "data": "data", "prompts_per_step": "rollout", "algo": "algorithm",
            "selector": "token selection", "steps": "optimisation",
            "seed": "output, checkpoints, evaluation"}


def build_parser():
    parser = Parser(prog="train.py", usage="%(prog)s [--preset NAME] [--selector "
                                            "none|ets|gmts|random] [options]",
                     description=DESCRIPTION)
    add_config_flags(parser, sections=SECTIONS)
    parser.add_argument("--print-config", action="store_true", default=argparse.SUPPRESS,
                        help="print the resolved config (preset, then flags) with the preset's "
                             "source, and exit")
    return parser


def add_config_flags(parser, names=None, *, defaults=None, helps=None, sections=None):
    """One --flag per Config field (every field, or those in `names`), typed, documented and given
    its choices from the dataclass. defaults=None: every flag defaults to argparse.SUPPRESS, so
    parse_config tells an explicit flag from a default (presets sit in between); a dict: the
    dataclass's defaults overridden by the dict's (for tools that use some fields, e.g.
    gmts.tools.analyze). helps: {name: text} replaces a field's help where a tool gives the field
    another role. sections: {name: title}: `name` and the fields after it go under `title`."""
    chosen = [f for f in fields(Config) if names is None or f.name in names]
    unknown = set(names or ()) - {f.name for f in chosen}
    if unknown:
        raise ValueError(f"not Config fields: {sorted(unknown)}")
    group = parser
    for f in chosen:
        if f.name in (sections or {}):
            group = parser.add_argument_group(sections[f.name])
        base = f.default_factory() if f.default is dataclasses.MISSING else f.default
        default = base if defaults is None else defaults.get(f.name, base)
        if f.metadata["switch"]:                # --x [auto|on|off] (alone: on) / --no-x
            flag = "--" + f.name.replace("_", "-")
            value = argparse.SUPPRESS if defaults is None else default
            group.add_argument(flag, dest=f.name, nargs="?", const="on", default=value,
                               metavar="auto|on|off", help=with_default(
                                   (helps or {}).get(f.name, f.metadata["help"]), default))
            group.add_argument("--no-" + flag[2:], dest=f.name, action="store_const",
                               const="off", default=value, help=argparse.SUPPRESS)
            continue
        valid = f.metadata["valid"]
        kind = ({"action": "append"} if f.type is list                # --reward a --reward b
                else {"action": argparse.BooleanOptionalAction} if f.type is bool   # --x / --no-x
                else {"type": f.type, "metavar": f.name.upper(),
                      "choices": valid if isinstance(valid, tuple) else None})
        group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, **kind,
                           default=argparse.SUPPRESS if defaults is None else default,
                           help=with_default((helps or {}).get(f.name, f.metadata["help"]),
                                             default))


def parse_config(argv=None):
    """Command line -> validated Config. Errors name the flag."""
    parser = build_parser()
    explicit = vars(parser.parse_args(argv))
    show = explicit.pop("print_config", False)
    values = {}
    preset = explicit.get("preset", "")
    if preset:
        if preset not in PRESETS:
            parser.error(f"--preset must be one of {sorted(PRESETS)}, got {preset!r}")
        values.update(PRESETS[preset])
        for name in preset_data_settings(preset, explicit, explicit.get("data")):
            del values[name]             # its own data's settings (gmts/run/folder.py says so)
    try:
        cfg = resolve(Config(**{**values, **explicit}))
    except ValueError as err:                  # naming a flag the preset set, not the user
        parser.error(str(err) + preset_note(str(err), preset, explicit))
    if show and not cfg.resume:                # a resume's: printed by folder.py's check_start
        if preset:
            print(f"# --preset {preset}: {PRESET_NOTES.get(preset, '')}")
        print(json.dumps(to_dict(cfg), indent=2))
        raise SystemExit(0)
    return cfg


# The flags whose value may be a path (or else a hub id or a built-in name): `~` is the home folder.
PATH_VALUED_FLAGS = ("model", "tokenizer", "data", "output_dir", "resume")


def resolve(cfg):
    """Fill the defaults that depend on other flags, then check every value: each field's own range
    or choices, then validate.py's TRAIN_RULES (raises ValueError naming the flag and the value)."""
    # `~` expanded here, once, for every later check, the lock and the loaders
    for name in PATH_VALUED_FLAGS:
        value = getattr(cfg, name)
        if isinstance(value, str) and value.startswith("~"):
            setattr(cfg, name, os.path.expanduser(value))
    if isinstance(cfg.eps_high, (int, float)) and cfg.eps_high < 0:
        cfg.eps_high = 0.28 if cfg.algo == "dapo" else 0.2
    if cfg.mini_batch_size == 0:                       # one optimizer step per rollout batch
        cfg.mini_batch_size = cfg.prompts_per_step
    return check(cfg, FIELD_RULES + TRAIN_RULES)


def to_dict(cfg):
    return dataclasses.asdict(cfg)
