"""The GPU check: one prepared command that runs what only a GPU can show, and writes bench/results/gpu.json.

    python bench/gpu_check.py                     # on one GPU, <= 8 minutes on an H200-class card
    python bench/gpu_check.py --dry-run --out /tmp/gpu.json     # the same path on CPU at toy sizes (tests run it)

Checks, in order (each one's figures and pass/fail go to the JSON; a failing check does not stop the others):
  head        the chunked output head (gmts/method/head.py) in bfloat16 against a float64 reference of the same bf16
              inputs: log-probs, entropies and the gradients of sum(logp) w.r.t. hidden states and head weight.
              Passes when our error is at most 1.5x (+1e-3) that of the plain bf16 path (bf16 logits, then float32
              log_softmax), i.e. chunking costs no accuracy beyond bf16's own.
  rollout     gmts.trainer.rollout.sample (KV cache, shared prefix, rows dropped) in bf16 against a full forward
              (gmts.trainer.policy.completion_logprobs) over the same sampled tokens: mean / max |Δ log p| on valid tokens.
              Passes at mean < 0.05 (bf16 keeps ~3 significant digits of each logit).
  speed       rollout tokens/s side by side, model.generate (explicit sampling settings, T = 1, no top-k / top-p) vs
              ours eager vs ours compiled (sample(compile=True): the decode step torch.compile'd over the static KV
              cache, CUDA graphs), at G = 8 and 16 answers of one ~100-token prompt, on the random Qwen2.5-0.5B-shaped
              model. The compiled sampler's first call compiles (compile_s, reported) and is not timed. --dry-run
              leaves `compiled` out (inductor on a CPU: ~1 min per graph; tests/test_compile.py covers it).
  train_pass  the training pass alone, in tokens/s of real tokens and MFU: forward + backward of sum(log π) through
              gmts.trainer.policy.completion_logprobs (the trainer's forward: backbone, chunked head) in bf16 on the
              0.5B shape, micro-batches of rows whose answers spread from 20 to 400 tokens (today's code pads each
              micro-batch to the batch's longest answer; the real tokens are what is counted). MFU = 6 x params x
              real tokens / s / the card's dense bf16 peak (PEAK_BF16_FLOPS, by device name; null when unknown).
  train       train.py on a random model of Qwen2.5-0.5B's shape (and 1.5B's when the planner says it fits in half
              the card): one step with a checkpoint, then --resume for a second step; seconds per step, finite loss,
              the resumed step really resumed, and peak memory (torch.cuda.max_memory_allocated, train.py's
              peak_memory_mb) against the planner's estimate (gmts/tools/memory.py) for the same flags. --beta 0.001 keeps
              every row in the backward pass (a random model earns no reward, so without a KL term every advantage is
              0 and train.py would skip the backward) and loads the reference model the planner then counts too.
              On a GPU the first step runs with --compile (the resumed one without: it is a resumable flag), so
              its time includes the decode step's compile.
  fsdp        skipped: one GPU.
Time: each check starts only while the run is under --budget-s (default 450 s; the rest are written as skipped),
so the whole command stays within 8 minutes even when compiling is slow.
The models are random (built from the configs' shapes; nothing is downloaded). The Qwen2.5 tokenizer comes from
--shared (../shared/data) when present, else a byte-level tokenizer (gmts/tools/toy.py) stands in (same model shape).
"""
import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Shapes of Qwen2.5-0.5B-Instruct / 1.5B-Instruct (their config.json files), and a toy for --dry-run.
SHAPES = {
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    "toy": dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, tie_word_embeddings=True),
}


def sizes(dry):
    if dry:
        return dict(device="cpu", head_tokens=64, head_vocab=512, head_hidden=32, chunk=16, shape="toy",
                    new_tokens=8, groups=(8, 16), speed_reps=1, train_shapes=["toy"], train_new_tokens=8,
                    train_prompts=2, train_group=4, train_micro=4, compile=False, pass_rows=4, pass_lengths=(3, 12),
                    pass_reps=1)
    return dict(device="cuda", head_tokens=4096, head_vocab=151936, head_hidden=1536, chunk=1024,
                shape="qwen2.5-0.5b", new_tokens=128, groups=(8, 16), speed_reps=3,
                train_shapes=["qwen2.5-0.5b", "qwen2.5-1.5b"], train_new_tokens=128, train_prompts=8, train_group=8,
                train_micro=16, compile=True, pass_rows=16, pass_lengths=(20, 400), pass_reps=3)


# Dense bf16 peak FLOP/s by device name (vendor data sheets, SXM parts without sparsity); the first match counts.
PEAK_BF16_FLOPS = [("H200", 989e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12), ("A10G", 70e12),
                   ("L4", 121e12), ("4090", 165e12), ("3090", 71e12)]


def sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------------------------------
# head: bf16 chunked head vs a float64 reference.

def check_head(s):
    import torch
    import gmts
    dev = s["device"]
    gen = torch.Generator(device="cpu").manual_seed(0)
    n, V, H = s["head_tokens"], s["head_vocab"], s["head_hidden"]
    h = (torch.randn(n, H, generator=gen) * 1.0).to(dev, torch.bfloat16)
    w = (torch.randn(V, H, generator=gen) * H ** -0.5 * 3).to(dev, torch.bfloat16)
    targets = torch.randint(0, V, (n,), generator=gen).to(dev)

    def ours():
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        logp, ent = gmts.token_logprobs_and_entropy(hh, ww, targets, chunk_size=s["chunk"], with_entropy=True)
        logp.sum().backward()
        return logp.detach().double(), ent.double(), hh.grad.double(), ww.grad.double()

    def plain_bf16():
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        logits = (hh @ ww.t()).float()
        lsm = torch.log_softmax(logits, -1)
        logp = lsm.gather(1, targets[:, None])[:, 0]
        ent = -(lsm.exp() * lsm).sum(-1)
        logp.sum().backward()
        return logp.detach().double(), ent.detach().double(), hh.grad.double(), ww.grad.double()

    def reference():
        hh, ww = h.double().requires_grad_(), w.double().requires_grad_()
        lsm = torch.log_softmax(hh @ ww.t(), -1)
        logp = lsm.gather(1, targets[:, None])[:, 0]
        ent = -(lsm.exp() * lsm).sum(-1)
        logp.sum().backward()
        return logp.detach(), ent.detach(), hh.grad, ww.grad

    ref = reference()
    names = ("logp", "entropy", "grad_hidden", "grad_weight")
    err = lambda got: {k: float((g - r).abs().max()) for k, g, r in zip(names, got, ref)}  # noqa: E731
    t0 = time.perf_counter()
    got = ours()
    sync(dev)
    ours_s = time.perf_counter() - t0
    e_ours, e_plain = err(got), err(plain_bf16())
    ok = all(e_ours[k] <= 1.5 * e_plain[k] + 1e-3 for k in names)
    return {"tokens": n, "vocab": V, "hidden": H, "chunk": s["chunk"], "max_abs_error_ours": e_ours,
            "max_abs_error_plain_bf16": e_plain, "ours_s": ours_s, "pass": ok}


# ----------------------------------------------------------------------------------------------------------------------
# Models.

def random_model(shape, dtype, device, tok, seed=0):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model = model.to(dtype).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model.generation_config = GenerationConfig(eos_token_id=[tok.eos_token_id], pad_token_id=pad)
    return model


def tokenizer(shared, dry):
    path = os.path.join(shared, "qwen2.5-tokenizer")
    if os.path.isdir(path) and not dry:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path), "qwen2.5"      # (the byte-level one in --dry-run: toy vocab)
    from gmts.tools.toy import byte_tokenizer
    return byte_tokenizer(), "byte-level stand-in (gmts/tools/toy.py)"


def prompt_ids(tok):
    import data
    problem = data.load_problems("arithmetic", "train", limit=1)[0]
    return data.prompt_token_ids([problem], tok)[1][0]


# ----------------------------------------------------------------------------------------------------------------------
# rollout: cached sampling vs a full forward, bf16.

def check_rollout(s, model, prompt, eos, pad):
    import torch
    from gmts.trainer.policy import completion_logprobs
    from gmts.trainer.rollout import sample
    gen = torch.Generator(device=s["device"]).manual_seed(0)
    prompts = [prompt, prompt[: max(1, len(prompt) // 2)]]
    with torch.no_grad():
        roll = sample(model, prompts, group_size=4, max_new_tokens=s["new_tokens"], eos_token_ids=eos,
                      pad_token_id=pad, temperature=1.0, generator=gen)
        logp, ent = completion_logprobs(model, prompts, roll.completion_ids, roll.valid_mask, group_size=4,
                                        with_entropy=True)
    v = roll.valid_mask
    d_logp = (roll.logp[v].double() - logp[v].double()).abs()
    d_ent = (roll.entropy[v].double() - ent[v].double()).abs()
    return {"valid_tokens": int(v.sum()), "mean_abs_dlogp": float(d_logp.mean()), "max_abs_dlogp": float(d_logp.max()),
            "mean_abs_dentropy": float(d_ent.mean()), "max_abs_dentropy": float(d_ent.max()),
            "pass": bool(d_logp.mean() < 0.05)}


# ----------------------------------------------------------------------------------------------------------------------
# speed: our sampler vs model.generate.

def check_speed(s, model, prompt, eos, pad):
    import torch
    from gmts.trainer.rollout import sample
    dev = s["device"]
    ids = torch.tensor([prompt], device=dev)
    methods = ["generate", "ours"] + (["compiled"] if s["compile"] else [])
    out = {}
    for G in s["groups"]:
        rows, compile_s = {}, None
        for i, method in enumerate(methods * (s["speed_reps"] + 1)):     # the first round warms up (and compiles)
            gen = torch.Generator(device=dev).manual_seed(i)
            sync(dev)
            t0 = time.perf_counter()
            with torch.no_grad():
                if method in ("ours", "compiled"):
                    roll = sample(model, [prompt], group_size=G, max_new_tokens=s["new_tokens"], eos_token_ids=eos,
                                  pad_token_id=pad, temperature=1.0, generator=gen, compile=method == "compiled")
                    tokens = int(roll.valid_mask.sum())
                else:
                    torch.manual_seed(i)
                    seqs = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                          top_k=0, top_p=1.0, num_return_sequences=G, max_new_tokens=s["new_tokens"],
                                          eos_token_id=eos, pad_token_id=pad)
                    new = seqs[:, ids.shape[1]:]
                    ended = torch.isin(new, torch.tensor(eos, device=dev))
                    length = torch.where(ended.any(1), ended.float().argmax(1) + 1, new.shape[1])
                    tokens = int(length.sum())
            sync(dev)
            seconds = time.perf_counter() - t0
            if i >= len(methods):
                rows.setdefault(method, []).append(tokens / seconds)
            elif method == "compiled":
                compile_s = seconds                                  # the warm-up call: compile + one rollout
        best = {m: sorted(v)[len(v) // 2] for m, v in rows.items()}     # median over the measured calls
        out[f"G{G}"] = {"tokens_per_s": best, "ours_over_generate": best["ours"] / best["generate"], "runs": rows,
                        **({"compiled_over_ours": best["compiled"] / best["ours"],
                            "compiled_over_generate": best["compiled"] / best["generate"],
                            "compile_s": compile_s} if "compiled" in best else {})}
    return out


# ----------------------------------------------------------------------------------------------------------------------
# train_pass: forward + backward of the trainer's forward, real tokens/s and MFU.

def check_train_pass(s, model):
    import torch
    from gmts.trainer.policy import completion_logprobs
    dev, (short, long) = s["device"], s["pass_lengths"]
    gen = torch.Generator().manual_seed(0)
    rows, vocab = s["pass_rows"], model.config.vocab_size
    prompts = [torch.randint(3, vocab, (int(n),), generator=gen).tolist() for n in torch.randint(60, 120, (rows,),
                                                                                                   generator=gen)]
    lengths = torch.linspace(short, long, rows).round().long()[torch.randperm(rows, generator=gen)]
    completion = torch.randint(3, vocab, (rows, long), generator=gen).to(dev)
    valid = (torch.arange(long)[None, :] < lengths[:, None]).to(dev)
    params = sum(p.numel() for p in model.parameters())
    model.train()
    times = []
    for rep in range(s["pass_reps"] + 1):                            # the first pass warms up
        model.zero_grad(set_to_none=True)
        sync(dev)
        t0 = time.perf_counter()
        logp, _ = completion_logprobs(model, prompts, completion, valid, group_size=1)
        logp.sum().backward()
        sync(dev)
        if rep:
            times.append(time.perf_counter() - t0)
    model.eval()
    model.zero_grad(set_to_none=True)
    seconds = sorted(times)[len(times) // 2]
    real = int(valid.sum()) + sum(len(p) for p in prompts)          # every real token goes through the backbone
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    peak = next((f for key, f in PEAK_BF16_FLOPS if key in name), None)
    flops = 6 * params * real / seconds
    return {"rows": rows, "answer_lengths": [short, long], "real_tokens": real,
            "computed_tokens": rows * (max(len(p) for p in prompts) + long), "params": params, "seconds": seconds,
            "real_tokens_per_s": real / seconds, "model_flops_per_s": flops, "peak_bf16_flops": peak,
            "mfu": flops / peak if peak else None, "pass": bool(torch.isfinite(logp).all())}


# ----------------------------------------------------------------------------------------------------------------------
# train: train.py one step + checkpoint, then --resume for a second; peak memory vs the planner.

def check_train(s, shape, shared, work, tok, dry):
    import torch
    from gmts.tools import memory
    from gmts.run.config import parse_config
    folder = os.path.join(work, shape)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        model = random_model(shape, torch.bfloat16 if not dry else torch.float32, "cpu" if dry else "cuda", tok)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        del model
        if not dry:
            torch.cuda.empty_cache()
    out_dir = os.path.join(work, f"run-{shape}")
    shutil.rmtree(out_dir, ignore_errors=True)
    flags = ["--model", folder, "--data", "arithmetic", "--prompts-per-step", str(s["train_prompts"]),
             "--group-size", str(s["train_group"]), "--max-new-tokens", str(s["train_new_tokens"]),
             "--micro-batch-size", str(s["train_micro"]), "--beta", "0.001", "--lr", "1e-6", "--save-every", "1",
             "--log-samples", "0", "--device", s["device"], "--output-dir", out_dir]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if dry:
        env["OMP_NUM_THREADS"] = "1"
    runs = []
    first = ["--steps", "1"] + (["--compile"] if s["compile"] else [])      # the resumed step runs eager
    for extra in (first, ["--steps", "2", "--resume", out_dir]):
        t0 = time.perf_counter()
        if dry:     # in this process: the same train.main, without two interpreter start-ups (the test runs this)
            import train
            train.main(flags + extra)
            runs.append({"rc": 0, "wall_s": time.perf_counter() - t0, "stderr_tail": ""})
            continue
        done = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *flags, *extra], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        runs.append({"rc": done.returncode, "wall_s": time.perf_counter() - t0, "stderr_tail": done.stderr[-1500:]})
        if done.returncode:
            return {"pass": False, "runs": runs}
    with open(os.path.join(out_dir, "metrics.jsonl")) as fh:
        metrics = [json.loads(line) for line in fh]
    cfg = parse_config(flags)
    shape_ = memory.model_shape(memory.load_config(folder))
    longest = len(prompt_ids(tok))
    _, phases, (planned, _), _ = memory.plan(cfg, shape_, prompt_tokens=longest, device="cpu" if dry else "gpu")
    measured = max(m["peak_memory_mb"] for m in metrics) * 2 ** 20
    finite = all(math.isfinite(m.get("loss", float("nan"))) for m in metrics)
    return {"steps": [m["step"] for m in metrics],
            "seconds_per_step": [m["time_rollout_s"] + m["time_train_s"] for m in metrics],
            "time_rollout_s": [m["time_rollout_s"] for m in metrics], "time_train_s": [m["time_train_s"] for m in metrics],
            "loss": [m.get("loss") for m in metrics], "valid_tokens": [m.get("valid_tokens") for m in metrics],
            "peak_memory_measured_gib": measured / 2 ** 30, "peak_memory_planned_gib": planned / 2 ** 30,
            "planned_phases_gib": {k: v / 2 ** 30 for k, v in phases.items()},
            "planner_error": (planned - measured) / measured,
            "memory_measure": "VmHWM of this process (dry run: not the planner's validation)" if dry else "max_memory_allocated",
            "compiled_first_step": s["compile"], "runs": runs, "pass": finite and [m["step"] for m in metrics] == [1, 2]}


def fits_half(shape, s):
    """Train the 1.5B shape only when the planner's estimate is under half the card."""
    import torch
    from gmts.tools import memory
    from gmts.run.config import parse_config
    from transformers import Qwen2Config
    cfg = parse_config(["--prompts-per-step", str(s["train_prompts"]), "--group-size", str(s["train_group"]),
                        "--max-new-tokens", str(s["train_new_tokens"]), "--micro-batch-size", str(s["train_micro"]),
                        "--beta", "0.001", "--device", s["device"]])
    peak = memory.plan(cfg, memory.model_shape(Qwen2Config(**SHAPES[shape])), prompt_tokens=128, device="gpu")[2][0]
    return peak < 0.5 * torch.cuda.get_device_properties(0).total_memory


# ----------------------------------------------------------------------------------------------------------------------

def run_check(name, fn, results, deadline=float("inf")):
    t0 = time.perf_counter()
    if t0 > deadline:            # keep the whole command within its time: what did not run is written as skipped
        results[name] = {"skipped": "time budget (--budget-s) spent before this check", "check_s": 0.0}
        print(f"gpu_check: {name}: skipped (time budget)", flush=True)
        return
    try:
        results[name] = fn()
    except Exception as err:     # one broken check must not hide the others' figures
        results[name] = {"pass": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
    results[name]["check_s"] = time.perf_counter() - t0
    print(f"gpu_check: {name}: {'pass' if results[name].get('pass', True) else 'FAIL'} "
          f"({results[name]['check_s']:.1f}s)", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, toy sizes: the same code path in seconds")
    ap.add_argument("--out", default="", help="default: bench/results/gpu.json; with --dry-run <work-dir>/gpu-dry-run.json")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared", "data"),
                    help="folder holding qwen2.5-tokenizer/ (else a byte-level tokenizer stands in)")
    ap.add_argument("--work-dir", default="/tmp/gmts_gpu_check")
    ap.add_argument("--budget-s", type=float, default=450, help="start no check after this many seconds")
    args = ap.parse_args(argv)
    args.out = args.out or (os.path.join(args.work_dir, "gpu-dry-run.json") if args.dry_run
                            else os.path.join(ROOT, "bench", "results", "gpu.json"))
    import torch
    s = sizes(args.dry_run)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device; use --dry-run for the CPU path")
    torch.manual_seed(0)
    if args.dry_run:
        torch.set_num_threads(1)
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    os.makedirs(args.work_dir, exist_ok=True)
    tok, tok_name = tokenizer(args.shared, args.dry_run)
    results = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "dry_run": args.dry_run, "device": torch.cuda.get_device_name(0) if not args.dry_run else "cpu",
               "torch": torch.__version__, "python": platform.python_version(), "tokenizer": tok_name, "checks": {}}
    checks = results["checks"]
    run_check("head", lambda: check_head(s), checks)
    model = random_model(s["shape"], torch.bfloat16, s["device"], tok)
    prompt = prompt_ids(tok)
    eos, pad = [tok.eos_token_id or 0], tok.pad_token_id if tok.pad_token_id is not None else 0
    run_check("rollout", lambda: check_rollout(s, model, prompt, eos, pad), checks)
    run_check("speed", lambda: check_speed(s, model, prompt, eos, pad), checks, deadline)
    run_check("train_pass", lambda: check_train_pass(s, model), checks, deadline)
    del model
    if not args.dry_run:
        torch.cuda.empty_cache()
    for shape in s["train_shapes"]:
        if shape == "qwen2.5-1.5b" and not fits_half(shape, s):
            checks[f"train-{shape}"] = {"pass": True, "skipped": "planner estimate above half the card"}
            continue
        run_check(f"train-{shape}", lambda: check_train(s, shape, args.shared, args.work_dir, tok, args.dry_run),
                  checks, deadline)
    checks["fsdp"] = {"skipped": "one GPU (FSDP is tested with gloo on CPU: tests/test_distributed.py)"}
    results["wall_s"] = time.perf_counter() - t_start
    results["pass"] = all(c.get("pass", True) for c in checks.values())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=2)
    print(f"gpu_check: {'all pass' if results['pass'] else 'SOME FAIL'} in {results['wall_s']:.0f}s; wrote {args.out}")
    return 0 if results["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
