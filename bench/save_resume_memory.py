"""Peak host memory of a checkpoint save and of a resume under torchrun, measured on CPU, against
the memory planner's save and resume phases (gmts/tools/memory.py).

    python bench/save_resume_memory.py                # writes bench/results/save_resume_memory.json
    python bench/save_resume_memory.py --world 1 --out /tmp/m.json

A random model of ~93M parameters (Qwen2.5's tokenizer and vocabulary, hidden 512, 4 layers; 373 MB
in float32) trained with --optimizer-offload (MasterWeightAdamW: float32 masters + AdamW's m and v,
12 bytes per parameter). Each process is train.py's own start-up (check_start, build_run) in a gloo
group of --world processes:
- save: one optimizer step on zero gradients (so m and v exist), then gmts.run.checkpoint.save: the
  peak resident set (VmHWM, reset with /proc/self/clear_refs just before the save) of rank 0, the
  process that writes;
- resume: --resume from that checkpoint, up to the first step (build_run: trainer_state.pt loaded,
  the model, the optimizer state restored): each process's VmHWM since it started;
- start (--fsdp): each process from its start to the end of build_run, the model built and
  sharded (gmts/trainer/distributed.py, load_sharded: each process reads its own rows).
--fsdp computes in bf16 from a bf16-stored model (as on a GPU, from a hub model): its checkpoints
hold bf16 weights and trainer_state.pt the float32 masters.
Both also report the peak private memory (RssAnon, sampled every 2 ms), which is what the planner
plans: the resident set also holds the mapped checkpoint's pages, page cache that the processes
share and the kernel frees under pressure. Planned: memory.plan's host phases of one process for
the same flags on --device cpu; error = (planned - peak private) / peak private.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

QWEN_TOKENIZER = os.environ.get("GMTS_QWEN_TOKENIZER", os.path.join(
    os.path.dirname(ROOT), "shared", "data", "qwen2.5-tokenizer"))
SHAPE = {"vocab_size": 151936, "max_position_embeddings": 4096, "hidden_size": 512,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "intermediate_size": 2048, "tie_word_embeddings": True}
FLAGS = ["--data", "arithmetic", "--device", "cpu", "--dtype", "float32", "--optimizer-offload",
         "--prompts-per-step", "2", "--group-size", "2", "--micro-batch-size", "2",
         "--max-new-tokens", "8", "--steps", "2", "--save-every", "0", "--log-samples", "0"]


def random_model(folder, dtype="float32"):
    """The random model (float32, or cast to `dtype` as hub models are stored in bf16) with the
    Qwen2.5 tokenizer, made once."""
    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return folder
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPE)).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=[151645, 151643], pad_token_id=151643)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(QWEN_TOKENIZER).save_pretrained(folder)
    return folder


def status(field):
    """A /proc/self/status field in bytes (VmHWM, VmRSS, RssAnon)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class AnonPeak:
    """The largest RssAnon seen by a thread that samples it every 2 ms."""

    def __init__(self):
        self.peak, self.running = status("RssAnon"), True
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while self.running:
            self.peak = max(self.peak, status("RssAnon"))
            time.sleep(0.002)

    def stop(self):
        self.running = False
        self.thread.join()
        return max(self.peak, status("RssAnon"))


def flags(fsdp):
    """train.py's flags of the measured runs: --optimizer-offload, or --fsdp (plain AdamW over
    float32 shards; FSDP does not take --optimizer-offload) computing in bf16, as on a GPU, so
    that its checkpoints hold bf16 weights (+ the float32 masters in trainer_state.pt)."""
    if not fsdp:
        return list(FLAGS)
    swap = {"--optimizer-offload": "--fsdp", "float32": "bfloat16"}
    return [swap.get(f, f) for f in FLAGS]


def child(mode, model_dir, out_dir, result, fsdp="0"):
    """One process of the gloo group: the save or the resume, its figures into `result`."""
    import gc
    import torch
    import train
    from gmts.run import checkpoint
    from gmts.run.build import build_run
    from gmts.run.folder import check_start
    from gmts.trainer import distributed
    argv = ["--model", model_dir, *flags(fsdp == "1"), "--output-dir", out_dir]
    watch = AnonPeak()
    if mode == "save":
        cfg, resume_from, saved = check_start(argv)
        run, _ = build_run(cfg, resume_from, saved, load_prompts=train.load_prompts,
                           reward_functions=train.reward_functions)
        gc.collect()
        start = {"start_peak_rss": status("VmHWM"), "start_peak_anon": watch.stop()} \
            if fsdp == "1" else {}
        watch = AnonPeak()
        for p in run.model.parameters():
            p.grad = torch.zeros_like(p)
        run.optimizer.step()
        run.optimizer.zero_grad()
        gc.collect()
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")                                   # VmHWM := VmRSS
        watch.stop()
        before, watch = status("VmRSS"), AnonPeak()
        checkpoint.save(run, 1)
        figures = {"rss_before": before, **start}
    else:
        cfg, resume_from, saved = check_start(argv + ["--resume", out_dir])
        run, _ = build_run(cfg, resume_from, saved, load_prompts=train.load_prompts,
                           reward_functions=train.reward_functions)
        del saved
        gc.collect()
        figures = {}
    figures.update(peak_rss=status("VmHWM"), peak_anon=watch.stop(), rank=run.rank)
    with open(result, "w") as fh:
        json.dump(figures, fh)
    distributed.shutdown()


def launch(mode, world, model_dir, out_dir, work, fsdp):
    """`world` processes of child(mode) in a gloo group, as torchrun would start them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs, results = [], [os.path.join(work, f"{mode}-{r}.json") for r in range(world)]
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", GMTS_DIST_BACKEND="gloo")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--child", mode, model_dir, out_dir, results[rank],
             str(int(fsdp))],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"{mode} failed:\n{err[-3000:]}")
    out = []
    for path in results:
        with open(path) as fh:
            out.append(json.load(fh))
    return out


def planned(model_dir, fsdp, world):
    """The planner's host phases (bytes) of one process for the same flags on --device cpu."""
    from gmts.tools import memory
    cfg = memory.parse_as_processes(["--model", model_dir, *flags(fsdp)], world)
    shape = memory.model_shape(memory.load_config(model_dir))
    components, _, _, _ = memory.plan(cfg, shape, device="cpu", world=world)
    return components["host_phases"], shape.params


def machine():
    """The CPU's model name and the number of cores this process may use."""
    with open("/proc/cpuinfo") as fh:
        name = next((line.split(":", 1)[1].strip() for line in fh
                     if line.startswith("model name")), "?")
    return f"{name}, {len(os.sched_getaffinity(0))} cores"


def main():
    if sys.argv[1:2] == ["--child"]:
        return child(*sys.argv[2:7])
    from gmts.run.config import Parser
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2, help="processes (gloo)")
    ap.add_argument("--fsdp", action="store_true",
                    help="--fsdp instead of --optimizer-offload (each process's own start, "
                         "save and resume, planned per process)")
    ap.add_argument("--work-dir", default="/tmp/gmts_save_resume_memory")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.out = args.out or os.path.join(ROOT, "bench", "results", "save_resume_memory"
                                        + ("_fsdp" if args.fsdp else "") + ".json")
    import shutil
    # --fsdp: the weights stored in bf16, as a hub model's are (a whole-model load would cast
    # them to float32 in each process's own memory)
    model_dir = random_model(os.path.join(args.work_dir, "model-bf16" if args.fsdp else "model"),
                             "bfloat16" if args.fsdp else "float32")
    out_dir = os.path.join(args.work_dir, "run-fsdp" if args.fsdp else "run")
    shutil.rmtree(out_dir, ignore_errors=True)
    phases, params = planned(model_dir, args.fsdp, args.world)
    gib = 2 ** 30
    rows = []
    for mode in ("save", "resume"):
        measured = launch(mode, args.world, model_dir, out_dir, args.work_dir, args.fsdp)
        for m in measured:
            start = {"peak_rss": m.pop("start_peak_rss", 0), "peak_anon": m.pop("start_peak_anon",
                                                                                  0)}
            for phase, figures in (("start", start), (mode, m)):
                if not figures["peak_rss"] or (phase == "save" and m["rank"] != 0):
                    continue                            # rank 0 writes; the others wait
                row = {"phase": phase, "rank": m["rank"], "processes": args.world,
                       "measured_peak_rss_gib": figures["peak_rss"] / gib,
                       "measured_peak_anon_gib": figures["peak_anon"] / gib}
                if phase in phases:
                    row.update(planned_gib=phases[phase] / gib, error=(
                        phases[phase] - figures["peak_anon"]) / figures["peak_anon"])
                if "rss_before" in figures:
                    row["rss_before_gib"] = figures["rss_before"] / gib
                print(json.dumps(row), flush=True)
                rows.append(row)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    import torch
    with open(args.out, "w") as fh:
        json.dump({"command": "python bench/save_resume_memory.py" + (
            f" --world {args.world}" if args.world != 2 else "") + (
            " --fsdp" if args.fsdp else ""), "params": params,
                   "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine(),
                   "shape": SHAPE, "flags": flags(args.fsdp),
                   "torch": torch.__version__, "rows": rows}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
