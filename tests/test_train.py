"""train.py end to end on a tiny random Qwen2 (offline, CPU): every selector, resume, faults, bad
input."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
# ../shared/data, and the skip that says how to get it
from conftest import SHARED_DATA, needs_shared_data, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
def is_timing(key):          # wall-clock and memory figures differ between any two runs
    return key.startswith("time_") or key in ("tokens_per_s", "peak_memory_mb")


DATA = {}


@pytest.fixture(autouse=True)
def _data(digit_data):
    DATA["digits"] = digit_data


def train_args(model_dir, out, *extra):
    return ["--model", model_dir, "--data", DATA["digits"], "--steps", "2", "--prompts-per-step",
            "2", "--group-size", "4", "--max-new-tokens", "3", "--micro-batch-size", "4",
            "--device", "cpu", "--output-dir", str(out), "--lr", "1e-3", "--seed", "3",
            "--save-every", "1", *extra]


def run_train(args, check=True):
    proc = run_python(["train.py", *args], timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_jsonl(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize("selector", ["none", "ets", "gmts", "random"])
def test_two_steps_write_metrics_and_a_loadable_checkpoint(digit_model_dir, tmp_path, selector):
    out = tmp_path / selector
    proc = run_train(train_args(digit_model_dir, out, "--selector", selector))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    required = {"step", "reward_mean", "accuracy", "response_len_mean", "entropy_mean",
                "entropy_selected_mean", "valid_tokens", "selected_tokens", "answers_with_selected",
                "selected_share_positive_adv", "selected_share_zero_adv", "ets_share_zero_adv",
                "selection_overlap_ets_gmts", "grad_norm", "loss", "lr", "time_rollout_s",
                "time_train_s", "tokens_per_s", "peak_memory_mb"}
    assert required <= set(metrics[0]), required - set(metrics[0])
    for m in metrics:
        # ceil(0.2 n)
        expected = m["valid_tokens"] if selector == "none" else -(-m["valid_tokens"] * 2 // 10)
        assert m["selected_tokens"] == expected
        assert m["grad_norm"] > 0 and torch.isfinite(torch.tensor(m["loss"]))
    config = json.loads((out / "config.json").read_text())
    assert config["selector"] == selector and config["eps_high"] == 0.2
    from transformers import AutoModelForCausalLM
    latest = (out / "checkpoints" / "latest").read_text().strip()
    assert latest == "step-000002"
    model = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / latest)
    start = AutoModelForCausalLM.from_pretrained(digit_model_dir)
    moved = sum((a - b).abs().sum().item() for a, b in zip(model.parameters(), start.parameters()))
    assert moved > 0
    assert (out / "checkpoints" / latest / "model.safetensors").exists()
    assert "reward" in proc.stderr and "2 steps" in proc.stdout     # tqdm bar, final summary
    samples = read_jsonl(out / "samples.jsonl")
    assert samples and {"step", "completion", "reward", "advantage"} <= set(samples[0])


def test_resume_continues_exactly(digit_model_dir, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    args = ["--selector", "gmts", "--steps", "4"]
    run_train(train_args(digit_model_dir, straight, *args))
    run_train(train_args(digit_model_dir, split, "--selector", "gmts", "--steps", "2"))
    run_train(["--resume", str(split), "--steps", "4"])
    a, b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(split / "metrics.jsonl")
    assert len(a) == len(b) == 4
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if not is_timing(k)} == {
            k: v for k, v in y.items() if not is_timing(k)}
    from safetensors.torch import load_file
    wa = load_file(straight / "checkpoints" / "step-000004" / "model.safetensors")
    wb = load_file(split / "checkpoints" / "step-000004" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_deterministic_run_is_the_default_run_on_cpu_and_resumes_exactly(digit_model_dir, tmp_path):
    """--deterministic switches PyTorch's deterministic algorithms on in train.py's process (what
    makes a GPU run repeat: bench/gpu_check.py) and changes no number where the kernels already
    are deterministic (this CPU): its uninitialised memory is NaN-filled, so a read of an unwritten
    buffer would show here. In bf16, with the frozen reference (--beta) and a resume (which once
    rebuilt π_ref another way than a fresh start did, a step-2 difference: bench/gpu_check.py)."""
    runs = {name: tmp_path / name for name in ("default", "deterministic", "split")}
    args = ["--selector", "gmts", "--beta", "0.05", "--dtype", "bfloat16"]     # a GPU's default
    run_train(train_args(digit_model_dir, runs["default"], *args))
    code = ("import sys, torch, train; train.main(sys.argv[1:]); "
            "print('deterministic algorithms:', torch.are_deterministic_algorithms_enabled())")
    proc = run_python(["-c", code, *train_args(digit_model_dir, runs["deterministic"], *args,
                                               "--deterministic")], timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "deterministic algorithms: True" in proc.stdout
    run_train(train_args(digit_model_dir, runs["split"], *args, "--steps", "1"))
    # it changes how a step is computed, not what: a run may take it up (or drop it) on resume
    run_train(["--resume", str(runs["split"]), "--steps", "2", "--deterministic"])
    assert json.loads((runs["split"] / "config.json").read_text())["deterministic"] is True
    from safetensors.torch import load_file
    figures, weights = {}, {}
    for name, out in runs.items():
        figures[name] = [{k: v for k, v in m.items() if not is_timing(k)}
                         for m in read_jsonl(out / "metrics.jsonl")]
        weights[name] = load_file(out / "checkpoints" / "step-000002" / "model.safetensors")
    assert len(figures["default"]) == 2 and figures["default"][1]["grad_norm"] > 0
    for name in ("deterministic", "split"):
        assert figures[name] == figures["default"], name
        assert weights[name].keys() == weights["default"].keys()
        for k, w in weights["default"].items():
            assert torch.equal(weights[name][k], w), (name, k)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_reference_model_is_the_starting_policy_bit_for_bit(digit_model_dir, dtype):
    """β > 0: π_ref is the policy before its first step, in every number the forward uses (RoPE's
    float32 inv_freq too, which a cast copy of the model rounds to bf16), so the first step's KL
    is exactly 0."""
    from gmts.run.config import parse_config
    from gmts.run.build import build_policy
    cfg = parse_config(["--model", digit_model_dir, "--data", DATA["digits"], "--beta", "0.05",
                        "--device", "cpu", "--no-gradient-checkpointing"])
    model, ref, _ = build_policy(cfg, None, torch.device("cpu"), dtype)
    assert ref is not None and ref is not model
    assert {n: b.dtype for n, b in ref.named_buffers()} == {
        n: b.dtype for n, b in model.named_buffers()}
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=gen)
    model.eval()
    with torch.no_grad():
        assert torch.equal(ref(input_ids=ids).logits, model(input_ids=ids).logits)


def test_sigterm_writes_a_checkpoint_and_resume_finishes(digit_model_dir, tmp_path):
    out = tmp_path / "interrupted"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    args = train_args(digit_model_dir, out, "--steps", "200", "--save-every", "0",
                      "--max-new-tokens", "4")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (out / "metrics.jsonl").exists():
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signal.SIGTERM, err
    steps_done = len(read_jsonl(out / "metrics.jsonl"))
    assert 1 <= steps_done < 200
    latest = (out / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step-{steps_done:06d}"
    assert not [d for d in os.listdir(out / "checkpoints") if d.startswith(".tmp")]
    run_train(["--resume", str(out), "--steps", str(steps_done + 1)])
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == list(range(1, steps_done + 2))


def test_dynamic_sampling_drops_all_equal_groups(digit_model_dir, tmp_path):
    # Answers no random model will ever produce: every group is all-wrong, so DAPO keeps nothing and
    # says so.
    data = tmp_path / "impossible.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": "987654321"}) + "\n" for i in range(6)))
    out = tmp_path / "dapo"
    run_train(
        train_args(digit_model_dir, out, "--data", str(data), "--algo", "dapo", "--selector",
                   "gmts",
                         "--max-sampling-tries", "3"))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert all(m["sampling_tries"] == 3 and "no group" in m["skipped"] for m in metrics)
    assert json.loads((out / "config.json").read_text())["eps_high"] == 0.28


def step_parts(cfg, model, tok, stream, reward_fns):
    """What collect_batch reads of a Run (gmts/run/build.py), without building one."""
    from types import SimpleNamespace
    from gmts.trainer.models import end_of_sequence_ids
    from gmts.trainer.rollout import EagerDecode
    return SimpleNamespace(cfg=cfg, model=model, tokenizer=tok, stream=stream,
                           eos_ids=end_of_sequence_ids(model, tok), reward_fns=reward_fns,
                           rollout_gen=torch.Generator().manual_seed(0), decode=EagerDecode)


def test_collect_batch_keeps_only_mixed_groups(digit_model_dir):
    sys.path.insert(0, ROOT)
    import train
    from gmts.run.config import parse_config
    from gmts.trainer.models import load_model, load_tokenizer
    from gmts.trainer.batches import PromptStream
    cfg = parse_config(["--model", digit_model_dir, "--data", "arithmetic", "--algo", "dapo",
                        "--group-size", "4", "--prompts-per-step", "3", "--max-new-tokens", "5",
                        "--max-sampling-tries", "5", "--micro-batch-size", "4"])
    tok = load_tokenizer(digit_model_dir)
    model = load_model(digit_model_dir, dtype=torch.float32, device=torch.device("cpu"))
    problems, ids, _ = train.load_prompts(cfg, tok)
    stream = PromptStream(problems, ids, seed=0)
    # A reward that depends on the text's length parity: some groups mixed, some all-equal.
    fns = {name: (lambda text, ref: float(len(text) % 2)) for name in {p.reward for p in problems}}
    batch, sampled, tries = train.collect_batch(step_parts(cfg, model, tok, stream, fns))
    assert 1 <= tries <= 5 and sampled.numel() == tries * 12
    assert batch is not None and len(batch.problems) <= 3
    assert batch.completion_ids.shape[0] == 4 * len(batch.problems)
    assert (batch.rewards.view(-1, 4).std(dim=1) > 0).all()
    assert stream.position == tries * 3


def test_overlong_shaping_moves_the_advantage_not_the_reward(digit_model_dir):
    sys.path.insert(0, ROOT)
    import train
    from gmts.run.config import parse_config
    from gmts.trainer.models import load_model, load_tokenizer
    from gmts.trainer.batches import PromptStream
    cfg = parse_config(["--model", digit_model_dir, "--data", "arithmetic", "--group-size", "4",
                        "--prompts-per-step", "3", "--max-new-tokens", "6",
                        "--micro-batch-size", "4", "--overlong-buffer", "4",
                        "--overlong-penalty", "0.5"])
    tok = load_tokenizer(digit_model_dir)
    model = load_model(digit_model_dir, dtype=torch.float32, device=torch.device("cpu"))
    problems, ids, _ = train.load_prompts(cfg, tok)
    stream = PromptStream(problems, ids, seed=0)
    # every answer "right"
    fns = {name: (lambda text, ref: 1.0) for name in {p.reward for p in problems}}
    batch, _, _ = train.collect_batch(step_parts(cfg, model, tok, stream, fns))
    lengths = batch.valid_mask.sum(dim=1).float()
    assert len(set(lengths.tolist())) > 1, "the tiny model should give answers of several lengths"
    # the checker's reward is kept as it was
    assert (batch.rewards == 1.0).all()
    # DAPO: free up to 6 - 4 tokens, -0.5 at the limit
    shaped = 1.0 - 0.5 * (lengths - 2).clamp(min=0) / 4
    from gmts import group_advantages
    assert torch.allclose(batch.advantages, group_advantages(shaped, 4))
    # all-right groups now prefer their shorter answers
    assert batch.advantages.abs().sum() > 0


@pytest.mark.parametrize("flags, message", [
    (["--overlong-buffer", "999"], "--overlong-buffer"),
    (["--overlong-penalty", "-1"], "--overlong-penalty"),
    (["--ratio", "0"], "--ratio"),
    (["--ratio", "1.5"], "--ratio"),
    (["--group-size", "1"], "--group-size"),
    (["--micro-batch-size", "3"], "--micro-batch-size"),
    (["--selector", "gmts", "--loss-norm", "sequence-selected"], "sequence-selected"),
    (["--selector", "entropy"], "--selector"),
    (["--algo", "dapo", "--beta", "0.1"], "--beta"),
])
def test_bad_config_fails_fast_with_the_flag_named(digit_model_dir, tmp_path, flags, message):
    proc = run_train(train_args(digit_model_dir, tmp_path / "bad", *flags), check=False)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "bad").exists()


def test_missing_model_and_bad_data_name_the_problem(digit_model_dir, tmp_path):
    proc = run_train(train_args(str(tmp_path / "nope"), tmp_path / "o1"), check=False)
    assert proc.returncode != 0 and "nope" in proc.stderr and "local folder" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n{not json\n")
    proc = run_train(train_args(digit_model_dir, tmp_path / "o2", "--data", str(bad)), check=False)
    assert proc.returncode != 0 and f"{bad}:2" in proc.stderr


def test_non_finite_loss_skips_updates_then_stops(digit_model_dir, tmp_path, monkeypatch):
    sys.path.insert(0, ROOT)
    # the module whose policy_loss the trainer's micro-batch loss calls
    import gmts.trainer.batches as gmts
    import train
    real = gmts.policy_loss
    monkeypatch.setattr(gmts, "policy_loss", lambda *a, **k: real(*a, **k) * float("nan"))
    out = tmp_path / "nan"
    with pytest.raises(SystemExit, match="3 steps in a row with a non-finite"):
        train.main(train_args(digit_model_dir, out, "--steps", "10", "--selector", "gmts"))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert len(metrics) == 3 and all("non-finite" in m["skipped"] for m in metrics)
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    before = AutoModelForCausalLM.from_pretrained(digit_model_dir).state_dict()
    after = load_file(out / "checkpoints" / "step-000002" / "model.safetensors")
    for k, v in after.items():
        assert torch.equal(v, before[k]), k                  # no update was applied


# tests/conftest.py says what it is
QWEN_TOKENIZER = os.path.join(SHARED_DATA, "qwen2.5-tokenizer")
QWEN_CONFIG = os.path.join(SHARED_DATA, "qwen2.5-configs", "Qwen2.5-0.5B-Instruct")


@needs_shared_data("qwen2.5-tokenizer")
@needs_shared_data("qwen2.5-configs", "Qwen2.5-0.5B-Instruct")
def test_real_qwen_tokenizer_chat_template_eos_and_reward():
    sys.path.insert(0, ROOT)
    from gmts import data as datasets
    from gmts import rewards
    from transformers import GenerationConfig
    from gmts.trainer.models import end_of_sequence_ids, load_tokenizer
    tok = load_tokenizer(QWEN_TOKENIZER)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}],
                                  add_generation_prompt=True, tokenize=False)
    assert tok(ids, add_special_tokens=False)["input_ids"][-3:] == [151644, 77091, 198]
    problem = datasets.load_problems("arithmetic", "train", limit=1)[0]
    prompt = datasets.render_prompt(problem, tok)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")

    class Model:  # only the generation config matters here
        generation_config = GenerationConfig.from_pretrained(QWEN_CONFIG)
    assert end_of_sequence_ids(Model(), tok) == [151643, 151645]
    completion = tok("Adding them gives \\boxed{72}.", add_special_tokens=False)["input_ids"] + [
        151645, 151643]
    text = tok.decode(completion[:completion.index(151645) + 1], skip_special_tokens=True)
    assert text == "Adding them gives \\boxed{72}."
    reward = rewards.get_reward("gsm8k")
    assert reward(text, "72") == 1.0 and reward(text, "73") == 0.0


@pytest.mark.parametrize("flags", [
    # no-grad scoring pass per update
    ["--ppo-epochs", "2", "--selector", "gmts"],
    # frozen reference model + k3 KL
    ["--beta", "0.05", "--kl-coverage", "all", "--selector", "gmts"],
    ["--select-scope", "group", "--bottom", "--exclude-zero-adv", "--loss-norm", "sequence",
     "--selector", "ets"],
    ["--loss-norm", "all", "--adv-std", "none", "--selector", "random", "--warmup-steps", "2"],
    ["--dtype", "bfloat16", "--optimizer-offload", "--selector", "gmts",
     "--no-gradient-checkpointing"],
])
def test_algorithm_options_run_end_to_end(digit_model_dir, tmp_path, flags):
    out = tmp_path / "run"
    run_train(train_args(digit_model_dir, out, *flags))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert len(metrics) == 2 and all("skipped" not in m for m in metrics)
    assert all(m["grad_norm"] > 0 for m in metrics if m["mixed_groups"])
    config = json.loads((out / "config.json").read_text())
    if "--warmup-steps" in flags:
        assert [m["lr"] for m in metrics] == [5e-4, 1e-3]
    if "--exclude-zero-adv" in flags:
        assert config["select_scope"] == "group" and config["bottom"]


def test_presets_resolve_and_explicit_flags_win():
    sys.path.insert(0, ROOT)
    from gmts.run.config import parse_config
    cfg = parse_config(["--preset", "paper-math", "--selector", "gmts", "--lr", "1e-5"])
    assert (cfg.model, cfg.group_size, cfg.prompts_per_step, cfg.max_new_tokens) == (
        "Qwen/Qwen2.5-Math-1.5B", 16, 64, 2048)
    assert (cfg.algo, cfg.eps_high, cfg.beta, cfg.lr, cfg.selector) == (
        "dapo", 0.28, 0.0, 1e-5, "gmts")
    cfg = parse_config(["--preset", "recipe-gsm8k"])
    assert (cfg.model, cfg.group_size, cfg.max_new_tokens, cfg.ratio, cfg.eps_high) == \
        ("Qwen/Qwen2.5-1.5B-Instruct", 8, 256, 0.2, 0.2)


def test_master_weight_adamw_matches_adamw_and_keeps_small_updates():
    sys.path.insert(0, ROOT)
    from gmts.trainer.optim import MasterWeightAdamW
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(5, 3))
    b = torch.nn.Parameter(a.detach().clone())
    ref, ours = torch.optim.AdamW([a], lr=1e-2), MasterWeightAdamW([b], state_device="cpu", lr=1e-2)
    for _ in range(3):
        g = torch.randn(5, 3)
        a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    # bf16 weights: an update far below bf16's resolution is kept in the float32 master copy and
    # accumulates.
    w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterWeightAdamW([w], state_device="cpu", lr=1e-4)
    assert w.grad_dtype == torch.float32      # its gradients are summed in float32
    for _ in range(100):
        w.grad = torch.ones(4)
        opt.step()
    # a constant gradient: each AdamW step is lr · m̂/(√v̂ + ε) = lr (1 - ~1e-8), so 100 steps of
    # 1e-4 in float32 masters (u = 6e-8 per update of a value near 1): 1 - 0.01 to ~1e-5 relative,
    # well within 1e-3
    assert opt.master[0][0].item() == pytest.approx(1 - 100 * 1e-4, rel=1e-3)
    assert w[0].item() < 1.0
    restored = MasterWeightAdamW([torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))],
                                 lr=1e-4)
    restored.load_state_dict(opt.state_dict())
    assert torch.equal(restored.master[0], opt.master[0])


def test_missing_data_file_is_named(digit_model_dir, tmp_path):
    proc = run_train(
        train_args(digit_model_dir, tmp_path / "o", "--data", str(tmp_path / "nope.jsonl")),
        check=False)
    assert proc.returncode != 0 and "nope.jsonl" in proc.stderr and "Traceback" not in proc.stderr
