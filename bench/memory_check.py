"""Check the memory planner (gmts/tools/memory.py) against measured peak memory of real train.py
runs on CPU.

    python bench/memory_check.py             # SmolLM2-135M + a random model of Qwen2.5-0.5B's shape
    python bench/memory_check.py --only smollm2 --out /tmp/m.json

Each run is `python train.py ... --device cpu --steps 2` in a fresh process; its metrics.jsonl's
peak_memory_mb is the process's VmHWM after the last step (gmts/trainer/models.py). The planner gets
the same flags plus the data's longest prompt (--prompt-tokens) and --device cpu. Error = (planned -
measured) / measured. Runs go one at a time. --beta 0.001 on every run: a random model earns no
reward, every advantage is 0, and without a KL term train.py skips the backward pass of such rows
(so nothing would be measured); full fine-tuning then also holds the frozen reference copy, which
the planner counts.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
QWEN05_CONFIG = os.path.join(SHARED, "qwen2.5-configs", "Qwen2.5-0.5B-Instruct")
QWEN_TOKENIZER = os.path.join(SHARED, "qwen2.5-tokenizer")
COMMON = ["--data", "arithmetic", "--task-options", '{"max_operand": 30, "terms": 2, "ops": "+"}',
          "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "32",
          "--micro-batch-size", "8", "--device", "cpu", "--dtype", "float32", "--save-every", "0",
          "--log-samples", "0", "--lr", "1e-6",
          # a KL term keeps every row in the backward pass (a random model earns no reward: A = 0)
          "--beta", "0.001"]
VARIANTS = {
    "full, no checkpointing": ["--no-gradient-checkpointing"],
    "full, checkpointing": ["--gradient-checkpointing"],
    "LoRA r=16, no checkpointing": ["--no-gradient-checkpointing", "--lora-rank", "16"],
    "full, --optimizer-offload, checkpointing": ["--gradient-checkpointing", "--optimizer-offload"],
}


def random_qwen05(folder):
    """A random model of Qwen2.5-0.5B-Instruct's shape (its config.json) with the Qwen2.5 tokenizer,
    float32."""
    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    config = AutoConfig.from_pretrained(QWEN05_CONFIG)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=[151645, 151643], pad_token_id=151643)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(QWEN_TOKENIZER).save_pretrained(folder)
    return folder


def longest_prompt(model_dir):
    from gmts import data
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    _, ids, _ = data.load_prompts_for_cli("arithmetic", "train", tok, task_options=COMMON[3])
    return max(len(x) for x in ids)


def measure(model_dir, flags, work):
    import shutil
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--model", model_dir, *COMMON, *flags,
           "--output-dir", out]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    t0 = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"train.py failed:\n{done.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        metrics = [json.loads(line) for line in fh]
    return metrics[-1]["peak_memory_mb"] * 2 ** 20, time.time() - t0


def planned(model_dir, flags, prompt_tokens):
    """The planner's peak (bytes) and its phase for the same flags, on CPU."""
    from gmts.tools import memory
    from gmts.run.config import parse_config
    cfg = parse_config(["--model", model_dir, *COMMON, *flags])
    shape = memory.model_shape(memory.load_config(model_dir))
    _components, _phases, (peak, phase), _ = memory.plan(cfg, shape, prompt_tokens=prompt_tokens,
                                                       device="cpu")
    return peak, phase


def main():
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smollm2", default="", help="SmolLM2-135M-Instruct folder (default: "
                                                  "gmts/trainer/smollm2.py fetch)")
    ap.add_argument("--work-dir", default="/tmp/gmts_memory_check")
    ap.add_argument("--only", choices=["smollm2", "qwen05"], default=None)
    ap.add_argument("--replan", action="store_true",
                    help="measure nothing: recompute the planned column of --out's rows with the "
                         "current planner")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "memory.json"))
    args = ap.parse_args()
    if args.replan:
        with open(args.out) as fh:
            rows = json.load(fh)["rows"]
        from gmts.trainer import smollm2
        folders = {"SmolLM2-135M-Instruct": args.smollm2 or smollm2.DEFAULT_OUT,
                   "random Qwen2.5-0.5B shape": os.path.join(args.work_dir, "qwen05-random")}
        for r in rows:
            r["folder"] = r.get("folder") or folders[r["model"]]
            plan, r["planned_phase"] = planned(r["folder"], VARIANTS[r["variant"]],
                                               r["prompt_tokens"])
            r["planned_gib"] = plan / 2 ** 30
            r["error"] = (r["planned_gib"] - r["measured_gib"]) / r["measured_gib"]
        return write(args.out, rows)
    from gmts.trainer import smollm2
    models = {"SmolLM2-135M-Instruct": args.smollm2 or smollm2.fetch(),
              "random Qwen2.5-0.5B shape": random_qwen05(
                  os.path.join(args.work_dir, "qwen05-random"))}
    if args.only:
        models = {k: v for k,
                  v in models.items() if (args.only == "smollm2") == k.startswith("SmolLM2")}
    rows = []
    for name, folder in models.items():
        prompt = longest_prompt(folder)
        for variant, flags in VARIANTS.items():
            measured, wall = measure(folder, flags, os.path.join(args.work_dir, "runs"))
            plan, phase = planned(folder, flags, prompt)
            row = {"model": name, "folder": folder, "variant": variant,
                   "measured_gib": measured / 2 ** 30,
                       "planned_gib": plan / 2 ** 30, "planned_phase": phase,
                       "error": (plan - measured) / measured, "prompt_tokens": prompt,
                       "wall_s": wall}
            print(json.dumps(row), flush=True)
            rows.append(row)
            # after every run: a partial table survives an interruption
            write(args.out, rows)
    write(args.out, rows)


def write(out, rows):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump({"settings": COMMON, "rows": rows}, fh, indent=2)
    print("| model | run | measured VmHWM GiB | planned GiB (phase) | error "
          "|\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['variant']} | {r['measured_gib']:.2f} | {r['planned_gib']:.2f} "
              f"({r['planned_phase']}) | {100 * r['error']:+.0f}% |")


if __name__ == "__main__":
    main()
