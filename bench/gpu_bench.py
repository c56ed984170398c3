"""The GPU benchmark (issue 51): ours against `model.generate` and TRL's GRPOTrainer, side by side
in one run, on random bf16 models of the real Qwen2.5-0.5B and 1.5B configurations and GSM8K prompts
through the chat template.

    python bench/gpu_bench.py        # one H100 80 GB or H200: <= 8 minutes, <= 20 GB of disk
    python bench/gpu_bench.py --dry-run --out /tmp/bench.json     # the whole script, CPU, tiny

Every part ends "pass", "fail" or "not run" (with why); the verdict is "pass" only when every part
passed (a part skipped, out of time or failed is not passed: "incomplete" or "fail", exit 1). The
JSON (bench/results/gpu_bench.json) is rewritten after every part. A part fails when its sides
generated different numbers of tokens or a ratio is above its physical limit (a fraction of the
bandwidth or of the matmul peak above 1 is a measuring error). The issue's goals are recorded
apart ("goals": met or not); they do not decide "pass".

Parts, in order:
  device      the limits the ratios are taken against, measured: device-to-device copy bandwidth
              (bytes read + written per second) and the bf16 matmul peak (8192^3 products).
  rollout     per shape (0.5B, 1.5B), 8 prompts x 8 answers, every answer forced to 256 tokens
              (T = 1, top-k 0, top-p 1): model.generate, ours eager, ours compiled (--compile; its
              first call compiles and is timed apart, compile_s). tokens/s, and the fraction of the
              bandwidth limit: the bytes a decode step must read (every weight once, and the KV
              cache filled so far, on average over the answer) x steps / seconds / bandwidth.
              Goals (1.5B): compiled >= 60% of the limit and >= 3x generate; eager >= generate.
  step        one full GRPO step on the 0.5B shape, train.py vs TRL's GRPOTrainer (no vLLM):
              --selector ets --ratio 0.2 --loss-norm all = top_entropy_quantile 0.2 + bnpo, beta 0,
              8 prompts x 8 answers of 256 tokens on both sides, no gradient checkpointing on
              either, a reward that makes groups mixed (the parity of the answer text's CRC-32).
              Each side in a fresh process, 3 steps, the first a warm-up: s/step, tokens/s, peak
              memory (torch.cuda.max_memory_allocated; VmHWM on CPU). Goal: s/step <= 0.5x TRL's
              at no more peak memory. TRL is a bench-only dependency, installed on the GPU machine
              from wheels carried with the code (bench/README.md, "GPU benchmark"); where it is
              missing the part is "not run".
  train_pass  the training pass alone (gmts.trainer.batches.completion_logprobs forward + backward,
              the chunked head included) on the 1.5B shape, 16 rows of GSM8K prompts + 512-token
              answers, with and without gradient checkpointing: MFU = 6 N tokens / s / the measured
              bf16 matmul peak. Goal: >= 40% without checkpointing.
The random models cannot end an answer: every token embedding's first coordinate is a constant and
the end-of-sequence ids' its negative, so after the final norm their logits sit far below every
other token's (answers run to the limit on every side, so the sides' token counts are equal).
Time: a part starts only while the run is under --budget-s (default 420 s); subprocesses stop at
--hard-limit-s (470 s). The tokenizer and GSM8K come from --shared (Qwen2.5 tokenizer, gsm8k/); in
--dry-run a byte-level tokenizer and the arithmetic task stand in when they are missing.
"""

import datetime
import gc
import os
import platform
import shutil
import subprocess
import sys
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_check  # (the verdict, the JSON writer, the part runner)

# Qwen2.5-0.5B-Instruct's and 1.5B-Instruct's config.json (tests/test_gpu_bench.py compares them).
SHAPES = {
    "qwen2.5-0.5b": gpu_check.SHAPES["qwen2.5-0.5b"],
    "qwen2.5-1.5b": {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                     "tie_word_embeddings": True},
    "toy": gpu_check.SHAPES["toy"],
}
PARTS = ("device", "rollout", "step", "train_pass")
TAG = "gpu_bench"


def sizes(dry):
    if dry:
        return {"device": "cpu", "dtype": "float32", "copy_mb": 16, "matmul_n": 512,
                "rollout_shapes": ["toy"], "prompts": 2, "group": 4, "new_tokens": 8,
                "step_shape": "toy", "step_prompts": 2, "step_group": 4, "step_new_tokens": 8,
                "steps": 2, "pass_shape": "toy", "pass_rows": 2, "pass_answer": 8, "reps": 1}
    return {"device": "cuda", "dtype": "bfloat16", "copy_mb": 2048, "matmul_n": 8192,
            "rollout_shapes": ["qwen2.5-0.5b", "qwen2.5-1.5b"], "prompts": 8, "group": 8,
            "new_tokens": 256, "step_shape": "qwen2.5-0.5b", "step_prompts": 8, "step_group": 8,
            "step_new_tokens": 256, "steps": 3, "pass_shape": "qwen2.5-1.5b", "pass_rows": 16,
            "pass_answer": 512, "reps": 3}


def sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    """(fn's result, its wall seconds), the device synchronised before and after."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------------------------------
# device: the measured limits.

def measure_device(s):
    import torch
    dev, dtype = s["device"], getattr(torch, s["dtype"])
    src = torch.empty(s["copy_mb"] * 2**20, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    _, seconds = timed(lambda: [dst.copy_(src) for _ in range(10)], dev)
    bandwidth = 2 * src.numel() * 10 / seconds                   # bytes read + written per second
    n = s["matmul_n"]
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    _, seconds = timed(lambda: [a @ b for _ in range(10)], dev)
    return {"copy_bytes_per_s": bandwidth, "matmul_flops_per_s": 2 * n**3 * 10 / seconds,
            "matmul": f"{n}^3 {s['dtype']}", "pass": bandwidth > 0}


# --------------------------------------------------------------------------------------------------
# Models, prompts.

def end_ids(tok):
    """The ids that end an answer on our side and TRL's (the tokenizer's and Qwen's chat end)."""
    ids = {tok.eos_token_id, tok.pad_token_id, *tok.convert_tokens_to_ids(["<|im_end|>"])}
    return sorted(i for i in ids if isinstance(i, int) and i >= 0)


def random_model(shape, tok, s, seed=0):
    """A random Qwen2 of SHAPES[shape] in the run's dtype that never ends an answer (the module
    docstring)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(**dict(SHAPES[shape], vocab_size=max(SHAPES[shape]["vocab_size"],
                                                               len(tok))),
                         max_position_embeddings=4096)
    torch.manual_seed(seed)
    with torch.device(s["device"]):
        model = Qwen2ForCausalLM(config)
    with torch.no_grad():                    # the (tied) embedding: column 0 constant, ends negated
        emb = model.get_input_embeddings().weight                       # (V, hidden)
        emb[:, 0] = 2.0                   # after the final norm ~sqrt(hidden) x 2 in every logit
        emb[end_ids(tok), 0] = -2.0       # and as much below it in theirs
    model = model.to(getattr(torch, s["dtype"])).eval()
    model.generation_config = GenerationConfig(eos_token_id=end_ids(tok),
                                               pad_token_id=tok.pad_token_id)
    return model


def tokenizer_and_task(shared, dry):
    """(tokenizer, its name, the data source): Qwen2.5's and GSM8K from `shared`, else (dry run) a
    byte-level tokenizer and the arithmetic task."""
    tok_dir = os.path.join(shared, "qwen2.5-tokenizer")
    gsm8k = os.path.isfile(os.path.join(shared, "gsm8k", "test.jsonl"))
    if os.path.isdir(tok_dir) and gsm8k:
        from transformers import AutoTokenizer
        os.environ.setdefault("GMTS_DATA_DIR", shared)
        return AutoTokenizer.from_pretrained(tok_dir), "qwen2.5", "gsm8k"
    if not dry:
        raise SystemExit(f"error: --shared {shared} holds no qwen2.5-tokenizer/ and "
                         "gsm8k/test.jsonl (bench/README.md, 'GPU benchmark')")
    from gmts.tools.toy import byte_tokenizer
    return byte_tokenizer(), "byte-level stand-in (gmts/tools/toy.py)", "arithmetic"


def prompt_ids(tok, source, n):
    """n prompts of `source` through the chat template (data.render_prompt), as token ids."""
    from gmts import data
    split = "test" if source == "gsm8k" else "train"
    return data.prompt_token_ids(data.load_problems(source, split, limit=n), tok)[1]


# --------------------------------------------------------------------------------------------------
# rollout: generate vs ours eager vs ours compiled.

def decode_bytes(model, rows, prompt_width, new_tokens):
    """Bytes a decode step must read, on average over the answer: every weight once, and the KV
    cache filled so far (prompt_width + t columns of every row)."""
    from gmts.trainer.rollout import kv_cache_bytes
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    columns = prompt_width + (new_tokens - 1) / 2
    return weights + kv_cache_bytes(rows, 1, model.config, model.dtype) * columns


def rollout_shape(s, shape, tok, source, bandwidth, dry):
    import torch
    from transformers import GenerationConfig
    from gmts.trainer import compiled_decode
    from gmts.trainer.rollout import EagerDecode, left_pad, sample
    model = random_model(shape, tok, s)
    prompts = prompt_ids(tok, source, s["prompts"])
    G, T, dev = s["group"], s["new_tokens"], s["device"]
    rows = len(prompts) * G
    kw = {"group_size": G, "max_new_tokens": T, "eos_token_ids": end_ids(tok),
          "pad_token_id": tok.pad_token_id, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    ids, mask = left_pad([p for p in prompts for _ in range(G)], tok.pad_token_id, dev)
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              repetition_penalty=1.0, max_new_tokens=T, min_new_tokens=T,
                              eos_token_id=end_ids(tok), pad_token_id=tok.pad_token_id)
    sides = {}

    def ours(decode):
        gen = torch.Generator().manual_seed(0)
        return int(sample(model, prompts, generator=gen, decode=decode, **kw).valid_mask.sum())

    with torch.no_grad():
        out, seconds = timed(lambda: model.generate(ids, attention_mask=mask,
                                                    generation_config=config), dev)
        sides["generate"] = {"tokens": int((out.shape[1] - ids.shape[1]) * rows), "s": seconds}
        sides["eager"] = dict(zip(("tokens", "s"), timed(lambda: ours(EagerDecode), dev)))
        backend = compiled_decode.BACKEND
        compiled_decode.BACKEND = "eager" if dry else backend   # dry: capture, no code generation
        try:
            torch._dynamo.reset()
            _, compile_s = timed(lambda: ours(compiled_decode.CompiledDecode), dev)
            sides["compiled"] = dict(zip(("tokens", "s"), timed(
                lambda: ours(compiled_decode.CompiledDecode), dev)), compile_s=compile_s)
        finally:
            compiled_decode.BACKEND = backend
    step_bytes = decode_bytes(model, rows, ids.shape[1], T)
    for side in sides.values():
        side["tokens_per_s"] = side["tokens"] / side["s"]
        side["bandwidth_fraction"] = step_bytes * T / side["s"] / bandwidth
    counts = {side["tokens"] for side in sides.values()}
    fine = counts == {rows * T} and all(x["bandwidth_fraction"] <= 1 for x in sides.values())
    rate = {k: v["tokens_per_s"] for k, v in sides.items()}
    return {"rows": rows, "new_tokens": T, "prompt_width": ids.shape[1],
            "bytes_per_decode_step": step_bytes, **sides,
            "goals": {"compiled_60pct_bandwidth": sides["compiled"]["bandwidth_fraction"] >= 0.6,
                      "compiled_3x_generate": rate["compiled"] >= 3 * rate["generate"],
                      "eager_at_least_generate": rate["eager"] >= rate["generate"]},
            "pass": fine}


def check_rollout(s, tok, source, limits, dry):
    out = {}
    for shape in s["rollout_shapes"]:
        out[shape] = rollout_shape(s, shape, tok, source, limits["copy_bytes_per_s"], dry)
        free(s)
    return {**out, "pass": all(r["pass"] for r in out.values())}


# --------------------------------------------------------------------------------------------------
# step: train.py vs TRL's GRPOTrainer, one full GRPO step each.

REWARD = '''import zlib


def crc_parity(completion, answer=None, **fields):
    """1 for half of all answer texts: groups of random answers are mixed."""
    return float(zlib.crc32(completion.encode()) % 2)
'''


def crc_parity(completion, answer=None, **fields):      # the same reward, for TRL's side
    return float(zlib.crc32(completion.encode()) % 2)


def save_model(shape, tok, s, folder):
    if not os.path.isfile(os.path.join(folder, "config.json")):
        model = random_model(shape, tok, s)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        del model
    return folder


def run_ours(s, folder, source, work, timeout, dry):
    """train.py in a fresh process (in --dry-run: train.main in this one); its metrics.jsonl:
    seconds, tokens, peak memory per step."""
    out_dir = os.path.join(work, "ours")
    shutil.rmtree(out_dir, ignore_errors=True)
    reward = os.path.join(work, "crc_reward.py")
    with open(reward, "w") as fh:
        fh.write(REWARD)
    rows = s["step_prompts"] * s["step_group"]
    args = ["--model", folder, "--data", source, "--reward", reward + ":crc_parity",
            "--steps", str(s["steps"]), "--prompts-per-step", str(s["step_prompts"]),
            "--group-size", str(s["step_group"]), "--max-new-tokens", str(s["step_new_tokens"]),
            "--micro-batch-size", str(rows), "--selector", "ets", "--ratio", "0.2",
            "--loss-norm", "all", "--beta", "0", "--lr", "1e-6", "--temperature", "1.0",
            "--no-gradient-checkpointing", "--device", s["device"], "--dtype", s["dtype"],
            "--save-every", "0", "--log-samples", "0", "--seed", "0", "--output-dir", out_dir]
    if dry:
        gpu_check.run_train(args, True, timeout)
    else:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        done = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            return {"error": f"train.py rc={done.returncode}", "stderr_tail": done.stderr[-1500:]}
    metrics = gpu_check.read_metrics(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"step_s": [m["time_rollout_s"] + m["time_train_s"] for m in metrics],
            "tokens": [m.get("valid_tokens") for m in metrics],
            "peak_gb": max(m["peak_memory_mb"] for m in metrics) * 2**20 / 1e9}


def trl_worker(args):
    """TRL's GRPOTrainer on the same model folder, prompts, reward and settings; prints one JSON
    line (bench/common.py's emit)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from gmts import data
    from bench.common import emit, peak_bytes
    s = sizes(args.dry_run)
    cuda = s["device"] == "cuda"
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    problems = data.load_problems(args.source, "train")
    rows = [{"prompt": data.render_prompt(p, tok)} for p in problems]

    def reward(prompts, completions, **_):
        return [crc_parity(c) for c in completions]

    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=getattr(torch, s["dtype"]))
    batch = s["step_prompts"] * s["step_group"]
    config = GRPOConfig(output_dir=os.path.join(args.work_dir, "trl"), use_cpu=not cuda,
                        use_vllm=False, bf16=cuda, report_to="none", loss_type="bnpo", beta=0.0,
                        top_entropy_quantile=0.2, num_generations=s["step_group"],
                        per_device_train_batch_size=batch,
                        max_completion_length=s["step_new_tokens"], temperature=1.0, top_p=1.0,
                        top_k=0, repetition_penalty=1.0, learning_rate=1e-6, max_grad_norm=1.0,
                        gradient_checkpointing=False, max_steps=s["steps"], logging_steps=1,
                        save_strategy="no", seed=0, disable_tqdm=True, dataloader_num_workers=0)

    class Timer(TrainerCallback):
        steps, lengths, t0 = [], [], 0.0

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.steps.append(time.perf_counter() - self.t0)

        def on_log(self, _args, _state, _control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"] * batch)

    timer = Timer()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    GRPOTrainer(model=model, reward_funcs=reward, args=config,
                train_dataset=Dataset.from_list(rows), processing_class=tok,
                callbacks=[timer]).train()
    peak = torch.cuda.max_memory_allocated() if cuda else peak_bytes()
    emit({"step_s": timer.steps, "tokens": timer.lengths, "peak_gb": peak / 1e9,
          "trl": __import__("trl").__version__})


def check_step(s, tok, source, work, dry, timeout):
    import importlib.util
    from bench.common import median, run_worker
    folder = save_model(s["step_shape"], tok, s, os.path.join(work, s["step_shape"]))
    if source == "gsm8k":          # both sides draw from the same prompts: one file of them
        n = s["steps"] * s["step_prompts"]
        with open(os.path.join(os.environ["GMTS_DATA_DIR"], "gsm8k", "test.jsonl")) as fh:
            lines = [next(fh) for _ in range(n)]
        source = os.path.join(work, "step_prompts.jsonl")
        with open(source, "w") as fh:
            fh.writelines(lines)
    sides = {"ours": run_ours(s, folder, source, work, timeout(), dry)}
    if importlib.util.find_spec("trl") is None:
        why = ("trl is not installed: the dry run checks our side only" if dry else
               "trl is not installed (bench/README.md, 'GPU benchmark': the carried wheels)")
        return {**sides, "status": "not run", "why": why, "pass": False}
    sides["trl"] = run_worker([os.path.abspath(__file__), "--worker", "trl", "--model-dir", folder,
                               "--source", source, "--work-dir", work]
                              + (["--dry-run"] if dry else []), timeout_s=timeout())
    if any("error" in side for side in sides.values()):
        return {**sides, "pass": False}
    for side in sides.values():
        measured = side["step_s"][1:] or side["step_s"]          # the first step warms up
        side["median_step_s"] = median(measured)
        side["median_tokens_per_s"] = median([n / t for n, t in zip(side["tokens"][1:] or
                                                                    side["tokens"], measured)])
    equal = [round(n) for n in sides["ours"]["tokens"]] == [round(n) for n in
                                                              sides["trl"]["tokens"]]
    ratio = sides["ours"]["median_step_s"] / sides["trl"]["median_step_s"]
    return {**sides, "same_tokens": equal, "step_s_ratio": ratio,
            "goals": {"half_trl_step_s": ratio <= 0.5,
                      "no_more_peak_memory": sides["ours"]["peak_gb"] <= sides["trl"]["peak_gb"]},
            "pass": equal}


# --------------------------------------------------------------------------------------------------
# train_pass: the training pass's MFU, with and without gradient checkpointing.

def train_pass(s, shape, tok, source, peak_flops, rows, answer, reps):
    """forward + backward of completion_logprobs (the trainer's forward, chunked head included) on
    `rows` prompts of `source` + random answers of `answer` tokens, without and with gradient
    checkpointing: seconds (median of `reps` after a warm-up), real tokens, MFU = model FLOPs / s /
    peak_flops. Model FLOPs: 6 N per token, N the parameters without the embedding (a lookup), plus
    6 x the head's parameters per answer token (the chunked head runs at answer positions only;
    its recomputation in the backward is not counted)."""
    import torch
    from gmts.trainer.models import enable_gradient_checkpointing
    from gmts.trainer.batches import completion_logprobs
    from bench.common import median
    model = random_model(shape, tok, s)
    prompts = (prompt_ids(tok, source, rows) * rows)[:rows]
    gen = torch.Generator().manual_seed(0)
    completion = torch.randint(0, len(tok), (rows, answer), generator=gen).to(s["device"])
    valid = torch.ones_like(completion, dtype=torch.bool)
    params = sum(p.numel() for p in model.parameters())
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    body = params - emb.numel() - (0 if head is emb else head.numel())
    tokens = rows * answer + sum(map(len, prompts))
    model_flops = 6 * (body * tokens + head.numel() * rows * answer)
    model.train()
    out = {"rows": rows, "answer_tokens": answer, "tokens": tokens, "params": params,
           "model_flops": model_flops}
    for mode in ("no_checkpointing", "checkpointing"):
        if mode == "checkpointing":
            enable_gradient_checkpointing(model)
        times = []
        for rep in range(reps + 1):                               # the first pass warms up
            model.zero_grad(set_to_none=True)
            logp, seconds = timed(lambda: backward(completion_logprobs(
                model, prompts, completion, valid)[0]), s["device"])
            times.append(seconds) if rep else None
        flops = model_flops / median(times)
        out[mode] = {"s": median(times), "tokens_per_s": tokens / median(times),
                     "model_flops_per_s": flops, "mfu": flops / peak_flops,
                     "finite": bool(torch.isfinite(logp).all())}
    out["goals"] = {"mfu_40pct_without_checkpointing": out["no_checkpointing"]["mfu"] >= 0.4}
    out["pass"] = all(out[m]["finite"] and 0 < out[m]["mfu"] <= 1
                      for m in ("no_checkpointing", "checkpointing"))
    return out


def free(s):
    """Give the finished part's memory back (its model and buffers) before the next one."""
    import torch
    torch._dynamo.reset()                     # (its caches hold the compiled steps' models)
    gc.collect()
    if s["device"] == "cuda":
        torch.cuda.empty_cache()


def backward(logp):
    logp.sum().backward()
    return logp.detach()


# --------------------------------------------------------------------------------------------------

def main(argv=None):
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: every part's code")
    ap.add_argument("--out", default="", help="default: bench/results/gpu_bench.json; with "
                    "--dry-run <work-dir>/gpu-bench-dry-run.json")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared", "data"),
                    help="folder holding qwen2.5-tokenizer/ and gsm8k/test.jsonl")
    ap.add_argument("--work-dir", default="/tmp/gmts_gpu_bench")
    ap.add_argument("--budget-s", type=float, default=420, help="start no part after this")
    ap.add_argument("--hard-limit-s", type=float, default=470,
                    help="stop train.py / TRL after this many seconds of the run")
    ap.add_argument("--only", nargs="*", default=None, choices=PARTS, help="run only these")
    ap.add_argument("--worker", choices=["trl"], help=argparse_suppress())
    ap.add_argument("--model-dir", default="", help=argparse_suppress())
    ap.add_argument("--source", default="gsm8k", help=argparse_suppress())
    args = ap.parse_args(argv)
    if args.worker == "trl":
        trl_worker(args)
        return 0
    import torch
    s = sizes(args.dry_run)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device; use --dry-run for the CPU path")
    if args.dry_run:
        torch.set_num_threads(1)
    out = args.out or (os.path.join(args.work_dir, "gpu-bench-dry-run.json") if args.dry_run
                       else os.path.join(ROOT, "bench", "results", "gpu_bench.json"))
    os.makedirs(args.work_dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    t_start = time.perf_counter()
    deadline, hard = t_start + args.budget_s, t_start + args.hard_limit_s
    timeout = lambda: max(1.0, hard - time.perf_counter())
    tok, tok_name, source = tokenizer_and_task(args.shared, args.dry_run)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/gpu_bench.py " + " ".join(argv if argv is not None
                                                            else sys.argv[1:]),
        "dry_run": args.dry_run, "device": (torch.cuda.get_device_name(0)
                                            if not args.dry_run else "cpu"),
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "python": platform.python_version(), "tokenizer": tok_name, "prompts": source,
        "sizes": s, "checks": {name: {"status": "not run", "why": "not reached"}
                               for name in PARTS}}
    gpu_check.write(results, out, PARTS)
    wanted = lambda name: args.only is None or name in args.only
    limits = {}

    def part(name, fn):
        if not wanted(name):
            results["checks"][name] = {"status": "not run", "why": "not asked for (--only)"}
            gpu_check.write(results, out, PARTS)
        elif name != "device" and not limits:
            results["checks"][name] = {"status": "not run", "why": "the device part failed"}
            gpu_check.write(results, out, PARTS)
        else:
            gpu_check.run_check(name, fn, results, out, deadline, PARTS, TAG)

    def device():
        limits.update(measure_device(s))
        return dict(limits)
    part("device", device)
    part("rollout", lambda: check_rollout(s, tok, source, limits, args.dry_run))
    part("step", lambda: check_step(s, tok, source, args.work_dir, args.dry_run, timeout))
    part("train_pass", lambda: train_pass(s, s["pass_shape"], tok, source,
                                          limits["matmul_flops_per_s"], s["pass_rows"],
                                          s["pass_answer"], s["reps"]))
    free(s)
    shutil.rmtree(os.path.join(args.work_dir, s["step_shape"]), ignore_errors=True)
    results["wall_s"] = time.perf_counter() - t_start
    gpu_check.write(results, out, PARTS)
    print(f"{TAG}: {results['verdict']} in {results['wall_s']:.0f}s; wrote {out}")
    return 0 if results["pass"] else 1


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
