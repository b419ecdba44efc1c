r"""The accelerator step's switches against its baseline, on one GPU, in one table.

  bash benchmarks/gpu_suite.sh --parts variants
  python benchmarks/gpu_variants.py [--budget_s 480] [--json PATH] [--variants a,b] [--dry_run]

Variants, each in its own process (XLA reads XLA_FLAGS once, when its backend starts):
  baseline          configs/pretrain.py:base,fused_attention, batch 256 x seq 128, bfloat16
  fused_norm        + model.fused_norm=pallas (bert_jax/modeling/fused_norm.py: dropout,
                    residual add and LayerNorm as one Triton kernel)
  cudnn_layer_norm  + XLA_FLAGS --xla_gpu_enable_cudnn_layer_norm=true
  cublaslt          + XLA_FLAGS --xla_gpu_enable_cublaslt=true
  cublaslt_gelu_new + model.hidden_act=gelu_new: the tanh GELU, which cuBLASLt's epilogue fuses
                    with the bias into the GEMM (the exact GELU stays a pass of its own)
  fused_qkv         + model.qkv_projection=fused (bert_jax/modeling/fused_qkv.py: Q, K and V
                    as one GEMM of [hidden, 3 x hidden] over the separate params)
  fused_qkv_norm    fused_qkv and fused_norm
  fused_qkv_norm_cublaslt_gelu_new  fused_qkv, fused_norm and cublaslt_gelu_new
  scan_layers       + model.scan_layers=true (one layer compiled, run in a loop: the compile
                    time against the step time)
  compile_threads   + XLA_FLAGS --xla_gpu_force_compilation_parallelism=16 (the first step's
                    compile)
  autotune_warm_start  the baseline twice, each on a new compilation cache; the first saves
                    XLA's autotuning results (--xla_gpu_dump_autotune_results_to), the second
                    loads them (--xla_gpu_load_autotune_results_from): its compile without
                    autotuning (cold / warm in the table)
  warm_start        the baseline twice on a new compilation cache: the first step of the
                    second process, loaded from the cache (cold / warm in the table)
  warm_start_xla_caches_all  the same with JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=all (XLA's
                    kernel cache kept too, beside the autotuning results JAX keeps by default)
Each is benchmarks/train_step.py alone (no reference): 2 warm-up steps, then 2 rounds of one
blocked step and 8 back-to-back ones: 20 steps from the same initial state on the same batch,
so the loss after them says whether a switch changed the numerics (fused_norm draws another
dropout mask: close, not equal). The table: ms/step, MFU, tokens/s, the first step (compile)
and that loss. A variant starts only when the budget's time left covers its runs at the longest
run so far (before the first: 150 s); the others are listed as skipped, with the reason. Run by
gpu_suite.py, the budget ends where the suite's does.

--dry_run (the CPU): each variant builds the tiny step and lowers it for CUDA through
jax.export (the Pallas kernel as its Triton call), and its XLA flags are checked by starting
a JAX backend with them in a subprocess (XLA stops on a flag it does not know). No timings.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

VARIANTS = {  # name: (train_step.py --set items, XLA flags added, environment added, runs)
    "baseline": ([], [], {}, 1),
    "fused_norm": (["model.fused_norm=pallas"], [], {}, 1),
    "fp8": (["model.fp8=true"], [], {}, 1),  # encoder GEMMs in FP8 (bert_jax/modeling/fp8.py)
    "cudnn_layer_norm": ([], ["--xla_gpu_enable_cudnn_layer_norm=true"], {}, 1),
    "cublaslt": ([], ["--xla_gpu_enable_cublaslt=true"], {}, 1),
    # cuBLASLt's epilogue fuses bias + GELU in its tanh form only: the same flag, that GELU
    "cublaslt_gelu_new": (["model.hidden_act=gelu_new"], ["--xla_gpu_enable_cublaslt=true"], {}, 1),
    "fused_qkv": (["model.qkv_projection=fused"], [], {}, 1),
    "fused_qkv_norm": (["model.qkv_projection=fused", "model.fused_norm=pallas"], [], {}, 1),
    "fused_qkv_norm_cublaslt_gelu_new": (
        ["model.qkv_projection=fused", "model.fused_norm=pallas", "model.hidden_act=gelu_new"],
        ["--xla_gpu_enable_cublaslt=true"], {}, 1),
    "scan_layers": (["model.scan_layers=true"], [], {}, 1),
    # The flags' names are those of the jaxlib this sweep runs with (its XLA's
    # debug_options_flags.cc; `strings` of jaxlib's .so files lists them), and the dry run
    # starts a backend with them: XLA aborts on a flag it does not know. jaxlib 0.11 dropped
    # --xla_gpu_enable_llvm_module_compilation_parallelism (a reserved name in its
    # DebugOptions); 0.10 and 0.11 both know this one.
    "compile_threads": ([], ["--xla_gpu_force_compilation_parallelism=16"], {}, 1),
    "autotune_warm_start": ([], [], {}, 2),  # RUN_FLAGS: run 1 saves, run 2 loads
    "warm_start": ([], [], {}, 2),
    "warm_start_xla_caches_all": ([], [], {"JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "all"}, 2),
}
# Flags that differ between a variant's runs ({work}: the sweep's folder). Each of its runs
# compiles into a compilation cache of its own, so the second compiles again (from the first's
# cache it would load the whole program and compile nothing); what it reuses is what the flags
# carry over: XLA's autotuning results, saved as text by run 1 and read by run 2.
RUN_FLAGS = {
    "autotune_warm_start": (["--xla_gpu_dump_autotune_results_to={work}/autotune.txt"],
                            ["--xla_gpu_load_autotune_results_from={work}/autotune.txt"]),
}
FIRST_ESTIMATE_S = 150.0  # base's first compile and 20 steps on an H100, with room


def _env(flags: list[str], extra: dict) -> dict:
  env = dict(os.environ, PYTHONUNBUFFERED="1", **extra,
             PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get(
                 "PYTHONPATH", "").split(os.pathsep) if p]))
  if flags:
    env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", "")] + flags).strip()
  return env


def measure(name: str, work: str, limit_s: float) -> dict:
  """One variant's figures from train_step.py in its own process (a record with a status)."""
  sets, flags, extra, runs = VARIANTS[name]
  out = os.path.join(work, f"{name}.json")
  # a compilation cache of its own: the first step is a compile (the suite's earlier parts
  # cached the baseline's program), and a second run loads what the first stored
  extra = dict(extra, JAX_COMPILATION_CACHE_DIR=os.path.join(work, f"{name}_cache"))
  cmd = [sys.executable, os.path.join(HERE, "train_step.py"), "--config",
         "configs/pretrain.py:base,fused_attention", "--batch_size", "256", "--seq_len", "128",
         "--dtype", "bfloat16", "--no_reference", "--steps", "8", "--rounds", "2", "--json", out]
  for item in sets:
    cmd += ["--set", item]
  start, first_steps = time.time(), []
  for run in range(runs):
    left = start + limit_s - time.time()
    run_flags, run_extra = flags, extra
    if name in RUN_FLAGS:
      run_flags = flags + [f.format(work=work) for f in RUN_FLAGS[name][run]]
      run_extra = dict(extra, JAX_COMPILATION_CACHE_DIR=os.path.join(work, f"{name}_cache{run}"))
    try:
      proc = subprocess.run(cmd, cwd=ROOT, env=_env(run_flags, run_extra), capture_output=True,
                            text=True, timeout=max(left, 1))
    except subprocess.TimeoutExpired:
      return dict(name=name, status=f"timed out after {limit_s:.0f} s", seconds=limit_s)
    record = dict(name=name, seconds=time.time() - start, log_tail=proc.stdout[-2000:]
                  + proc.stderr[-2000:])
    if proc.returncode:
      record["status"] = f"failed (exit {proc.returncode})"
      return record
    with open(out) as f:
      result = json.load(f)
    first_steps.append(result["rows"][0]["first_step_s"])
  row = result["rows"][0]
  record.update(status="ok", device=result["device"], ms_per_step=row["ms_per_step"],
                mfu=row["mfu"], tokens_per_s=row["tokens_per_s"], first_steps_s=first_steps,
                loss=result["loss"], steps=result["steps_run"])
  return record


def dry_run(name: str) -> dict:
  """The tiny step of `name` lowered for CUDA here, and its XLA flags accepted by this XLA."""
  sys.path.insert(0, HERE)
  import jax  # pylint: disable=g-import-not-at-top
  import train_step  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import fused_norm  # pylint: disable=g-import-not-at-top
  sets, flags, extra, _ = VARIANTS[name]
  p = argparse.ArgumentParser()
  train_step.add_step_args(p)
  args = p.parse_args(["--config", "configs/pretrain.py:tiny,fused_attention", "--batch_size",
                       "4", "--seq_len", "32", "--dtype", "bfloat16"]
                      + [x for item in sets for x in ("--set", item)])
  args.set += ["model.dropout_rate=0.1"]  # the tiny variant has none: the kernel's mask is drawn
  setup = train_step.Setup(args)
  runner = train_step.ours(setup.config, setup.model_cfg, setup.batch)
  interpreted, fused_norm.interpret = fused_norm.interpret, False  # Triton, not the interpreter
  try:
    exported = jax.export.export(runner.step_fn, platforms=["cuda"], disabled_checks=[
        jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
            runner.state, runner.batch)
  finally:
    fused_norm.interpret = interpreted
  text = exported.mlir_module()
  record = dict(name=name, status="ok", triton_calls=text.count("xla.gpu.triton"),
                dots=text.count("stablehlo.dot_general"), platforms=list(exported.platforms))
  with tempfile.TemporaryDirectory(prefix="gpu_variants_dry_") as work:
    for run_flags in RUN_FLAGS.get(name, ([],)):
      run_flags = flags + [f.format(work=work) for f in run_flags]
      if not (run_flags or extra):
        continue
      # XLA stops on a flag it does not know, JAX on a bad setting
      proc = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                            env=_env(run_flags, extra), capture_output=True, text=True,
                            timeout=120)
      if proc.returncode:
        record["status"] = (f"failed: refused {' '.join(run_flags)} {extra}: "
                            f"{proc.stderr.strip()[-300:]}")
  return record


def markdown(records: list[dict], dry: bool) -> str:
  if dry:
    out = ["| variant | status | lowered for | Triton calls |", "|---|---|---|---:|"]
    out += [f"| {r['name']} | {r['status']} | {','.join(r.get('platforms', []))} "
            f"| {r.get('triton_calls', '')} |" for r in records]
    return "\n".join(out)
  out = ["| variant | status | ms/step | MFU | tokens/s | first step s (cold / warm) "
         "| loss after 20 steps |",
         "|---|---|---:|---:|---:|---:|---:|"]
  for r in records:
    if r["status"] == "ok":
      out.append(f"| {r['name']} | ok | {r['ms_per_step']:.1f} | {r['mfu']:.1%} "
                 f"| {r['tokens_per_s']:,.0f} "
                 f"| {' / '.join(f'{s:.1f}' for s in r['first_steps_s'])} | {r['loss']:.4f} |")
    else:
      out.append(f"| {r['name']} | {r['status']} | | | | | |")
  return "\n".join(out)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--budget_s", type=float, default=480.0)
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--json", default="", help="write the records and the table here")
  p.add_argument("--dry_run", action="store_true",
                 default=os.environ.get("GPU_SUITE_DRY_RUN", "") not in ("", "0"))
  args = p.parse_args(argv)
  names = [x for x in args.variants.split(",") if x]
  unknown = [x for x in names if x not in VARIANTS]
  if unknown:
    sys.exit(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
  start, records, per_run, measured = time.time(), [], FIRST_ESTIMATE_S, False
  end = start + args.budget_s
  if os.environ.get("GPU_SUITE_DEADLINE"):  # within the suite: its end, less room to write up
    end = min(end, float(os.environ["GPU_SUITE_DEADLINE"]) - 10)
  with tempfile.TemporaryDirectory(prefix="gpu_variants_") as work:
    for name in names:
      left, runs = end - time.time(), VARIANTS[name][3]
      if args.dry_run:
        records.append(dry_run(name))
      elif left < per_run * runs:
        records.append(dict(name=name, status=f"skipped: {left:.0f} s left of the budget, "
                            f"it needs about {per_run * runs:.0f} s"))
      else:
        records.append(measure(name, work, left))
        per_run = max(per_run if measured else 0, records[-1].get("seconds", 0) / runs)
        measured = True
      print(f"  {name}: {records[-1]['status']}", flush=True)
  table = markdown(records, args.dry_run)
  print(table)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(dry_run=args.dry_run, variants=records, table=table), f, indent=1)
  return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
  sys.exit(main())
