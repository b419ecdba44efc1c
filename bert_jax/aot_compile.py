r"""Compiles the real pretraining step for a TPU topology ahead of time, on a CPU host.

  pip install -e '.[tpu]'   # libtpu: the TPU compiler, no TPU needed
  python -m bert_jax.aot_compile --config configs/pretrain.py:base --topology v5e:4x4 \
      [--preset fsdp] [--mesh_shape 1,-1,1] [--batch_size 256 --seq_len 128] [--num_slices 1] \
      [--mfu 0.4] [--hlo_out FILE]

It builds the mesh on compile-only devices of the topology
(`jax.experimental.topologies`), derives the train state's shardings exactly
as bert_jax.pretrain does, lowers and compiles the train step of `pretrain_setup.build`
with donation, and prints per-device memory (arguments, outputs, temporaries)
against the chip's HBM, the compiled FLOPs, and the bytes of the collectives a device runs per
step (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, read from the
optimized HLO with loops counted by their trip counts). From the FLOPs at an assumed MFU
(--mfu) and the collectives over the chip's ICI bandwidth it estimates the step time and the
time to train config.total_steps. Exits 1 when the step does not
fit in HBM, so a config can be checked before a pod is booked. With
objective=distill the teacher (read from teacher_checkpoint on this host) is the
step's frozen input, sharded as bert_jax.pretrain places it: counted in the
arguments, not donated.

--topology takes the TPU runtime's names ('v5e:4x4', 'v4:2x2x4', 'v5p:2x2x2',
'v6e:4x4') or the accelerator types of `gcloud` ('v5litepod-16', 'v5e-16',
'v4-32', 'v5p-8', 'v6e-16'; the v4 / v5p number counts TensorCores, 2 per
chip).
"""
import math
import os
import sys
from typing import Optional, Sequence

# Compile-only use of libtpu on a host without TPUs: no GCE metadata queries,
# no exclusive lock on the TPU runtime, and JAX's own backend stays on CPU.
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags  # noqa: E402
import jax  # noqa: E402

from bert_jax import cli  # noqa: E402
from bert_jax.modeling import compute_policy
from bert_jax.modeling import flops as flops_lib  # noqa: E402
from bert_jax.pretraining import topology_compile  # noqa: E402
from bert_jax.runtime import console  # noqa: E402
from bert_jax.runtime import stop_signals  # noqa: E402
from bert_jax.training import sharding  # noqa: E402


def _ints(text: str, flag: str) -> tuple[int, ...]:
  try:
    return tuple(int(x) for x in text.split(","))
  except ValueError:
    raise ValueError(f"--{flag} {text!r}: expected comma-separated integers, e.g. 1,-1,1") from None


def _parse_flags(argv: Optional[Sequence[str]]):
  """The command line's flags (defined here, on use), parsed and checked."""
  argv = list(sys.argv[1:] if argv is None else argv)
  fv = flags.FlagValues()
  cli.define_config(fv, "Pretraining config, e.g. configs/pretrain.py:base.", argv,
                    "bert_jax.aot_compile", has="objective")
  flags.DEFINE_string("topology", None, "TPU topology, e.g. v5e:4x4, v4:2x2x4, v4-32.",
                      flag_values=fv)
  flags.DEFINE_integer("num_slices", 1, "Slices joined over DCN (multi-slice).", flag_values=fv)
  flags.DEFINE_string("preset", None, "Sharding preset (default: config.mesh.preset).",
                      flag_values=fv)
  flags.DEFINE_string(
      "mesh_shape", None, "data,fsdp,tensor sizes, e.g. 1,-1,1 (default: config.mesh.shape, or "
      "the preset's usual shape when --preset is given).", flag_values=fv)
  flags.DEFINE_string(
      "dcn_shape", None, "Slices per mesh axis, e.g. 2,1,1 (default: num_slices on 'data').",
      flag_values=fv)
  flags.DEFINE_integer("batch_size", None, "Global batch (default: config).", flag_values=fv)
  flags.DEFINE_integer("seq_len", None, "Sequence length (default: config).", flag_values=fv)
  flags.DEFINE_float("mfu", 0.4, "Model FLOPs utilisation assumed for the step-time estimate.",
                     flag_values=fv)
  flags.DEFINE_string("hlo_out", None, "Write the compiled program's optimized HLO text here.",
                      flag_values=fv)
  cli.parse(fv, argv, "bert_jax.aot_compile", __doc__)
  if not 0 < fv.mfu <= 1:
    raise SystemExit(f"bert_jax.aot_compile: error: --mfu {fv.mfu}: expected a fraction in (0, 1]")
  if fv.config is None or not fv.topology:
    raise SystemExit("bert_jax.aot_compile: error: --config and --topology are required "
                     "(--help lists the flags)")
  try:
    topology_compile.parse_topology(fv.topology)
  except ValueError as e:
    raise SystemExit(f"bert_jax.aot_compile: error: {e}") from None
  return fv


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line (argv without the program name; None: sys.argv[1:]); exits 0 if it fits."""
  fv = _parse_flags(argv)
  try:
    config, devices, chip, out = _compile(fv)
  except (ValueError, FileNotFoundError) as e:  # a batch, mesh or config that cannot be
    raise SystemExit(f"bert_jax.aot_compile: error: {e}") from None  # laid out: one line
  _report(fv, config, devices, chip, out)


def _compile(fv: flags.FlagValues) -> tuple:
  """(config, devices, chip, compile_train_step's output) of the flags; exits 1 with the
  compiler's words when the step does not fit."""
  config = fv.config
  devices, chip = topology_compile.topology_devices(fv.topology, fv.num_slices)
  with config.unlocked():
    if fv.preset:
      sharding.logical_rules(fv.preset)  # a clear error for unknown names
      config.mesh.preset = fv.preset
      config.mesh.shape = topology_compile.PRESET_SHAPES[fv.preset]
    if fv.mesh_shape:
      config.mesh.shape = _ints(fv.mesh_shape, "mesh_shape")
    if fv.batch_size:
      config.batch_size = fv.batch_size
    if fv.seq_len:
      config.seq_len = fv.seq_len
  dcn = (_ints(fv.dcn_shape, "dcn_shape") if fv.dcn_shape
         else (fv.num_slices, 1, 1))
  print(f"compiling {config.variant} for {fv.topology} ({len(devices)} devices) ...",
        flush=True)
  # A line within every 9 s while the compiler works (base on v5e:4x4: minutes), and Ctrl-C
  # ends it at once (Python's own handler would wait for the compiler to return).
  try:
    with console.Heartbeat(f"compiling {config.variant} for {fv.topology}",
                           at_start=False), stop_signals.first_compile(
                                 f"{config.variant} for {fv.topology}",
                                 lost="before its report: nothing written; exiting"):
      out = topology_compile.compile_train_step(config, devices, dcn)
  except jax.errors.JaxRuntimeError as e:
    if "RESOURCE_EXHAUSTED" not in str(e):
      raise
    print(f"DOES NOT FIT: the TPU compiler says: {str(e).splitlines()[0]}\n"
          f"  (HBM per chip {chip.hbm_bytes / topology_compile.GiB:.0f} GiB; try "
          f"--config.model.dtype=bfloat16, "
          f"--config.model.remat=full, more devices in 'fsdp', or "
          f"--config.optimizer.grad_accum_steps)")
    sys.exit(1)
  return config, devices, chip, out


def _report(fv: flags.FlagValues, config, devices, chip, out: dict) -> None:
  """Prints the compiled step's memory, FLOPs, collectives and time; exits 0 if it fits."""
  mesh, cfg = out["mesh"], out["model_config"]
  mem = topology_compile.memory_report(out["compiled"])
  flops = topology_compile.compiled_flops(out["compiled"])
  tokens = config.batch_size * config.seq_len
  masked = config.data.max_predictions_per_seq / config.seq_len
  analytic = flops_lib.train_flops_per_token(cfg, config.seq_len, masked) * tokens / len(devices)
  replicated = [x for x in jax.tree.leaves(out["state"])
                if x.sharding.is_fully_replicated and x.size * x.dtype.itemsize >= 1 << 20]

  def gib(x):
    return f"{x / topology_compile.GiB:8.3f} GiB"
  print(f"topology {fv.topology} x {fv.num_slices} slice(s): {len(devices)} devices "
        f"({devices[0].device_kind}), mesh {dict(mesh.shape)}, preset {config.mesh.preset}")
  print(f"model {config.variant}: {out['num_params'] / 1e6:.1f}M params, dtype {cfg.dtype}, "
        f"remat {cfg.remat}, scan {cfg.scan_layers}; global batch {config.batch_size} x seq "
        f"{config.seq_len}, {config.optimizer.grad_accum_steps} microbatch(es)")
  print(f"attention {compute_policy.describe_attention(cfg)}")
  print(f"compiled in {out['compile_seconds']:.1f} s")
  print("per-device memory:")
  for key in ("arguments", "outputs", "aliased", "temporaries", "code", "peak"):
    print(f"  {key:12s}{gib(mem[key])}")
  fits = mem["peak"] <= chip.hbm_bytes
  print(f"  HBM         {gib(chip.hbm_bytes)}  -> peak is {100 * mem['peak'] / chip.hbm_bytes:.1f}% "
        f"of HBM: {'fits' if fits else 'DOES NOT FIT'}")
  hlo = out["hlo_flops_per_device"]
  print(f"per-device FLOPs per step: compiled {flops:.4g}"
        + (" (scan: the layer loop body counted once)" if cfg.scan_layers else "")
        + f"; HLO of the unrolled step {hlo:.4g}; DESIGN.md formula {analytic:.4g} "
        f"(HLO / formula {hlo / analytic:.3f})")
  print(f"train-state arrays of >= 1 MiB replicated on every device: {len(replicated)}")
  hlo_text = out["compiled"].as_text()
  if fv.hlo_out:
    with open(fv.hlo_out, "w", encoding="utf-8") as f:
      f.write(hlo_text)
  _report_collectives_and_time(hlo_text, len(devices), chip, hlo, config.total_steps, fv.mfu)
  sys.exit(0 if fits else 1)


def _report_collectives_and_time(hlo_text: str, num_devices: int, chip, flops_per_device: float,
                                 total_steps: int, mfu: float) -> None:
  """Prints the step's collectives per device and the step and training time they suggest."""
  coll = topology_compile.collective_bytes(hlo_text, num_devices)
  gib = topology_compile.GiB
  print("per-device collectives per step (loops counted by their trip counts):")
  for kind, v in coll["kinds"].items():
    if v["ops"]:
      print(f"  {kind:19s}{v['ops']:6d} ops {v['bytes'] / gib:9.3f} GiB, "
            f"ring send {v['ring_bytes'] / gib:9.3f} GiB")
  print(f"  total              {sum(v['ops'] for v in coll['kinds'].values()):6d} ops "
        f"{coll['bytes'] / gib:9.3f} GiB, ring send {coll['ring_bytes'] / gib:9.3f} GiB"
        + (f" ({coll['unknown_loops']} loop(s) of unknown trip count counted once)"
           if coll["unknown_loops"] else ""))
  if math.isnan(chip.ici_bytes_per_s):
    print(f"step estimate: compute {flops_per_device / (chip.peak_bf16_flops * mfu):.3f} s at "
          f"MFU {mfu:.0%} (no ICI bandwidth known for this chip)")
    return
  est = topology_compile.estimate_step_seconds(flops_per_device, coll["ring_bytes"], chip, mfu)
  print(f"step estimate: compute {est['compute']:.3f} s (unrolled HLO FLOPs at MFU {mfu:.0%} of "
        f"{chip.peak_bf16_flops / 1e12:.0f} TFLOP/s), collectives {est['collectives']:.3f} s "
        f"(ring send at {chip.ici_bytes_per_s / 2e9:.0f} GB/s out of "
        f"{chip.ici_bytes_per_s / 1e9:.0f} GB/s bidirectional ICI): "
        f"{est['overlapped']:.3f} to {est['serial']:.3f} s per step")
  print(f"time to train {total_steps} steps: {total_steps * est['overlapped'] / 3600:.2f} to "
        f"{total_steps * est['serial'] / 3600:.2f} h")


if __name__ == "__main__":
  main()
