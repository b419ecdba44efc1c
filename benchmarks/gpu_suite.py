r"""The GPU benchmark suite in one command (benchmarks/gpu_suite.sh runs this).

  bash benchmarks/gpu_suite.sh [--out DIR] [--budget_s 570] [--dry_run] [--parts a,b]
      [--embed_model HF_DIR --embed_bundle BUNDLE] [--sts_train PATH]

Parts, in this order, each a subprocess with its own time limit inside a global budget
(default 570 s, so that the whole run takes under 10 minutes). The step parts run the
accelerator recipe, configs/pretrain.py:VARIANT,fused_attention: hidden dropout 0.1,
attention dropout 0 (as MosaicBERT trains), so `auto` picks cuDNN's fused attention; the
torch peer gets the same dropout rates:
  profile        benchmarks/profile_step.py: base, batch 256 x seq 128, bf16, 5 traced steps
  base_seq128    benchmarks/train_step.py --reference torch: base 256 x 128 bf16, ours and
                 transformers' PyTorch BertForPreTraining interleaved (3 rounds x 10 steps)
  large_seq512   as base_seq128 for large, batch 32 x seq 512 (3 rounds x 5 steps)
  large_seq512_cached  large again, ours alone, in a new process: compiled from the cache
  embed          benchmarks/embed_speed.py against sentence-transformers on the GPU: a
                 random MiniLM-shaped model (benchmarks/random_bert.py) unless --embed_model
                 and --embed_bundle are given, 10,000 synthetic texts unless --sts_train
  base_seq128_attention_dropout  base with BERT's attention dropout 0.1 (the einsum path),
                 ours alone
  base_seq128_vocab_unpadded  base_seq128's recipe with the MLM decoder unpadded
                 (model.vocab_pad_multiple=1; the GPU default pads 30,522 to 30,592), ours alone
  variants       benchmarks/gpu_variants.py: base_seq128's recipe, baseline against each switch
                 (model.fused_norm=pallas, cuDNN LayerNorm, cuBLASLt) and a warm start with
                 and without XLA's kernel cache, what the time left allows (`--parts variants`
                 gives it the whole budget); dry run: each lowered for CUDA
The profile and base_seq128 share a persistent compilation cache (same step program).

Writes DIR/suite.json (every figure of every part, with its device), DIR/suite.md (the
tables, also printed last) and DIR/suite.log (each part's output). DIR defaults to
./gpu_suite_out. A part that fails or runs out of time is reported as
such and the suite goes on.

--dry_run (or GPU_SUITE_DRY_RUN=1): the same chain on whatever device is there with the
tiny config, a few steps, float32, torch eager, 64 texts, every part in this one process
(one import of jax, torch and transformers): about a minute on a 2-core CPU
(tests/test_benchmarks.py runs it).
"""
import argparse
import contextlib
import importlib.util
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback

REQUIRED = ["jax", "flax", "optax", "orbax", "ml_collections", "etils", "absl", "torch",
            "transformers"]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def check_packages(names) -> None:
  """Exits with one line naming the modules of `names` that cannot be imported here."""
  missing = [m for m in names if importlib.util.find_spec(m) is None]
  if missing:
    sys.exit(f"missing Python packages: {', '.join(missing)} (pip install them; on a machine "
             "without a package index, put their wheels in .whl/ and run the .sh script, which "
             "installs them: benchmarks/README.md)")


def parts(args, work: str) -> list[dict]:
  """name, budget_s, commands (run in order), result JSON of each part."""
  py = sys.executable
  dry = args.dry_run
  step = (["--config", "configs/pretrain.py:tiny", "--batch_size", "4", "--seq_len", "32",
           "--dtype", "float32"] if dry else
          ["--config", "configs/pretrain.py:base", "--batch_size", "256", "--seq_len", "128",
           "--dtype", "bfloat16"])
  large = (step if dry else  # the dry run's compile cache serves it
           ["--config", "configs/pretrain.py:large", "--batch_size", "32", "--seq_len", "512",
            "--dtype", "bfloat16"])
  fused = lambda args: [x + ",fused_attention" if x.startswith("configs/pretrain.py:") else x  # noqa: E731
                        for x in args]
  peer = ["--reference", "torch"] + (["--no_torch_compile"] if dry else [])
  embed_model, embed_bundle = args.embed_model, args.embed_bundle
  make_model = []
  num = 64 if dry else 10000
  texts = ["--sts_train", args.sts_train] if args.sts_train else ["--texts", f"{work}/minilm/texts.txt"]
  if not embed_model:
    embed_model, embed_bundle = f"{work}/minilm/hf", f"{work}/minilm/bundle"
    shape = ["--layers", "2", "--hidden", "128", "--heads", "2", "--intermediate", "512"] if dry else []
    make_model = [[py, f"{HERE}/random_bert.py", "--dst", f"{work}/minilm", "--texts", str(num)]
                  + shape]
  elif not args.sts_train:
    make_model = [[py, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import random_bert; "
                   "import os; os.makedirs(sys.argv[2], exist_ok=True); "
                   "open(sys.argv[2] + '/texts.txt', 'w').write("
                   "'\\n'.join(random_bert.synthetic_texts(int(sys.argv[3]))) + '\\n')",
                   HERE, f"{work}/minilm", str(num)]]
  return [
      dict(name="profile", budget_s=120, json=f"{work}/profile.json", cmds=[
          [py, f"{HERE}/profile_step.py", *fused(step), "--steps", "2" if dry else "5",
           "--out", f"{work}/profile", "--json", f"{work}/profile.json"]]),
      dict(name="base_seq128", budget_s=180, json=f"{work}/base_seq128.json", cmds=[
          [py, f"{HERE}/train_step.py", *fused(step), *peer, "--steps", "2" if dry else "10",
           "--rounds", "1" if dry else "3", "--json", f"{work}/base_seq128.json"]]),
      dict(name="large_seq512", budget_s=240, json=f"{work}/large_seq512.json", cmds=[
          [py, f"{HERE}/train_step.py", *fused(large), *peer, "--steps", "2" if dry else "5",
           "--rounds", "1" if dry else "3", "--json", f"{work}/large_seq512.json"]]),
      # large again in a second process: its first step from the persistent cache, which
      # should take seconds where the first process compiled for a minute.
      dict(name="large_seq512_cached", budget_s=60, json=f"{work}/large_seq512_cached.json", cmds=[
          [py, f"{HERE}/train_step.py", *fused(large), "--no_reference", "--steps", "2",
           "--rounds", "1", "--json", f"{work}/large_seq512_cached.json"]]),
      dict(name="embed", budget_s=90, json=f"{work}/embed.json", cmds=make_model + [
          [py, f"{HERE}/embed_speed.py", "--model_dir", embed_model, "--bundle", embed_bundle,
           *texts, "--num", str(num), "--json", f"{work}/embed.json",
           *(["--max_length", "32"] if dry else []),
           "--reference", "auto" if dry else "sentence_transformers"]]),
      dict(name="base_seq128_attention_dropout", budget_s=80,
           json=f"{work}/base_seq128_attention_dropout.json", cmds=[
               [py, f"{HERE}/train_step.py", *step, "--set", "model.attention_dropout_rate=0.1",
                "--no_reference", "--steps", "2" if dry else "10", "--rounds", "1" if dry else "3",
                "--json", f"{work}/base_seq128_attention_dropout.json"]]),
      dict(name="base_seq128_vocab_unpadded", budget_s=70,
           json=f"{work}/base_seq128_vocab_unpadded.json", cmds=[
               [py, f"{HERE}/train_step.py", *fused(step), "--set", "model.vocab_pad_multiple=1",
                "--no_reference", "--steps", "2" if dry else "10", "--rounds", "1" if dry else "3",
                "--json", f"{work}/base_seq128_vocab_unpadded.json"]]),
      dict(name="variants", budget_s=540, json=f"{work}/variants.json", cmds=[
          [py, f"{HERE}/gpu_variants.py", "--json", f"{work}/variants.json",
           *(["--dry_run", "--variants", "baseline,fused_norm"] if dry else [])]]),
  ]


def run_in_process(cmd: list, log) -> int:
  """Runs `python SCRIPT ARGS...` or `python -c CODE ARGS...` in this process; its exit status."""
  old_argv = sys.argv
  try:
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
      if cmd[1] == "-c":
        sys.argv = ["-c"] + cmd[3:]
        exec(compile(cmd[2], "<suite>", "exec"), {"__name__": "__main__"})  # pylint: disable=exec-used
      else:
        sys.argv = cmd[1:]
        runpy.run_path(cmd[1], run_name="__main__")
    return 0
  except SystemExit as e:
    if e.code not in (None, 0):
      log.write(f"exit: {e.code}\n")
    return 0 if e.code in (None, 0) else 1
  except Exception:  # pylint: disable=broad-except
    log.write(traceback.format_exc())
    return 1
  finally:
    sys.argv = old_argv
    log.flush()


def run_part(part: dict, deadline: float, env: dict, log, in_process: bool = False) -> dict:
  """Runs the part's commands within min(its budget, the time left); returns its record.

  in_process (the dry run): in this process, one import of jax, torch and transformers for
  all parts, and no time limit but the budget check before each part.
  """
  start = time.time()
  limit = min(part["budget_s"], deadline - start)
  record = dict(name=part["name"], budget_s=part["budget_s"])
  if limit < 10:
    record.update(status="not run: the suite's time budget was spent")
    return record
  rc = 0
  for cmd in part["cmds"]:
    left = start + limit - time.time()
    log.write(f"\n===== {part['name']}: {' '.join(cmd)} (limit {left:.0f} s)\n")
    log.flush()
    if in_process:
      rc = run_in_process(cmd, log)
    else:
      # Its own process group, so that a timeout also ends what it started (torch.compile's
      # workers, the converter).
      proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
      try:
        rc = proc.wait(timeout=max(left, 1))
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        record.update(status=f"timed out after {limit:.0f} s", seconds=time.time() - start)
        return record
    if rc:
      break
  record["seconds"] = time.time() - start
  try:
    with open(part["json"]) as f:
      record["result"] = json.load(f)  # kept on failure too: embed's says why it failed
    record["status"] = "ok"
  except (OSError, ValueError) as e:
    record["status"] = f"failed: no result ({e})"
  if rc:
    record["status"] = f"failed (exit {rc}; see suite.log)"
  return record


def _state_s(result: dict) -> str:
  """bert_jax's state init (and batch transfer) seconds, from train_step.py's JSON."""
  return f"{result['state_s']:.1f}" if "state_s" in result else ""


def markdown(suite: dict) -> str:
  out = [f"## GPU suite{' (dry run: tiny config, CPU figures are not GPU figures)' if suite['dry_run'] else ''}",
         "", f"{suite['date']} | jax device: {suite['device']} | torch device: {suite['torch_device']} "
         f"| {suite['seconds']:.0f} s", ""]
  out += ["| part | status | seconds |", "|---|---|---:|"]
  for p in suite["parts"]:
    out.append(f"| {p['name']} | {p['status']} | {p.get('seconds', 0):.0f} |")
  steps = [p for p in suite["parts"]
           if p["name"] in ("base_seq128", "large_seq512", "large_seq512_cached",
                            "base_seq128_attention_dropout", "base_seq128_vocab_unpadded")
           and "result" in p]
  if steps:
    out += ["", "| part | implementation | device | ms/step | blocked ms | tokens/s | MFU "
            "| state init s | first step s |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in steps:
      r = p["result"]
      for row in r["rows"]:
        out.append(f"| {p['name']} | {row['implementation']} | {row['device']} "
                   f"| {row['ms_per_step']:.1f} | {row['blocked_ms_per_step']:.1f} "
                   f"| {row['tokens_per_s']:,.0f} | {row['mfu']:.1%} "
                   f"| {_state_s(r) if row is r['rows'][0] else ''} | {row['first_step_s']:.1f} |")
      if "vs_reference" in r:
        out.append(f"| {p['name']} | bert_jax / torch tokens/s | | | | {r['vs_reference']:.2f}x "
                   "| | | |")
    for p in steps:
      out.append(f"\n{p['name']}: {p['result']['config']}; peak {p['result']['peak_flops']:.3g} "
                 f"FLOP/s ({p['result']['peak_source']})")
  for p in suite["parts"]:
    if p["name"] == "profile" and "result" in p:
      sys.path.insert(0, HERE)
      import trace_summary  # pylint: disable=g-import-not-at-top
      r = p["result"]
      top = dict(r, top_kernels=r["top_kernels"][:10])
      out += ["", trace_summary.markdown(
          top, f"profile: {r['device']} | {r['config']} | {r['steps']} traced steps ({r['where']})"),
              "", f"traced: {r['traced_wall_ms_per_step']:.2f} ms/step, MFU {r['mfu']:.1%}, "
              f"compile {r['compile_s']:.1f} s"]
    if p["name"] == "variants" and "result" in p:
      out += ["", "variants (base_seq128's recipe; each switch alone):", "",
              p["result"]["table"]]
    if p["name"] == "embed" and "result" in p:
      r = p["result"]
      s = r["sentences_per_s"]
      out += ["", "| embedding | device | cold sentences/s | warm sentences/s |", "|---|---|---:|---:|",
              f"| bert_jax | {r['device']} | {s['bert_jax cold']:,.0f} | {s['bert_jax warm']:,.0f} |",
              f"| {r['reference']} | {r['reference_device']} | {s['reference cold']:,.0f} "
              f"| {s['reference warm']:,.0f} |",
              "", f"{r['sentences']} texts; bert_jax / reference: cold {r['cold_ratio']:.2f}x, warm "
              f"{r['warm_ratio']:.2f}x; max abs difference {r['max_abs_diff']:.2e}"
              + ("" if r.get("agree", True) else
                 " (**the sides disagree: these speeds are not of the same computation**)")]
  return "\n".join(out)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", default=os.path.join(os.getcwd(), "gpu_suite_out"),
                 help="where suite.json, suite.md and suite.log go (default ./gpu_suite_out)")
  p.add_argument("--budget_s", type=float, default=570.0)
  p.add_argument("--dry_run", action="store_true",
                 default=os.environ.get("GPU_SUITE_DRY_RUN", "") not in ("", "0"))
  p.add_argument("--embed_model", default="", help="a Hugging Face BERT directory (with --embed_bundle)")
  p.add_argument("--embed_bundle", default="", help="the same model as a bert_jax bundle")
  p.add_argument("--sts_train", default="", help="STS-B train.tsv for the embedding texts")
  p.add_argument("--isolate", action="store_true",
                 help="dry run: parts as subprocesses with time limits, as on a GPU")
  p.add_argument("--work", default="", help="scratch directory (default: a new temp dir)")
  p.add_argument("--parts", default="",
                 help="comma-separated part names to run, in the suite's order (default: all)")
  args = p.parse_args(argv)
  args.out = os.path.abspath(args.out)  # the dry run changes directory to the repository
  names = [x["name"] for x in parts(args, "")]
  chosen = [x for x in args.parts.split(",") if x]
  if [x for x in chosen if x not in names]:
    sys.exit(f"--parts {args.parts}: unknown part(s) {', '.join(x for x in chosen if x not in names)}"
             f" (parts: {', '.join(names)})")
  if bool(args.embed_model) != bool(args.embed_bundle):
    sys.exit("--embed_model and --embed_bundle go together")
  if args.sts_train and not os.path.isfile(args.sts_train):
    sys.exit(f"--sts_train {args.sts_train}: no such file")
  if args.budget_s < 30:
    sys.exit(f"--budget_s must be >= 30 (got {args.budget_s})")
  check_packages(REQUIRED + ([] if args.dry_run else ["sentence_transformers"]))
  os.makedirs(args.out, exist_ok=True)
  work = args.work or tempfile.mkdtemp(prefix="gpu_suite_")
  start = time.time()
  env = dict(os.environ, PYTHONUNBUFFERED="1", USE_TF="0",
             JAX_COMPILATION_CACHE_DIR=os.path.join(work, "jax_cache"),
             XLA_PYTHON_CLIENT_PREALLOCATE="false",  # torch shares the GPU with jax
             GPU_SUITE_DEADLINE=str(start + args.budget_s),  # gpu_variants skips what won't fit
             PYTHONPATH=os.pathsep.join([ROOT] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
  print(f"gpu_suite{' --dry_run' if args.dry_run else ''}: budget {args.budget_s:.0f} s; log {args.out}/suite.log", flush=True)
  records = []
  in_process = args.dry_run and not args.isolate
  if in_process:
    os.chdir(ROOT)
    os.environ.update(env)
    sys.path.insert(0, ROOT)
  with open(os.path.join(args.out, "suite.log"), "w") as log:
    for part in parts(args, work):
      if chosen and part["name"] not in chosen:
        continue
      records.append(run_part(part, start + args.budget_s, env, log, in_process=in_process))
      r = records[-1]
      print(f"  {r['name']}: {r['status']} ({r.get('seconds', 0):.0f} s)", flush=True)
  device, torch_device = _devices(records)
  suite = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), dry_run=args.dry_run,
               device=device, torch_device=torch_device, seconds=time.time() - start,
               parts=records)
  with open(os.path.join(args.out, "suite.json"), "w") as f:
    json.dump(suite, f, indent=1)
  md = markdown(suite)
  with open(os.path.join(args.out, "suite.md"), "w") as f:
    f.write(md + "\n")
  print(md)
  return 0 if all(r["status"] == "ok" for r in records) else 1


def _devices(records: list[dict]) -> tuple[str, str]:
  """jax's device and torch's, as the parts' results name them."""
  device = torch_device = "unknown (no part finished)"
  for r in records:
    res = r.get("result", {})
    device = res.get("device", device)
    for row in res.get("rows", [])[1:]:
      torch_device = row["device"]
    torch_device = res.get("reference_device", torch_device)
  return device, torch_device


if __name__ == "__main__":
  sys.exit(main())
