"""The GPU check: the one prepared GPU run. It checks what a first GPU user needs and writes its
verdict as it goes.

    python bench/gpu_check.py        # one GPU (two for torchrun): <= 8 minutes, <= 20 GB of disk
    python bench/gpu_check.py --dry-run --out /tmp/gpu.json     # the same path on CPU, toy sizes

Every check ends as "pass", "fail" or "not run" (with why). The verdict is "pass" only when EVERY
check passed: a check not run (one GPU for torchrun, the time budget spent) is not a pass, and the
verdict is then "incomplete" (exit 1). The JSON (bench/results/gpu.json) is rewritten after every
check, so a run stopped by a time limit still leaves the checks done so far.

Checks, in order:
  head                   the chunked output head (gmts/method/head.py) in bf16 against float64 on
                         the same bf16 inputs: error at most 1.5x (+1e-3) that of the plain bf16
                         path (chunking costs nothing beyond bf16).
  rollout                gmts.trainer.rollout.sample in bf16 (KV cache, shared prefix) against a
                         full forward over the same tokens (mean |Δ log p| < 0.05), on prompts of
                         mixed lengths, with end-of-sequence reached: at least half the answers end
                         before max_new_tokens, so rows are dropped and compacted.
  compiled_equals_eager  sample(decode=CompiledDecode) (CUDA graphs) against eager, float32, same
                         seeds, on rollouts of 2 x MIN_ROWS rows whose longest prompts differ (two
                         width buckets) and whose rows end (bucketed down to MIN_ROWS): identical
                         tokens, |Δ log p| <= 1e-3, no more graphs than compiled_decode.graph_bound.
  train_pass             the training pass's MFU on the 0.5B shape in bf16, with and without
                         gradient checkpointing, against the measured bf16 matmul peak
                         (bench/gpu_bench.py's train_pass: 16 arithmetic prompts + 512-token
                         answers); passes when finite and at most 1.
  train_resume           train.py --deterministic: one run of 2 steps, and one of 1 step then
                         --resume to 2, on a random model of the 0.5B shape rewarded for its
                         answers' length parity (mixed groups: both steps update): bit-exact
                         (every figure of both steps and every weight equal; else the first
                         differences). Also the same 2 steps without --deterministic (seconds
                         per step with and without), and the peak memory against
                         gmts/tools/memory.py's plan.
  train_compile          train.py --compile against eager, 4 steps on the 2-layer model of the 0.5B
                         width: at most graph_bound graphs and no graph break (dynamo's counters);
                         seconds per step of both.
  torchrun               `torchrun --nproc-per-node 2 train.py` (NCCL): a step, a checkpoint and a
                         resumed step, when two GPUs exist; else not run.
Time: a check starts only while the run is under --budget-s (default 400 s); train.py and torchrun
are stopped at --hard-limit-s (470 s). On an H200 (2026-12-04) the first four checks took 250 s.
Disk: a checkpoint of the 0.5B shape with its AdamW state is ~7 GB; train_resume holds at most two
between its runs (three while one rotates) and deletes them, and the JSON records the work folder's
largest size between runs. The models are random (nothing is downloaded); the Qwen2.5 tokenizer
comes from --shared when present, else a byte-level tokenizer stands in.
"""

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

# Shapes of Qwen2.5-0.5B-Instruct (its config.json), a 2-layer model of its width (compiling,
# torchrun), and a toy.
_QWEN05 = {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
           "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
           "tie_word_embeddings": True}
SHAPES = {
    "qwen2.5-0.5b": _QWEN05,
    "qwen2.5-0.5b-2layers": {**_QWEN05, "num_hidden_layers": 2},
    "toy": {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": True},
}
CHECKS = ("head", "rollout", "compiled_equals_eager", "train_pass", "train_resume", "train_compile",
          "torchrun")
EOS_EVERY = 16  # every 16th token id ends an answer: a random model's answers end after ~16 tokens


def sizes(dry):
    if dry:
        return {
            "device": "cpu",
            "head_tokens": 64,
            "head_vocab": 512,
            "head_hidden": 32,
            "chunk": 16,
            "shape": "toy",
            "small": "toy",
            "new_tokens": 48,
            "train_new_tokens": 8,
            "train_prompts": 2,
            "train_group": 4,
            "train_micro": 4,
            "prompt_lengths": ((5, 20), (9, 40)),
        }
    return {
        "device": "cuda",
        "head_tokens": 4096,
        "head_vocab": 151936,
        "head_hidden": 1536,
        "chunk": 1024,
        "shape": "qwen2.5-0.5b",
        "small": "qwen2.5-0.5b-2layers",
        "new_tokens": 64,
        "train_new_tokens": 64,
        "train_prompts": 8,
        "train_group": 8,
        "train_micro": 16,
        "prompt_lengths": ((7, 20), (30, 50)),
    }


def sync(device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def verdict(checks, names=CHECKS):
    """'pass' when every check in `names` passed, 'fail' when one failed, else 'incomplete'."""
    states = [checks.get(name, {}).get("status", "not run") for name in names]
    return (
        "fail" if "fail" in states else "pass" if all(s == "pass" for s in states) else "incomplete"
    )


# --------------------------------------------------------------------------------------------------
# head: bf16 chunked head vs a float64 reference.


def check_head(s):
    import torch
    import gmts

    dev = s["device"]
    gen = torch.Generator(device="cpu").manual_seed(0)
    n, V, H = s["head_tokens"], s["head_vocab"], s["head_hidden"]
    h = (torch.randn(n, H, generator=gen) * 1.0).to(dev, torch.bfloat16)
    w = (torch.randn(V, H, generator=gen) * H**-0.5 * 3).to(dev, torch.bfloat16)
    targets = torch.randint(0, V, (n,), generator=gen).to(dev)

    def ours():
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        logp, ent = gmts.token_logprobs_and_entropy(
            hh, ww, targets, chunk_size=s["chunk"], with_entropy=True
        )
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
    err = lambda got: {k: float((g - r).abs().max()) for k, g, r in zip(names, got, ref)}
    t0 = time.perf_counter()
    got = ours()
    sync(dev)
    ours_s = time.perf_counter() - t0
    e_ours, e_plain = err(got), err(plain_bf16())
    ok = all(e_ours[k] <= 1.5 * e_plain[k] + 1e-3 for k in names)
    return {
        "tokens": n,
        "vocab": V,
        "hidden": H,
        "chunk": s["chunk"],
        "max_abs_error_ours": e_ours,
        "max_abs_error_plain_bf16": e_plain,
        "ours_s": ours_s,
        "pass": ok,
    }


# --------------------------------------------------------------------------------------------------
# Models.


def random_model(shape, dtype, device, tok, seed=0):
    """A random Qwen2 of SHAPES[shape] (vocabulary: the tokenizer's), whose answers end: every
    EOS_EVERY-th id is an end-of-sequence id of its generation config."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        **dict(SHAPES[shape], vocab_size=min(SHAPES[shape]["vocab_size"], len(tok))),
        max_position_embeddings=4096,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model = model.to(dtype).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids(config.vocab_size, tok), pad_token_id=pad
    )
    return model


def eos_ids(vocab, tok):
    return sorted({tok.eos_token_id or 0, *range(EOS_EVERY - 1, vocab, EOS_EVERY)})


def tokenizer(shared, dry):
    path = os.path.join(shared, "qwen2.5-tokenizer")
    if os.path.isdir(path) and not dry:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            path
        ), "qwen2.5"  # (the byte-level one in --dry-run: toy vocab)
    from gmts.tools.toy import byte_tokenizer

    return byte_tokenizer(), "byte-level stand-in (gmts/tools/toy.py)"


def mixed_prompts(lengths, vocab, seed=0):
    """Prompts of the given lengths, random ids (no id that ends an answer)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = lambda n: [
        int(x) for x in torch.randint(0, vocab // EOS_EVERY, (n,), generator=gen) * EOS_EVERY
    ]
    return [ids(n) for n in lengths]


# --------------------------------------------------------------------------------------------------
# rollout: cached sampling vs a full forward, bf16, mixed prompt lengths, answers that end.


def check_rollout(s, model, eos, pad):
    import torch
    from gmts.trainer.batches import completion_logprobs
    from gmts.trainer.rollout import sample

    prompts = mixed_prompts(
        [n for lengths in s["prompt_lengths"] for n in lengths], model.config.vocab_size
    )
    with torch.no_grad():
        roll = sample(
            model,
            prompts,
            group_size=4,
            max_new_tokens=s["new_tokens"],
            eos_token_ids=eos,
            pad_token_id=pad,
            temperature=1.0,
            generator=torch.Generator().manual_seed(0),
        )
        logp, ent = completion_logprobs(
            model, prompts, roll.completion_ids, roll.valid_mask, group_size=4, with_entropy=True
        )
    v = roll.valid_mask
    d_logp = (roll.old_logp[v].double() - logp[v].double()).abs()
    d_ent = (roll.entropy[v].double() - ent[v].double()).abs()
    ended = float(roll.finished.float().mean())
    return {
        "prompt_lengths": [len(p) for p in prompts],
        "valid_tokens": int(v.sum()),
        "answers_ended": ended,
        "mean_abs_dlogp": float(d_logp.mean()),
        "max_abs_dlogp": float(d_logp.max()),
        "mean_abs_dentropy": float(d_ent.mean()),
        "max_abs_dentropy": float(d_ent.max()),
        "pass": bool(d_logp.mean() < 0.05) and ended >= 0.5,
    }


# --------------------------------------------------------------------------------------------------
# compiled_equals_eager: sample(decode=CompiledDecode) against eager, float32, two width buckets,
# rows that end.


def check_compiled(s, model, eos, pad, dry):
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters
    from gmts.trainer import compiled_decode
    from gmts.trainer.rollout import sample

    if dry:
        compiled_decode.BACKEND = (
            "eager"  # dynamo's capture without code generation (inductor: ~20 s/graph)
        )
    torch._dynamo.reset()
    counters.clear()
    out, ok, longest = [], True, 0
    for i, lengths in enumerate(s["prompt_lengths"]):
        prompts = mixed_prompts(lengths, model.config.vocab_size, seed=i)
        longest = max(longest, *lengths)
        # 2 prompts x MIN_ROWS answers: rows are bucketed (2 MIN_ROWS, then MIN_ROWS) as they end
        kw = {"group_size": compiled_decode.MIN_ROWS, "max_new_tokens": s["new_tokens"],
              "eos_token_ids": eos, "pad_token_id": pad}
        t0 = time.perf_counter()
        compiled = sample(
            model, prompts, generator=torch.Generator().manual_seed(i),
            decode=compiled_decode.CompiledDecode, **kw
        )
        sync(s["device"])
        compile_s = time.perf_counter() - t0
        eager = sample(model, prompts, generator=torch.Generator().manual_seed(i), **kw)
        same = torch.equal(compiled.completion_ids, eager.completion_ids) and torch.equal(
            compiled.valid_mask, eager.valid_mask
        )
        d_logp = float((compiled.old_logp - eager.old_logp).abs().max())
        ended = float(eager.finished.float().mean())
        ok &= same and d_logp <= 1e-3 and ended >= 0.5
        out.append(
            {
                "longest_prompt": max(lengths),
                "same_tokens": same,
                "max_abs_dlogp": d_logp,
                "answers_ended": ended,
                "first_call_s": compile_s,
            }
        )
    graphs = counters["stats"]["unique_graphs"]
    bound = compiled_decode.graph_bound(longest, 2 * compiled_decode.MIN_ROWS)
    return {
        "rollouts": out,
        "graphs": graphs,
        "graph_bound": bound,
        "pass": bool(ok) and 0 < graphs <= bound,
    }


# --------------------------------------------------------------------------------------------------
# train_pass: the training pass's MFU (bench/gpu_bench.py's, on this check's shape).


def check_train_pass(s, tok, dry):
    import gpu_bench
    bench = gpu_bench.sizes(dry)
    peak = gpu_bench.measure_device(bench)["matmul_flops_per_s"]
    out = gpu_bench.train_pass(bench, s["shape"], tok, "arithmetic", peak, bench["pass_rows"],
                               bench["pass_answer"], bench["reps"])
    gpu_bench.free(bench)
    return {**out, "matmul_flops_per_s": peak}


# --------------------------------------------------------------------------------------------------
# train_resume: 2 steps in one run against 1 step + --resume, and the planner.


def run_train(args, dry, timeout):
    """train.py with `args`; in --dry-run in this process (train.main: no interpreter start-up)."""
    t0 = time.perf_counter()
    if dry:
        import torch
        import train

        deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            train.main(args)
        finally:                        # --deterministic is this process's setting: put it back
            torch.use_deterministic_algorithms(deterministic)
        return {"rc": 0, "wall_s": time.perf_counter() - t0}
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    try:
        done = subprocess.run(
            [sys.executable, os.path.join(ROOT, "train.py"), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "wall_s": time.perf_counter() - t0}
    return {
        "rc": done.returncode,
        "wall_s": time.perf_counter() - t0,
        "stderr_tail": done.stderr[-1500:],
    }


def save_model(shape, s, tok, folder, dry):
    import torch

    if not os.path.isfile(os.path.join(folder, "config.json")):
        model = random_model(shape, torch.float32 if dry else torch.bfloat16, s["device"], tok)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        del model
        if not dry:
            torch.cuda.empty_cache()
    return folder


def read_metrics(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def weights(folder):
    from safetensors.torch import load_file

    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


def figures(m):
    return {
        k: v
        for k, v in m.items()
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and not k.startswith(("time_", "peak_"))
        and not k.endswith("_s")
    }


def longest_prompt(tok):
    """Tokens of the longest of the first 64 arithmetic prompts (the train runs' data)."""
    from gmts import data
    return max(map(len, data.prompt_token_ids(data.load_problems("arithmetic", "train", limit=64),
                                              tok)[1]))


def parity_reward(work):
    """--reward for a random model, which never solves a sum: the answer's length parity, earned
    half the time, so groups are mixed and every step updates through the policy gradient."""
    path = os.path.join(work, "parity_reward.py")
    with open(path, "w") as fh:
        fh.write("def parity(completion, answer, **fields):\n"
                 "    return float(len(completion) % 2)\n")
    return path + ":parity"


# train.py in a process that reports what dynamo compiled (graphs, graph breaks) when it ends.
COUNTING_TRAIN = """import json, sys
from torch._dynamo.utils import counters
import train
from gmts.trainer import compiled_decode
if sys.argv[1] == "eager":     # --dry-run: dynamo's capture without code generation
    compiled_decode.BACKEND = "eager"
train.main(sys.argv[2:])
print("gpu_check:", json.dumps({"graphs": counters["stats"]["unique_graphs"],
                                "graph_breaks": sum(counters["graph_break"].values())}))
"""


def check_train_compile(s, tok, work, dry, timeout, disk):
    """train.py --compile against eager, 4 steps on the 2-layer model of the 0.5B width: the graphs
    it compiles (at most graph_bound, no graph break) and the seconds per step."""
    from gmts.trainer import compiled_decode

    folder = save_model(s["small"], s, tok, os.path.join(work, s["small"]), dry)
    flags = ["--model", folder, "--data", "arithmetic", "--reward", parity_reward(work),
             "--prompts-per-step", str(s["train_prompts"]), "--group-size", str(s["train_group"]),
             "--max-new-tokens", str(s["train_new_tokens"]), "--micro-batch-size",
             str(s["train_micro"]), "--selector", "gmts", "--log-samples", "0", "--device",
             s["device"], "--steps", "4", "--save-every", "0", "--keep-checkpoints", "1"]
    result, runs = {}, []
    for mode in ("eager", "compiled"):
        out_dir = os.path.join(work, f"run-{mode}")
        shutil.rmtree(out_dir, ignore_errors=True)
        args = flags + ["--output-dir", out_dir] + (["--compile"] if mode == "compiled" else [])
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-c", COUNTING_TRAIN, "eager" if dry else "inductor", *args],
                cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT),
                capture_output=True, text=True, timeout=timeout(), check=False)
            runs.append({"rc": done.returncode, "wall_s": time.perf_counter() - t0,
                         "stderr_tail": done.stderr[-1500:]})
        except subprocess.TimeoutExpired:
            runs.append({"rc": "timeout", "wall_s": time.perf_counter() - t0})
        disk(work)
        if runs[-1]["rc"] != 0:
            return {"pass": False, "runs": runs}
        counted = [line for line in done.stdout.splitlines() if line.startswith("gpu_check:")]
        result[mode] = json.loads(counted[-1].split(":", 1)[1])
        metrics = read_metrics(out_dir)
        result[mode]["seconds_per_step"] = [m["time_rollout_s"] + m["time_train_s"]
                                            for m in metrics]
        result[mode]["rollout_s"] = [m["time_rollout_s"] for m in metrics]
        shutil.rmtree(out_dir, ignore_errors=True)
    bound = compiled_decode.graph_bound(longest_prompt(tok), s["train_prompts"] * s["train_group"])
    graphs = result["compiled"]["graphs"]
    return {**result, "graph_bound": bound, "runs": runs,
            "pass": 0 < graphs <= bound and result["compiled"]["graph_breaks"] == 0}


def check_train_resume(s, tok, work, dry, timeout, disk):
    import torch
    from gmts.tools import memory
    from gmts.run.config import parse_config

    folder = save_model(s["shape"], s, tok, os.path.join(work, s["shape"]), dry)
    lr = 1e-4
    flags = [
        "--model",
        folder,
        "--data",
        "arithmetic",
        "--reward",
        parity_reward(work),
        "--prompts-per-step",
        str(s["train_prompts"]),
        "--group-size",
        str(s["train_group"]),
        "--max-new-tokens",
        str(s["train_new_tokens"]),
        "--micro-batch-size",
        str(s["train_micro"]),
        "--beta",
        "0.001",
        "--lr",
        str(lr),
        "--log-samples",
        "0",
        "--device",
        s["device"],
        "--dtype",
        "bfloat16",                  # a GPU's default, also in --dry-run (float32 hid a bf16 fault)
        "--keep-checkpoints",
        "1",
    ]
    straight, resumed, default = (os.path.join(work, f"run-{name}")
                                  for name in ("straight", "resumed", "default"))
    det = ["--deterministic"]
    runs = []
    for out_dir, extra in (
        (straight, det + ["--steps", "2", "--save-every", "2"]),
        (resumed, det + ["--steps", "1", "--save-every", "1"]),
        (resumed, det + ["--steps", "2", "--save-every", "1", "--resume", resumed]),
        (default, ["--steps", "2", "--save-every", "2"]),
    ):
        if out_dir == default:      # the two compared runs' checkpoints go first (disk: <= 3)
            a, b = read_metrics(straight), read_metrics(resumed)
            wa, wb = (weights(os.path.join(d, "checkpoints", "step-000002"))
                      for d in (straight, resumed))
            shutil.rmtree(straight, ignore_errors=True)
            shutil.rmtree(resumed, ignore_errors=True)
        if extra[-1] != resumed:
            shutil.rmtree(out_dir, ignore_errors=True)
        runs.append(run_train(flags + ["--output-dir", out_dir] + extra, dry, timeout()))
        disk(work)
        if runs[-1]["rc"] != 0:
            return {"pass": False, "runs": runs}
    c = read_metrics(default)
    fa, fb = [figures(m) for m in a], [figures(m) for m in b]
    differing = [[i + 1, k, x[k], y.get(k)] for i, (x, y) in enumerate(zip(fa, fb)) for k in x
                 if x[k] != y.get(k)]
    weights_differing = sorted(k for k in wa if k not in wb or not torch.equal(wa[k], wb[k]))
    bit_exact = len(fa) == len(fb) and not differing and wa.keys() == wb.keys() and not (
        weights_differing)
    cfg = parse_config(flags)
    prompt_tokens = longest_prompt(tok)
    _, phases, (planned, _), _ = memory.plan(
        cfg,
        memory.model_shape(memory.load_config(folder)),
        prompt_tokens=prompt_tokens,
        device="cpu" if dry else "gpu",
    )
    measured = max(m["peak_memory_mb"] for m in b + c) * 2**20
    finite = all(math.isfinite(m.get("loss", math.nan)) for m in a + b + c)
    for folder_ in (straight, resumed, default):
        shutil.rmtree(folder_, ignore_errors=True)
    return {
        "steps": [[m["step"] for m in a], [m["step"] for m in b]],
        "bit_exact": bit_exact,
        "first_differences": differing[:8],
        "weights_differing": weights_differing[:8],
        "weights_differing_count": len(weights_differing),
        "seconds_per_step_deterministic": [m["time_rollout_s"] + m["time_train_s"] for m in b],
        "seconds_per_step": [m["time_rollout_s"] + m["time_train_s"] for m in c],
        "loss": [m.get("loss") for m in b],
        "grad_norm": [m.get("grad_norm") for m in a],
        "peak_memory_measured_gib": measured / 2**30,
        "peak_memory_planned_gib": planned / 2**30,
        "planned_phases_gib": {k: v / 2**30 for k, v in phases.items()},
        "runs": runs,
        "pass": finite and [m["step"] for m in b] == [1, 2] and bit_exact
        and all(m.get("grad_norm", 0) > 0 for m in a),      # both steps moved the weights
    }


# --------------------------------------------------------------------------------------------------
# torchrun: two processes over NCCL, a step, a checkpoint, a resumed step.


def check_torchrun(s, tok, work, timeout, disk):
    folder = save_model(s["small"], s, tok, os.path.join(work, s["small"]), False)
    out_dir = os.path.join(work, "run-torchrun")
    shutil.rmtree(out_dir, ignore_errors=True)
    base = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        os.path.join(ROOT, "train.py"),
        "--model",
        folder,
        "--data",
        "arithmetic",
        "--prompts-per-step",
        "4",
        "--group-size",
        "4",
        "--max-new-tokens",
        "32",
        "--micro-batch-size",
        "8",
        "--beta",
        "0.001",
        "--log-samples",
        "0",
        "--save-every",
        "1",
        "--keep-checkpoints",
        "1",
        "--output-dir",
        out_dir,
    ]
    runs = []
    for extra in (["--steps", "1"], ["--steps", "2", "--resume", out_dir]):
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                base + extra,
                cwd=ROOT,
                env=dict(os.environ, HF_HUB_OFFLINE="1"),
                capture_output=True,
                text=True,
                timeout=timeout(), check=False
            )
            runs.append(
                {
                    "rc": done.returncode,
                    "wall_s": time.perf_counter() - t0,
                    "stderr_tail": done.stderr[-1500:],
                }
            )
        except subprocess.TimeoutExpired:
            runs.append({"rc": "timeout", "wall_s": time.perf_counter() - t0})
        disk(work)
        if runs[-1]["rc"] != 0:
            return {"pass": False, "runs": runs}
    steps = [m["step"] for m in read_metrics(out_dir)]
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"steps": steps, "runs": runs, "pass": steps == [1, 2]}


# --------------------------------------------------------------------------------------------------


def folder_bytes(path):
    return sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(path)
        for f in files
        if not os.path.islink(os.path.join(d, f))
    )


def write(results, path, names=CHECKS):
    """The JSON, replaced atomically (a reader never sees half of it)."""
    results["verdict"] = verdict(results["checks"], names)
    results["pass"] = results["verdict"] == "pass"
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=2)
    os.replace(tmp, path)


def run_check(name, fn, results, path, deadline, names=CHECKS, tag="gpu_check"):
    """Run one check, record "pass" / "fail" / "not run" and its figures, rewrite the JSON."""
    checks, t0 = results["checks"], time.perf_counter()
    if t0 > deadline:
        checks[name] = {
            "status": "not run",
            "why": "time budget (--budget-s) spent before this check",
        }
    else:
        try:
            checks[name] = fn()
        # one broken check must not hide the others' figures
        except Exception as err:  # noqa: BLE001
            checks[name] = {
                "pass": False,
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc()[-3000:],
            }
        checks[name].setdefault("status", "pass" if checks[name].get("pass") is True else "fail")
        checks[name]["check_s"] = time.perf_counter() - t0
    write(results, path, names)
    print(f"{tag}: {name}: {checks[name]['status']} ({checks[name].get('check_s', 0):.1f}s)",
          flush=True)


def main(argv=None):
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--dry-run", action="store_true", help="CPU, toy sizes: the same code path in seconds"
    )
    ap.add_argument(
        "--out",
        default="",
        help="default: bench/results/gpu.json; with --dry-run <work-dir>/gpu-dry-run.json",
    )
    ap.add_argument(
        "--shared",
        default=os.path.join(os.path.dirname(ROOT), "shared", "data"),
        help="folder holding qwen2.5-tokenizer/ (else a byte-level tokenizer stands in)",
    )
    ap.add_argument("--work-dir", default="/tmp/gmts_gpu_check")
    ap.add_argument(
        "--budget-s", type=float, default=400, help="start no check after this many seconds"
    )
    ap.add_argument(
        "--hard-limit-s",
        type=float,
        default=470,
        help="stop train.py / torchrun after this many seconds",
    )
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        choices=CHECKS,
        help="run only these (the others: not run)",
    )
    args = ap.parse_args(argv)
    out = args.out or (
        os.path.join(args.work_dir, "gpu-dry-run.json")
        if args.dry_run
        else os.path.join(ROOT, "bench", "results", "gpu.json")
    )
    import torch

    s = sizes(args.dry_run)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device; use --dry-run for the CPU path")
    if args.dry_run:
        torch.set_num_threads(1)
    t_start = time.perf_counter()
    deadline, hard = t_start + args.budget_s, t_start + args.hard_limit_s
    timeout = lambda: max(1.0, hard - time.perf_counter())
    os.makedirs(args.work_dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tok, tok_name = tokenizer(args.shared, args.dry_run)
    gpus = torch.cuda.device_count() if not args.dry_run else 0
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "dry_run": args.dry_run,
        "device": torch.cuda.get_device_name(0) if not args.dry_run else "cpu",
        "gpus": gpus,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "tokenizer": tok_name,
        "disk_max_gb": 0.0,
        "checks": {name: {"status": "not run", "why": "not reached"} for name in CHECKS},
    }

    def disk(path):
        results["disk_max_gb"] = max(results["disk_max_gb"], folder_bytes(path) / 1e9)

    def skip(name, why):
        results["checks"][name] = {"status": "not run", "why": why}
        write(results, out)
        print(f"gpu_check: {name}: not run ({why})", flush=True)

    write(results, out)
    wanted = lambda name: args.only is None or name in args.only
    for name in CHECKS:
        if not wanted(name):
            skip(name, "not asked for (--only)")
    if wanted("head"):
        run_check("head", lambda: check_head(s), results, out, deadline)
    if wanted("rollout") or wanted("compiled_equals_eager"):
        vocab = min(SHAPES[s["shape"]]["vocab_size"], len(tok))
        eos, pad = eos_ids(vocab, tok), tok.pad_token_id if tok.pad_token_id is not None else 0
        if wanted("rollout"):
            model = random_model(s["shape"], torch.bfloat16, s["device"], tok)
            run_check("rollout", lambda: check_rollout(s, model, eos, pad), results, out, deadline)
            del model
        if wanted("compiled_equals_eager"):
            model = random_model(s["small"], torch.float32, s["device"], tok)
            run_check(
                "compiled_equals_eager",
                lambda: check_compiled(s, model, eos, pad, args.dry_run),
                results,
                out,
                deadline,
            )
            del model
        if not args.dry_run:
            torch.cuda.empty_cache()
    if wanted("train_pass"):
        run_check("train_pass", lambda: check_train_pass(s, tok, args.dry_run), results, out,
                  deadline)
    if wanted("train_resume"):
        run_check(
            "train_resume",
            lambda: check_train_resume(s, tok, args.work_dir, args.dry_run, timeout, disk),
            results,
            out,
            deadline,
        )
    if wanted("train_compile"):
        run_check(
            "train_compile",
            lambda: check_train_compile(s, tok, args.work_dir, args.dry_run, timeout, disk),
            results,
            out,
            deadline,
        )
    if wanted("torchrun"):
        if gpus < 2:
            skip(
                "torchrun",
                f"{gpus} GPU(s): two are needed (gloo and FSDP: tests/test_distributed.py on CPU)",
            )
        else:
            run_check(
                "torchrun",
                lambda: check_torchrun(s, tok, args.work_dir, timeout, disk),
                results,
                out,
                deadline,
            )
    results["wall_s"] = time.perf_counter() - t_start
    write(results, out)
    print(
        f"gpu_check: {results['verdict']} in {results['wall_s']:.0f}s, work folder at most "
        f"{results['disk_max_gb']:.1f} GB; wrote {out}"
    )
    return 0 if results["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
