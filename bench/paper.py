"""Runs every row of the seed's evaluation with the project's tools and keeps their JSON.

Called by bench/paper.sh (which builds the tools first); bench/paper_report.py then writes
docs/results.md and docs/figures/. Each row is labelled by how its number comes about:
  measured   timed on this machine's CPU (wall clock)
  replayed   a tiny model's real decisions (commits, drafts, checks per step) replayed at a
             larger shape, with the time measured or projected
  projected  npu-sim's or the phone-CPU profile's cost model (timing-only: no arithmetic done)

    /usr/bin/python3 bench/paper.py [--quick] [--resume] [--skip-runs]
"""

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "build", "bin")
TASKS = os.path.join(ROOT, "models", "tasks", "mix-1000.jsonl")
TINY_LLADA = os.path.join(ROOT, "models", "tiny-llada-m.gguf")
TINY_AR = os.path.join(ROOT, "models", "tiny-ar-m.gguf")
# The seed's regime: 128-token answers in blocks of 32, the shape of every 128-token row.
# The realistic regime (the default of every 128-token row): tiny-llada-r's decisions on the
# real suite (train/tasks_real.py: answers with many valid forms, scored by checkers), where
# threshold 0.9 commits ~3 tokens per forward as LLaDA-8B does on GSM8K (docs/results.md
# compares them).
TASKS_L = os.path.join(ROOT, "models", "tasks", "mix-1000-r.jsonl")
TRACE_MODEL = os.path.join(ROOT, "models", "tiny-llada-r.gguf")
TINY_AR_L = os.path.join(ROOT, "models", "tiny-ar-r.gguf")
# The easy regime, kept in a labelled section of its own: tiny-llada-lc on the long suite
# (ladd, lsub: every token determined by the prompt), which finishes a 32-token block in about
# one forward at threshold 0.9 (~30 tokens per forward).
EASY_TASKS = os.path.join(ROOT, "models", "tasks", "mix-1000-l.jsonl")
EASY_MODEL = os.path.join(ROOT, "models", "tiny-llada-lc.gguf")
# The sensitivity table: the realistic traces resampled to these tokens per forward
# (bench/resample_traces.py; labelled a what-if).
SENSITIVITY_RATES = [2, 3, 5]
# The replayed 8B rows' weights: llama-quantize's Q4_K_M mix, the file users download.
WEIGHTS_8B = "Q4_K_M"

# The two settings. Quick keeps every row but shrinks what dominates the run time: 4 of the 8B
# shapes' 32 layers (the projected times scale about linearly with layers; the report says so),
# 200 problems instead of 1,000, three output lengths instead of five.
FULL = {
    "name": "full",
    "llada_8b": "8b",
    "llama_8b": "8b,arch=llama,kv_heads=8,ffn=14336,vocab=128256",
    "layers_note": "",
    "problems": 1000,
    "trace_problems": 200,
    "replay_sample": 50,
    "length_sample": 10,
    "lengths": [32, 64, 128, 256, 512],
    "host_lengths": [32, 64, 128, 256, 512],
    "host_reps": 1,
    "host_sample": 4,
    "tts_n": [1, 4, 8],
    "sensitivity": True,
}
QUICK = dict(FULL, **{
    "name": "quick",
    "llada_8b": "8b,layers=4",
    "llama_8b": "8b,arch=llama,kv_heads=8,ffn=14336,vocab=128256,layers=4",
    "layers_note": "4 of 32 layers",
    "problems": 200,
    "trace_problems": 40,
    "replay_sample": 10,
    "length_sample": 4,
    "lengths": [32, 128, 512],
    "host_lengths": [32, 128],
    "host_reps": 1,
    "host_sample": 2,
    "tts_n": [1, 4],
})


class Runner:
    def __init__(self, out, threads, models, resume=False):
        self.out, self.threads, self.models, self.resume = out, threads, models, resume
        self.commands = {}  # row name -> the commands that produced it
        os.makedirs(out, exist_ok=True)
        os.makedirs(models, exist_ok=True)

    def run(self, key, args, stdout_json=True):
        """Runs a tool, keeps its command line under `key`, returns its JSON (cached in OUT)."""
        cmd = [os.path.join(BIN, args[0])] + [str(a) for a in args[1:]]
        shown = " ".join(shlex.quote(c.replace(ROOT + "/", "").replace(self.models, "$PAPER_MODELS"))
                         for c in cmd)
        self.commands.setdefault(key, []).append(shown)
        # Named by the command, so --resume reuses a result only for the same command.
        path = os.path.join(self.out, key + "-" + hashlib.sha1(shown.encode()).hexdigest()[:12] + ".json")
        if self.resume and os.path.exists(path):
            print(f"[resumed] {shown}", file=sys.stderr, flush=True)
            with open(path) as f:
                return json.load(f)
        t0 = time.time()
        print(f"[{time.strftime('%H:%M:%S')}] {shown}", file=sys.stderr, flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
            raise SystemExit(f"paper.py: failed ({r.returncode}): {shown}")
        print(f"    {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        data = json.loads(r.stdout) if stdout_json else {}
        with open(path, "w") as f:
            json.dump(data, f)
        return data

    def model(self, shape, qtype, name):
        """A random-weight model written once into the cache folder."""
        path = os.path.join(self.models, name + ".gguf")
        if not os.path.exists(path):
            self.run("models", ["llada-quantize", "--synthetic", shape, "--type", qtype, "--out",
                                path + ".part", "-t", self.threads, "--no-progress"], False)
            os.rename(path + ".part", path)
        else:
            self.commands.setdefault("models", []).append(
                f"build/bin/llada-quantize --synthetic {shape} --type {qtype} --out $PAPER_MODELS/{name}.gguf")
        return path


def traces(r, s, model=None, tasks=None, prefix="", row9="mbsd-rev"):
    """The trace model's decision traces (128 tokens in blocks of 32, every block decoded) that
    the replayed rows take, and their quality numbers: mbsd on the schedule, need and mbsd with
    threshold 0.9 (mbsd accepting drafts at 0.7), mbsd with threshold 0.9 and self-checks (the
    blocks before the last at threshold 0.1, checked by the next forward's refresh rows), and the
    pipeline (window checks). Row 9's form is the one that pays on the trace model: `mbsd-sc`
    (self-checks, for a model trained to judge its fed tokens, tiny-llada-lc) or `mbsd-rev`
    (the CPU lane's checks, --revise: tiny-llada-r has no self-check training, and its
    self-checks replace right tokens; models/README.md, "The real suite")."""
    out, results = {}, {}
    specs = {
        "mbsd-sched": ["--policy", "mbsd", "--device", "npu-sim"],
        "need": ["--policy", "need", "--threshold", "0.9"],
        # Drafts accepted at 0.7 (not the default 0.5): within a point of need + threshold 0.9
        # on the long test sets, with fewer forwards (BENCHMARKS.md, "Speculation that never
        # costs").
        "mbsd": ["--policy", "mbsd", "--threshold", "0.9", "--accept", "0.7", "--device", "npu-sim"],
        # Row 9: revision whose checks ride in the refresh rows (docs/step-engine.md,
        # "Self-checks"); the CPU-lane form (--revise) costs more than it saves on this model
        # (BENCHMARKS.md, "The seventh long suite's traces").
        "mbsd-sc": ["--policy", "mbsd", "--threshold", "0.9", "--accept", "0.7", "--device",
                    "npu-sim", "--self-check", "--self-check-threshold", "0.1"],
        "mbsd-rev": ["--policy", "mbsd", "--threshold", "0.9", "--accept", "0.7", "--device",
                     "npu-sim", "--revise"],
        # Pipelined blocks, each ahead commit checked by the next forward fed the mask (one row
        # a check: the verify mode for a tile-granular device; BENCHMARKS.md "Pipelined blocks").
        "pipeline": ["--policy", "pipeline", "--threshold", "0.9", "--pipeline-verify", "window"],
    }
    specs.pop("mbsd-sc" if row9 == "mbsd-rev" else "mbsd-rev")
    for name, flags in specs.items():
        path = os.path.join(r.out, f"trace-{prefix}{name}.jsonl")
        out[name] = path
        results[name] = r.run(prefix + "traces", ["llada-eval", "-m", model or TRACE_MODEL,
                                                  "--tasks", tasks or TASKS_L,
                                         "--limit", s["trace_problems"], "--gen", 128, "--block", 32,
                                         "--no-early-stop", "-t", 1, "--parallel", r.threads,
                                         "--json", "--trace-out", path] + flags)
        if r.resume and not os.path.exists(path):
            raise SystemExit(f"paper.py: --resume found the result but not the trace {path}")
    return out, results


def trace_tpf(path):
    """Tokens per forward of a trace file: generated tokens over steps, all traces together."""
    tokens = steps = 0
    with open(path) as fh:
        for line in fh:
            if line.strip():
                t = json.loads(line)
                tokens += t["gen"]
                steps += len(t["steps"])
    return tokens / steps if steps else 0.0


def replay_flags(tr, sample):
    return ["--replay", tr["mbsd-sched"], "--replay-need", tr["need"], "--replay-threshold",
            tr["mbsd"], "--replay-revise", tr.get("mbsd-sc", tr.get("mbsd-rev")),
            "--replay-pipeline", tr["pipeline"],
            "--replay-sample", sample]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes, fewer problems")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the results in OUT of commands run before (same command line)")
    ap.add_argument("--skip-runs", action="store_true",
                    help="only rewrite docs/results.md and the figures from OUT's JSON")
    a = ap.parse_args()
    s = QUICK if a.quick else FULL
    threads = os.environ.get("THREADS", "2")
    out = os.environ.get("OUT", os.path.join(ROOT, "bench", "out", "paper" + ("-quick" if a.quick else "")))
    models = os.environ.get("PAPER_MODELS", os.path.join(os.path.expanduser("~"), ".cache", "llada.cpp", "paper-models"))
    if a.skip_runs:
        return report(out, s)
    r = Runner(out, threads, models, a.resume)
    t_start = time.time()
    res = {"setting": s, "threads": threads, "started": time.strftime("%Y-%m-%d %H:%M")}

    # Models: LLaDA-8B's shape and a Llama-3-8B-shaped AR model (projected); the 1B shape for
    # the host (measured).
    sfx = "" if s["name"] == "full" else "-4l"
    wq = WEIGHTS_8B.lower()
    m8 = r.model(s["llada_8b"], WEIGHTS_8B, f"llada-8b-{wq}" + sfx)
    a8 = r.model(s["llama_8b"], WEIGHTS_8B, f"llama3-8b-{wq}" + sfx)
    m1 = r.model("1b", "Q4_0", "llada-1b-q4_0")
    a1 = r.model("1b,arch=llama", "Q4_0", "llama-1b-q4_0")

    tr, res["traces"] = traces(r, s)
    res["trace_model"] = os.path.basename(TRACE_MODEL)[:-len(".gguf")]
    res["trace_tasks"] = os.path.basename(TASKS_L)
    res["trace_tpf"] = {k: trace_tpf(p) for k, p in tr.items()}

    # 1. The ablation (projected; rows 6-9 and p replayed), prompt 80, 128 tokens in blocks of 32.
    res["ablation"] = r.run("ablation", [
        "llada-bench", "-m", m8, "--ablation", "--ablation-configs", "123456789p", "--no-sensitivity",
        "--timing-only", "--prompt-len", 80, "--gen", 128, "--block", 32, "-t", threads, "--json"]
        + replay_flags(tr, s["replay_sample"]))["ablation"]

    # 1b. The easy regime (labelled apart in the report): tiny-llada-lc's decisions on the long
    # suite, the same rows.
    etr, easy_traces = traces(r, s, EASY_MODEL, EASY_TASKS, "easy-", row9="mbsd-sc")
    res["easy"] = {
        "trace_model": os.path.basename(EASY_MODEL)[:-len(".gguf")],
        "trace_tasks": os.path.basename(EASY_TASKS),
        "traces": easy_traces,
        "trace_tpf": {k: trace_tpf(p) for k, p in etr.items()},
        "ablation": r.run("easy-ablation", [
            "llada-bench", "-m", m8, "--ablation", "--ablation-configs", "6789p",
            "--no-sensitivity", "--timing-only", "--prompt-len", 80, "--gen", 128, "--block", 32,
            "-t", threads, "--json"] + replay_flags(etr, s["replay_sample"]))["ablation"],
    }

    # 2. Latency against output length, projected on sm8750: the dLLM's rows 8 (mbsd +
    # threshold) and 9 (+ progressive revision) against the AR model on the NPU and on the
    # phone's CPU (its best placement is whichever projects faster).
    res["length"] = []
    for n in s["lengths"]:
        d = r.run("length-dllm", [
            "llada-bench", "-m", m8, "--ablation", "--ablation-configs", "89", "--no-sensitivity",
            "--timing-only", "--prompt-len", 80, "--gen", n, "--block", 32, "-t", threads,
            "--json"] + replay_flags(tr, s["length_sample"]))["ablation"]["rows"]
        row = {"gen": n, "dllm": d, "ar": {}}
        for place, dev in (("npu", ["--device", "npu-sim", "--npu-profile", "sm8750"]),
                           ("cpu", ["--device", "cpu", "--npu-profile", "sm8750-cpu"])):
            row["ar"][place] = r.run("length-ar", [
                "llada-bench", "-m", a8, "--e2e", "--policies", "ar", "--prompt-len", 80, "--gen", n,
                "--reps", 1, "--timing-only", "-t", threads, "--json"] + dev)["e2e"][0]
        res["length"].append(row)

    # 2b. Sensitivity (a what-if, labelled): rows 7-9 and the dLLM at 128 tokens re-timed on the
    # realistic traces resampled to other rates of tokens per forward (the pipeline's traces
    # are not resampled: bench/resample_traces.py).
    res["sensitivity"] = {}
    for rate in SENSITIVITY_RATES if s.get("sensitivity") else []:
        rtr = dict(tr)
        row9 = "mbsd-sc" if "mbsd-sc" in tr else "mbsd-rev"
        for k in ("need", "mbsd", row9):
            rtr[k] = os.path.join(r.out, f"trace-{k}-at-{rate}.jsonl")
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "resample_traces.py"),
                            tr[k], rtr[k], str(rate)], check=True, stdout=subprocess.DEVNULL)
            r.commands.setdefault("sensitivity", []).append(
                f"python3 bench/resample_traces.py {os.path.relpath(tr[k], ROOT)} "
                f"{os.path.relpath(rtr[k], ROOT)} {rate}")
        flags = ["--replay", tr["mbsd-sched"], "--replay-need", rtr["need"],
                 "--replay-threshold", rtr["mbsd"], "--replay-revise", rtr[row9],
                 "--replay-sample", s["replay_sample"]]
        res["sensitivity"][str(rate)] = {
            "trace_tpf": {k: trace_tpf(rtr[k]) for k in ("need", "mbsd", row9)},
            "ablation": r.run("sensitivity", [
                "llada-bench", "-m", m8, "--ablation", "--ablation-configs", "789",
                "--no-sensitivity", "--timing-only", "--prompt-len", 80, "--gen", 128,
                "--block", 32, "-t", threads, "--json"] + flags)["ablation"]["rows"],
        }

    # 3. The same comparison measured on this machine's CPU at the 1B shape: replayed dLLM
    # decisions (mbsd + threshold 0.9), real arithmetic.
    res["host"] = []
    for n in s["host_lengths"]:
        d = r.run("host-dllm", [
            "llada-bench", "-m", m1, "--e2e", "--policies", "mbsd+threshold",
            "--replay", tr["mbsd"], "--replay-sample", s["host_sample"], "--prompt-len", 80,
            "--gen", n, "--block", 32, "--reps", s["host_reps"], "-t", threads, "--json"])["e2e"]
        ar = r.run("host-ar", [
            "llada-bench", "-m", a1, "--e2e", "--policies", "ar", "--prompt-len", 80, "--gen", n,
            "--reps", s["host_reps"], "-t", threads, "--json"])["e2e"]
        res["host"].append({"gen": n, "dllm": d, "ar": ar})

    # 4. The tiny twins on the same problems (measured): accuracy, forwards, wall time.
    ev = ["llada-eval", "--tasks", TASKS, "--limit", s["problems"], "--gen", 32, "-t", 1,
          "--parallel", threads, "--json"]
    frontier = {
        "vanilla, 1 token/step": ["--block", 8, "--steps", 32],
        "vanilla, 2 tokens/step": ["--block", 8, "--steps", 16],
        "vanilla, 4 tokens/step": ["--block", 8, "--steps", 8],
        "vanilla, 8 tokens/step": ["--block", 8, "--steps", 4],
        "dual-cache + threshold 0.9": ["--block", 8, "--policy", "dual-cache", "--threshold", 0.9],
        "dual-cache + threshold 0.7": ["--block", 8, "--policy", "dual-cache", "--threshold", 0.7],
        "dual-cache + threshold 0.5": ["--block", 8, "--policy", "dual-cache", "--threshold", 0.5],
        "mbsd + threshold 0.9": ["--block", 8, "--policy", "mbsd", "--threshold", 0.9],
        "mbsd + threshold 0.7 + revise": ["--block", 8, "--policy", "mbsd", "--threshold", 0.7,
                                          "--revise"],
        "mbsd + threshold 0.5 + revise": ["--block", 8, "--policy", "mbsd", "--threshold", 0.5,
                                          "--revise"],
    }
    res["tiny"] = {name: r.run("tiny-dllm", ev + ["-m", TINY_LLADA] + flags)
                   for name, flags in frontier.items()}
    res["tiny_ar"] = r.run("tiny-ar", ev + ["-m", TINY_AR])

    # 4b. The seed's regime measured: tiny-llada-l against tiny-ar-l on the long suite (128
    # tokens in blocks of 32), the policies whose decisions the 128-token rows replay among
    # them, and test-time scaling there.
    evl = ["llada-eval", "--tasks", TASKS_L, "--limit", s["problems"], "--gen", 128, "-t", 1,
           "--parallel", threads, "--json"]
    long_frontier = {
        "vanilla, 1 token/step": ["--block", 32, "--steps", 128],
        "vanilla, 8 tokens/step": ["--block", 32, "--steps", 16],
        "need + threshold 0.9": ["--block", 32, "--policy", "need", "--threshold", 0.9],
        "mbsd + threshold 0.9 (accept 0.7)": ["--block", 32, "--policy", "mbsd", "--threshold",
                                              0.9, "--accept", 0.7, "--device", "npu-sim"],
        "pipeline": ["--block", 32, "--policy", "pipeline"],
        "pipeline (window checks)": ["--block", 32, "--policy", "pipeline", "--pipeline-verify",
                                     "window"],
        "mbsd + threshold 0.1, unchecked": ["--block", 32, "--policy", "mbsd", "--threshold", 0.1,
                                            "--accept", 0.7, "--device", "npu-sim"],
        "mbsd + threshold 0.9 + self-checks (0.1 before the last block)": [
            "--block", 32, "--policy", "mbsd", "--threshold", 0.9, "--accept", 0.7, "--device",
            "npu-sim", "--self-check", "--self-check-threshold", 0.1],
    }
    res["tiny_long"] = {name: r.run("tiny-dllm-long", evl + ["-m", TRACE_MODEL] + flags)
                        for name, flags in long_frontier.items()}
    res["tiny_ar_long"] = r.run("tiny-ar-long", evl + ["-m", TINY_AR_L])
    res["tts_long"] = {n: r.run("tts-long", evl + [
        "-m", TRACE_MODEL, "--block", 32, "--policy", "dual-cache", "--threshold", 0.9,
        "--temperature", 1.0, "--tts", n]) for n in s["tts_n"]}

    # 5. The latency table's staircase (projected): one forward of R rows against an 80-token
    # prefix on sm8750.
    rows = [1, 8, 16, 24, 32, 33, 48, 64, 65, 96, 97, 128, 129, 160, 192, 224, 256]
    res["staircase"] = r.run("staircase", [
        "llada-bench", "-m", m8, "--device", "npu-sim", "--npu-profile", "sm8750", "--timing-only",
        "--rows", ",".join(map(str, rows)), "--prefix", 80, "--reps", 1, "--no-peaks", "-t",
        threads, "--json"])["results"]

    res["commands"] = r.commands
    res["run_s"] = time.time() - t_start
    with open(os.path.join(out, "paper.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"paper.py: runs took {res['run_s'] / 60:.1f} min", file=sys.stderr)
    report(out, s)


def report(out, s):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import paper_report
    paper_report.write(os.path.join(out, "paper.json"), ROOT)


if __name__ == "__main__":
    main()
