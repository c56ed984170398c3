"""The run's configuration: one dataclass, two presets, and a command line generated from the dataclass.

Precedence: dataclass defaults < --preset < explicit flags. The resolved config is written to the run directory
(config.json) and a resumed run reads it back.
"""
import argparse
import dataclasses
import json
from dataclasses import dataclass, field, fields

from .loss import KL_COVERAGE, LOSS_NORMS, check_loss_config
from .scores import SELECTORS
from .selection import SCOPES, check_ratio
from .advantage import STD_MODES


@dataclass
class Config:
    # --- model --------------------------------------------------------------------------------------------------
    model: str = field(default="Qwen/Qwen2.5-1.5B-Instruct", metadata={"help": "hub id or local folder"})
    tokenizer: str = field(default="", metadata={"help": "tokenizer hub id or folder (default: --model)"})
    dtype: str = field(default="auto", metadata={"help": "auto (bf16 on GPU, float32 on CPU) | float32 | bfloat16 | float16"})
    device: str = field(default="auto", metadata={"help": "auto (cuda if available) | cpu | cuda | cuda:1 ..."})
    gradient_checkpointing: bool = field(default=True, metadata={"help": "recompute activations in backward"})
    lora_rank: int = field(default=0, metadata={"help": "train LoRA adapters of this rank (needs peft); 0 = full fine-tuning"})
    lora_alpha: float = field(default=0.0, metadata={"help": "LoRA alpha (default: 2 x rank)"})
    chunk_size: int = field(default=1024, metadata={"help": "tokens per chunk in the output head (memory vs speed)"})
    # --- data ---------------------------------------------------------------------------------------------------
    data: str = field(default="gsm8k", metadata={"help": "built-in source name or a local .jsonl/.json file"})
    split: str = field(default="train", metadata={"help": "split of --data to train on"})
    limit: int = field(default=0, metadata={"help": "use only the first N training problems (0 = all)"})
    question_field: str = field(default="", metadata={"help": "column holding the question in a local file"})
    answer_field: str = field(default="", metadata={"help": "column holding the reference answer in a local file"})
    template: str = field(default="", metadata={"help": "prompt template (data/ names; default: the source's own)"})
    system_prompt: str = field(default=None, metadata={"help": "override the template's system prompt ('' = none)"})
    task_options: str = field(default="", metadata={"help": "JSON options for the task, e.g. '{\"digits\": 2}' for arithmetic"})
    max_prompt_tokens: int = field(default=1024, metadata={"help": "problems with longer prompts are skipped (counted)"})
    # --- rollout ------------------------------------------------------------------------------------------------
    prompts_per_step: int = field(default=8, metadata={"help": "prompts per optimizer step (Q)"})
    group_size: int = field(default=8, metadata={"help": "answers sampled per prompt (G)"})
    max_new_tokens: int = field(default=256, metadata={"help": "completion length limit"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature τ; the trained policy is softmax(z/τ)"})
    rollout_batch_size: int = field(default=0, metadata={"help": "prompts per generation call (bounds KV-cache memory; 0 = all)"})
    # --- algorithm ----------------------------------------------------------------------------------------------
    algo: str = field(default="grpo", metadata={"help": "grpo (ε1=ε2=0.2, β allowed) | dapo (β=0, ε2=0.28, dynamic sampling)"})
    eps_low: float = field(default=0.2, metadata={"help": "ε1: lower clip"})
    eps_high: float = field(default=-1.0, metadata={"help": "ε2: upper clip (default: 0.2 grpo, 0.28 dapo)"})
    beta: float = field(default=0.0, metadata={"help": "k3 KL weight (loads a frozen reference model when > 0)"})
    kl_coverage: str = field(default="selected", metadata={"help": "KL term on selected tokens only | all valid tokens"})
    adv_std: str = field(default="unbiased", metadata={"help": "advantage std: unbiased | biased | none (Dr. GRPO)"})
    ppo_epochs: int = field(default=1, metadata={"help": "updates per batch (> 1 adds a no-grad scoring pass per epoch)"})
    dynamic_sampling: str = field(default="auto", metadata={"help": "drop all-equal groups and sample more: auto (on for dapo) | on | off"})
    max_sampling_tries: int = field(default=4, metadata={"help": "dynamic sampling: rollout batches tried per step"})
    overlong_buffer: int = field(default=0, metadata={"help": "DAPO's soft overlong punishment: the reward loses up to --overlong-penalty over the last N tokens before --max-new-tokens (0 = off)"})
    overlong_penalty: float = field(default=1.0, metadata={"help": "the reward an answer cut at --max-new-tokens loses (with --overlong-buffer)"})
    # --- selection ----------------------------------------------------------------------------------------------
    selector: str = field(default="none", metadata={"help": "none | ets | gmts | random"})
    ratio: float = field(default=0.2, metadata={"help": "ρ: share of the batch's valid tokens trained on"})
    select_scope: str = field(default="batch", metadata={"help": "batch (paper text) | group (authors' GRPO-Zero fork)"})
    bottom: bool = field(default=False, metadata={"help": "keep the LOWEST-scoring tokens (the paper's ablation)"})
    exclude_zero_adv: bool = field(default=False, metadata={"help": "leave all-equal-reward groups out of the ranking"})
    loss_norm: str = field(default="selected", metadata={"help": "selected | all | sequence | sequence-selected"})
    # --- optimisation -------------------------------------------------------------------------------------------
    steps: int = field(default=100, metadata={"help": "optimizer steps"})
    micro_batch_size: int = field(default=8, metadata={"help": "answers per forward/backward (must divide Q x G)"})
    lr: float = field(default=1e-6, metadata={"help": "AdamW learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW β1"})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW β2"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps, then constant"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "clip the gradient norm (0 = off)"})
    fsdp: bool = field(default=False, metadata={"help": "under torchrun: shard each decoder layer's weights, grads and AdamW states over the processes (FSDP)"})
    optimizer_offload: bool = field(default=False, metadata={"help": "keep AdamW states in CPU memory (GPU memory for time)"})
    max_bad_steps: int = field(default=3, metadata={"help": "stop after this many non-finite losses/gradients in a row"})
    # --- output -------------------------------------------------------------------------------------------------
    seed: int = field(default=0, metadata={"help": "seeds everything (sampling, data order, adapter init)"})
    output_dir: str = field(default="runs/gmts", metadata={"help": "where config, metrics and checkpoints go"})
    save_every: int = field(default=50, metadata={"help": "checkpoint every N steps (and at the end; 0 = end only)"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many recent checkpoints to keep"})
    log_samples: int = field(default=2, metadata={"help": "sample completions written per step"})
    resume: str = field(default="", metadata={"help": "run directory or checkpoint folder to continue from"})
    eval_every: int = field(default=0, metadata={"help": "evaluate every N steps (0 = never)"})
    eval_data: str = field(default="", metadata={"help": "evaluation source (e.g. gsm8k:test, math500)"})
    eval_limit: int = field(default=100, metadata={"help": "evaluation problems"})
    eval_samples: int = field(default=1, metadata={"help": "samples per evaluation problem"})
    eval_temperature: float = field(default=0.0, metadata={"help": "evaluation temperature (0 = greedy)"})
    preset: str = field(default="", metadata={"help": "recipe-gsm8k | paper-math (explicit flags override)"})


PRESETS = {
    # The public reproduction's setting (reference/gmts-reproduction-notes.txt): Qwen2.5-1.5B-Instruct on GSM8K,
    # 8 answers per prompt, 256 new tokens, ρ = 0.2, LoRA r = 32 at lr 1e-4, TRL's bnpo (= our "selected") loss.
    "recipe-gsm8k": dict(model="Qwen/Qwen2.5-1.5B-Instruct", data="gsm8k", limit=512, group_size=8,
                         max_new_tokens=256, ratio=0.2, algo="grpo", beta=0.0, loss_norm="selected",
                         lora_rank=32, lr=1e-4, steps=40, prompts_per_step=8, eval_data="gsm8k:test",
                         eval_limit=120),
    # The paper's appendix A.3 (1.5B math model): MATH-12K, prompt <= 1024, response <= 2048, 64 questions x 16
    # rollouts, temperature 1.0, ε1 = 0.2, ε2 = 0.28, lr 3e-5 constant, no warm-up, ρ = 0.2 (DAPO; --algo grpo too).
    "paper-math": dict(model="Qwen/Qwen2.5-Math-1.5B", data="math", template="math", max_prompt_tokens=1024,
                       max_new_tokens=2048, prompts_per_step=64, group_size=16, temperature=1.0, algo="dapo",
                       eps_low=0.2, eps_high=0.28, lr=3e-5, warmup_steps=0, ratio=0.2, eval_data="math500",
                       rollout_batch_size=8, micro_batch_size=4,
                       eval_samples=16, eval_temperature=1.0),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line naming the flag, not a screenful of usage
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser():
    parser = _Parser(description="GRPO/DAPO with token selection (ETS, GMTS). See README.md.",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if f.type is bool or f.type == "bool":
            # --x / --no-x; SUPPRESS so we can tell an explicit flag from a default (presets sit in between).
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                                help=f"{help_text} (default: {f.default})")
        else:
            kind = {"int": int, "float": float, "str": str}.get(f.type if isinstance(f.type, str) else f.type.__name__)
            parser.add_argument(flag, dest=f.name, type=kind, default=argparse.SUPPRESS,
                                help=f"{help_text} (default: {f.default!r})")
    return parser


def parse_config(argv=None):
    """Command line -> validated Config. Errors name the flag."""
    parser = build_parser()
    explicit = vars(parser.parse_args(argv))
    values = {}
    preset = explicit.get("preset", "")
    if preset:
        if preset not in PRESETS:
            parser.error(f"--preset must be one of {sorted(PRESETS)}, got {preset!r}")
        values.update(PRESETS[preset])
    values.update(explicit)
    cfg = Config(**values)
    try:
        resolve(cfg)
    except ValueError as err:
        parser.error(str(err))
    return cfg


def resolve(cfg):
    """Fill algorithm-dependent defaults and check every value, naming the flag (raises ValueError)."""
    if cfg.algo not in ("grpo", "dapo"):
        raise ValueError(f"--algo must be grpo or dapo, got {cfg.algo!r}")
    if cfg.eps_high < 0:
        cfg.eps_high = 0.28 if cfg.algo == "dapo" else 0.2
    if cfg.algo == "dapo" and cfg.beta != 0:
        raise ValueError(f"--algo dapo uses no KL term (β = 0), got --beta {cfg.beta}")
    if cfg.dynamic_sampling not in ("auto", "on", "off"):
        raise ValueError(f"--dynamic-sampling must be auto, on or off, got {cfg.dynamic_sampling!r}")
    if cfg.selector not in SELECTORS:
        raise ValueError(f"--selector must be one of {', '.join(SELECTORS)}, got {cfg.selector!r}")
    try:
        check_ratio(cfg.ratio)
    except ValueError:
        raise ValueError(f"--ratio must be in (0, 1], got {cfg.ratio}") from None
    if cfg.select_scope not in SCOPES:
        raise ValueError(f"--select-scope must be one of {SCOPES}, got {cfg.select_scope!r}")
    if cfg.loss_norm not in LOSS_NORMS:
        raise ValueError(f"--loss-norm must be one of {', '.join(LOSS_NORMS)}, got {cfg.loss_norm!r}")
    try:
        check_loss_config(cfg.selector, cfg.ratio, cfg.loss_norm)
    except ValueError as err:
        raise ValueError(f"--loss-norm: {err}") from None
    if cfg.kl_coverage not in KL_COVERAGE:
        raise ValueError(f"--kl-coverage must be one of {KL_COVERAGE}, got {cfg.kl_coverage!r}")
    if cfg.adv_std not in STD_MODES:
        raise ValueError(f"--adv-std must be one of {STD_MODES}, got {cfg.adv_std!r}")
    if not 0 <= cfg.overlong_buffer <= cfg.max_new_tokens:
        raise ValueError(f"--overlong-buffer must be in [0, --max-new-tokens = {cfg.max_new_tokens}], got {cfg.overlong_buffer}")
    if cfg.overlong_penalty < 0:
        raise ValueError(f"--overlong-penalty must be >= 0, got {cfg.overlong_penalty}")
    if cfg.group_size < 2:
        raise ValueError(f"--group-size must be >= 2 (a group of one answer has no baseline), got {cfg.group_size}")
    for name in ("prompts_per_step", "max_new_tokens", "steps", "micro_batch_size", "ppo_epochs", "chunk_size",
                 "max_sampling_tries", "max_bad_steps", "keep_checkpoints"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    batch = cfg.prompts_per_step * cfg.group_size
    if batch % cfg.micro_batch_size != 0:
        raise ValueError(f"--micro-batch-size {cfg.micro_batch_size} does not divide the batch of "
                         f"{cfg.prompts_per_step} prompts x {cfg.group_size} answers = {batch}")
    if cfg.fsdp and (cfg.lora_rank or cfg.optimizer_offload):
        raise ValueError("--fsdp cannot be combined with --lora-rank or --optimizer-offload (choose one way to save memory)")
    if cfg.rollout_batch_size < 0:
        raise ValueError(f"--rollout-batch-size must be >= 0 (0 = all prompts at once), got {cfg.rollout_batch_size}")
    if cfg.temperature <= 0:
        raise ValueError(f"--temperature must be > 0 for training rollouts, got {cfg.temperature}")
    if cfg.lr <= 0:
        raise ValueError(f"--lr must be > 0, got {cfg.lr}")
    if cfg.eval_every and not cfg.eval_data:
        raise ValueError("--eval-every needs --eval-data")
    if cfg.task_options:
        try:
            if not isinstance(json.loads(cfg.task_options), dict):
                raise ValueError
        except ValueError:
            raise ValueError(f"--task-options must be a JSON object, got {cfg.task_options!r}") from None
    return cfg


def use_dynamic_sampling(cfg):
    return cfg.dynamic_sampling == "on" or (cfg.dynamic_sampling == "auto" and cfg.algo == "dapo")


def to_dict(cfg):
    return dataclasses.asdict(cfg)
