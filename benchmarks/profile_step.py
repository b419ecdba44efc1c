r"""Where a pretraining step's device time goes: a jax.profiler trace summarised by category.

  python benchmarks/profile_step.py --config configs/pretrain.py:base --batch_size 256 \
      --seq_len 128 --dtype bfloat16 --steps 5 [--out DIR] [--json PATH]

Builds the step as benchmarks/train_step.py does (same flags: config, batch, dtype,
attention_impl, remat, scan_layers), compiles it, runs --warmup steps, then traces
--steps steps dispatched back to back and waited for once. The trace (an XSpace,
`DIR/trace/plugins/profile/*/*.xplane.pb`; TensorBoard/XProf open it, nothing here
needs them or TensorFlow) is summarised by benchmarks/trace_summary.py: device time
per step by category (GEMMs, attention, fused elementwise & LayerNorm, scatter &
gather, RNG, optimizer, copies & transposes, other, idle gaps between kernels) and the
top --top kernels. On a GPU "device" is the kernels on its streams; on the CPU the
XLA:CPU thunks on host threads. Prints the tables as markdown (with the device name)
and writes them to --json (default DIR/profile.json).
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_step  # noqa: E402  (puts the repository root on sys.path)
import trace_summary  # noqa: E402

import jax  # noqa: E402


def profile(setup, steps: int, warmup: int, out_dir: str, top: int = 20) -> dict:
  """Traces `steps` steady-state steps of the step `setup` chooses; returns the summary."""
  step, state, batch = train_step.build_ours(setup.config, setup.model_cfg, setup.batch)
  t = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - t
  module, categories = trace_summary.parse_hlo(compiled.as_text())
  runner = train_step.Runner(compiled, state, batch)
  for _ in range(warmup):
    runner.step()
  trace_dir = os.path.join(out_dir, "trace")
  options = jax.profiler.ProfileOptions()
  options.python_tracer_level = 0  # Python frames are host noise here
  with jax.profiler.trace(trace_dir, profiler_options=options):
    seconds = train_step.back_to_back(runner, steps)
  xplane = trace_summary.latest_xplane(trace_dir)
  where, events = trace_summary.device_events(xplane)
  summary = trace_summary.summarize(events, module, categories, steps, top)
  summary.update(device=setup.device, where=where, config=setup.describe(), steps=steps,
                 compile_s=compile_s, traced_wall_ms_per_step=seconds * 1e3,
                 hlo_module=module, xplane=xplane, **setup.figures(seconds))
  return summary


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  train_step.add_step_args(p)
  p.add_argument("--steps", type=int, default=5, help="traced steps")
  p.add_argument("--warmup", type=int, default=2, help="untraced steps after the compile")
  p.add_argument("--top", type=int, default=20)
  p.add_argument("--out", default="", help="trace and JSON directory (default: a new temp dir)")
  p.add_argument("--json", default="", help="default: OUT/profile.json")
  args = p.parse_args(argv)
  if args.steps < 1 or args.warmup < 0 or args.top < 1:
    sys.exit(f"--steps and --top must be >= 1, --warmup >= 0 (got {args.steps}, {args.top}, "
             f"{args.warmup})")
  out_dir = args.out or tempfile.mkdtemp(prefix="profile_step_")
  os.makedirs(out_dir, exist_ok=True)
  setup = train_step.Setup(args)
  summary = profile(setup, args.steps, args.warmup, out_dir, args.top)
  title = (f"profile: {summary['device']} | {summary['config']} | {args.steps} traced steps "
           f"({summary['where']})")
  print(trace_summary.markdown(summary, title))
  print(f"\nwall {summary['traced_wall_ms_per_step']:.2f} ms/step back to back while traced, "
        f"{summary['tokens_per_s']:,.0f} tokens/s, MFU {summary['mfu']:.2%} (traced; the "
        f"profiler adds overhead) | compile {summary['compile_s']:.1f} s | trace {summary['xplane']}")
  path = args.json or os.path.join(out_dir, "profile.json")
  with open(path, "w") as f:
    json.dump(summary, f, indent=1)
  print(f"json: {path}")
  return summary


if __name__ == "__main__":
  main()
