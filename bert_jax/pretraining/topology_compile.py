"""Compiling the real pretraining step for a device topology ahead of time, on a CPU host:
the TPU chip table, topology names, compile-only devices, the compile, and its memory, FLOPs and
collective bytes (the library of bert_jax.aot_compile)."""
import collections
import dataclasses
import math
import os
import re
import time
from typing import Any, Optional

import jax
import ml_collections
import numpy as np

from bert_jax.data.sources import registry as source_registry
from bert_jax.modeling import compute_policy
from bert_jax.modeling import layers
from bert_jax.objectives import base as objective_base
from bert_jax.pretraining import setup as pretrain_setup
from bert_jax.training import sharding


GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
  """What the TPU runtime needs to describe a topology, the chip's memory, and the two figures
  a step-time estimate needs."""
  runtime_name: str  # prefix of the runtime's topology name ('v5e' in 'v5e:4x4')
  chip_config: str  # 'default' (one TensorCore per device) or 'megacore'
  hbm_bytes: int
  chips_per_host: tuple[int, int, int]
  cores_per_chip: int  # how gcloud's accelerator-type number counts a chip
  peak_bf16_flops: float  # dense bf16 FLOP/s per chip
  ici_bytes_per_s: float = math.nan  # bidirectional inter-chip bandwidth per chip; NaN: unknown


# Peak bf16 and ICI bandwidth: Google Cloud's TPU v4 / v5e / v5p / v6e system-architecture pages
# ("Peak compute per chip (bf16)", "Bidirectional inter-chip interconnect (ICI) bandwidth (per
# chip)"); left unknown where the page gives no per-chip ICI figure.
CHIPS = {
    "v4": Chip("v4", "megacore", 32 * GiB, (2, 2, 1), 2, 275e12),
    "v5e": Chip("v5e", "default", 16 * GiB, (2, 2, 1), 1, 197e12, 400e9),
    "v5p": Chip("v5", "megacore", 95 * GiB, (2, 2, 1), 2, 459e12, 1200e9),
    "v6e": Chip("v6e", "default", 32 * GiB, (2, 2, 1), 1, 918e12),
}


_ALIASES = {"v5litepod": "v5e", "v5": "v5p", "v6": "v6e"}
# gcloud's accelerator-type prefix of each runtime name ('v5litepod-16' is v5e:4x4).
_GCLOUD_NAMES = {"v4": "v4", "v5": "v5p", "v5e": "v5litepod", "v6e": "v6e"}


# Chip grids of gcloud accelerator types, by chip count.
_GRIDS_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
             256: "16x16"}


_GRIDS_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8",
             256: "4x8x8", 512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16"}


# The usual mesh shape of each preset when only --preset is given.
PRESET_SHAPES = {"data_parallel": (-1, 1, 1), "fsdp": (1, -1, 1), "fsdp_tensor": (1, -1, 2)}


def parse_topology(topology: str) -> tuple[Chip, str]:
  """'v5e:4x4' or 'v5litepod-16' -> (chip, the runtime's topology name)."""
  m = re.fullmatch(r"(v\d+[a-z]*|v5litepod)([:-])([0-9x]+)", topology.strip().lower())
  if not m:
    raise ValueError(f"--topology {topology!r}: expected e.g. v5e:4x4, v4:2x2x4 or v4-32")
  gen, sep, rest = m.groups()
  gen = _ALIASES.get(gen, gen)
  if gen not in CHIPS:
    raise ValueError(f"--topology {topology!r}: unknown TPU generation {gen!r}; known: "
                     f"{sorted(CHIPS)}")
  chip = CHIPS[gen]
  if sep == ":":
    grid = rest
  else:
    if not rest.isdigit() or int(rest) % chip.cores_per_chip:
      raise ValueError(f"--topology {topology!r}: {rest!r} is not a {gen} size")
    chips = int(rest) // chip.cores_per_chip
    grids = _GRIDS_3D if chip.chip_config == "megacore" else _GRIDS_2D
    if chips not in grids:
      raise ValueError(f"--topology {topology!r}: no known {gen} grid with {chips} chips; pass "
                       f"the runtime name instead, e.g. {gen}:{next(iter(grids.values()))}")
    grid = grids[chips]
  dims = [int(d) for d in grid.split("x")]
  want = 3 if chip.chip_config == "megacore" else 2
  if len(dims) != want or min(dims) < 1:
    raise ValueError(f"--topology {topology!r}: {gen} grids have {want} dimensions, got {grid!r}")
  return chip, f"{chip.runtime_name}:{grid}"


def topology_devices(topology: str, num_slices: int = 1) -> tuple[list[Any], Chip]:
  """Compile-only TPU devices of a topology (needs libtpu, not a TPU)."""
  chip, name = parse_topology(topology)
  chips = int(np.prod([int(d) for d in name.split(":")[1].split("x")]))
  # Compile-only use of libtpu on a host without TPUs: no GCE metadata queries, no
  # exclusive lock on the TPU runtime, and the accelerator type and worker names that a TPU
  # VM's environment would give (without them libtpu prints its failed probes to stderr).
  # Set before libtpu loads; a TPU VM's own values are kept.
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  os.environ.setdefault("TPU_ACCELERATOR_TYPE",
                        f"{_GCLOUD_NAMES[chip.runtime_name]}-{chips * chip.cores_per_chip}")
  try:
    import libtpu  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise RuntimeError("ahead-of-time TPU compilation needs libtpu: pip install -e '.[tpu]' "
                       "(or pip install 'jax[tpu]')") from None
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  dims = [int(d) for d in name.split(":")[1].split("x")] + [1]
  bounds = tuple(min(b, d) for b, d in zip(chip.chips_per_host, dims))
  if int(np.prod(dims)) <= 8 and chip.chip_config == "default":
    bounds = tuple(dims[:3])  # v5e / v6e hosts carry up to 8 chips: one host
  desc = topologies.get_topology_desc(
      platform="tpu", topology_name=name, chip_config_name=chip.chip_config,
      chips_per_host_bounds=bounds, num_slices=num_slices)
  return list(desc.devices), chip


def for_target(config: ml_collections.ConfigDict, platform: str) -> ml_collections.ConfigDict:
  """A copy of `config` whose model 'auto' choices are the target's, not this host's.

  Compiled here for a TPU topology, `model.dtype='auto'` would otherwise be the CPU host's
  float32, `model.prng_impl='auto'` its threefry, `model.vocab_pad_multiple=0` its unpadded
  decoder and `model.attention_impl='auto'` the host's XLA attention where a TPU runs splash
  attention: the program, its memory and its FLOPs would not be the ones the TPU runs.
  """
  config = config.copy_and_resolve_references()
  m = config.model
  m.dtype = compute_policy.compute_dtype(m.dtype, platform)
  m.prng_impl = compute_policy.prng_impl(m, backend=platform)
  if "vocab_pad_multiple" in m:
    m.vocab_pad_multiple = compute_policy.vocab_pad_multiple(m, platform)
  if m.attention_impl == "auto" and layers.attention_kernel(
      "auto", m.attention_dropout_rate > 0, m.dtype, False, 64, backend=platform) == "splash":
    # Where it applies; XLA's attention elsewhere (DeBERTa's biased scores too), as 'auto' there.
    m.attention_impl = "splash"
  return config


def compile_train_step(config: ml_collections.ConfigDict, devices: list[Any],
                       dcn_shape: Optional[tuple[int, ...]] = None,
                       vocab_size: Optional[int] = None) -> dict[str, Any]:
  """Lowers and compiles the pretraining step of `config` for `devices`.

  Args:
    config: a configs/pretrain.py config (batch_size, seq_len, mesh, model, ...).
    devices: the (compile-only) devices of the target.
    dcn_shape: slices per mesh axis for multi-slice targets.
    vocab_size: defaults to the size of the config's tokenizer vocabulary.

  Returns:
    A dict with the compiled executable, the mesh, the model config, the
    number of parameters and the compile time.
  """
  config = for_target(config, devices[0].platform)
  pad_id = 0
  if vocab_size is None:
    from bert_jax.data.tokenizers import tokenizer  # pylint: disable=g-import-not-at-top
    tok = tokenizer.load_tokenizer(config.data)
    vocab_size, pad_id = tok.vocab_size, tok.pad_id
  mesh = sharding.make_mesh(config.mesh.shape, devices, dcn_shape)
  rules = sharding.logical_rules(config.mesh.preset)
  pretrain_setup.check_config(config, mesh, source_registry.get(config.data.source))
  setup = pretrain_setup.build(config, vocab_size, pad_id=pad_id)
  target, shardings = sharding.abstract_state(setup.init_fn, mesh, rules, jax.random.PRNGKey(0))
  batch_shard = sharding.batch_sharding(mesh)
  batch = pretrain_setup.abstract_batch(config, batch_shard)
  frozen, frozen_shardings = abstract_frozen(setup, mesh, rules)
  step = jax.jit(
      setup.train_step(config.optimizer.grad_accum_steps),
      in_shardings=(shardings, batch_shard) + frozen_shardings, out_shardings=(shardings, None),
      donate_argnums=(0,))
  start = time.time()
  with sharding.mesh_context(mesh, rules):
    lowered = step.lower(target, batch, *frozen)
    compiled = lowered.compile()
  compile_seconds = time.time() - start
  num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(target.params))
  return dict(compiled=compiled, mesh=mesh, model_config=setup.model_config, num_params=num_params,
              compile_seconds=compile_seconds, state=target,
              hlo_flops_per_device=unrolled_hlo_flops(config, vocab_size, pad_id) / len(devices))


def unrolled_hlo_flops(config: ml_collections.ConfigDict, vocab_size: int,
                       pad_id: int = 0) -> float:
  """FLOPs of one global step, from XLA's cost analysis of the unrolled program.

  Lowered (not compiled) for one CPU device: the count does not depend on the
  target, and unlike the compiled executable's it sees every layer and every
  microbatch (XLA counts a loop's body once: scanned layers, gradient accumulation).
  """
  config = config.copy_and_resolve_references()
  config.model.scan_layers = False
  # One batch instead of a loop of microbatches: the same FLOPs, and XLA counts a loop's body once.
  config.optimizer.grad_accum_steps = 1
  if config.model.attention_impl == "splash":  # a TPU kernel: XLA's attention, the same FLOPs
    config.model.attention_impl = "xla"
  cpu = jax.devices("cpu")[:1]
  mesh = sharding.make_mesh((1, 1, 1), cpu)
  rules = sharding.logical_rules("data_parallel")
  setup = pretrain_setup.build(config, vocab_size, pad_id=pad_id)
  target, _ = sharding.abstract_state(setup.init_fn, mesh, rules, jax.random.PRNGKey(0))
  batch = pretrain_setup.abstract_batch(config, sharding.batch_sharding(mesh))
  step = setup.train_step(config.optimizer.grad_accum_steps)
  frozen, _ = abstract_frozen(setup, mesh, rules)
  with sharding.mesh_context(mesh, rules):
    return _flops(jax.jit(step).lower(target, batch, *frozen).cost_analysis())


def abstract_frozen(setup: objective_base.Pretraining, mesh, rules) -> tuple[tuple, tuple]:
  """The step's frozen inputs (distillation: the teacher's params), as ShapeDtypeStructs.

  Sharded as bert_jax.pretrain places them (the same model's params' logical axes), and
  () for objectives without any. The teacher is an input of the step, not in its state.
  """
  if setup.frozen_init is None:
    return (), ()
  target, shardings = sharding.abstract_state(setup.frozen_init, mesh, rules,
                                              jax.random.PRNGKey(0))
  return (target,), (shardings,)


def _flops(cost) -> float:
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  return float((cost or {}).get("flops", float("nan")))


def memory_report(compiled) -> dict[str, int]:
  """Per-device bytes: arguments, outputs, aliased (donated), temporaries, code, and the peak.

  The peak is arguments + outputs - aliased + temporaries + code: donated
  state buffers are reused for the new state.
  """
  m = compiled.memory_analysis()
  out = dict(arguments=m.argument_size_in_bytes, outputs=m.output_size_in_bytes,
             aliased=m.alias_size_in_bytes, temporaries=m.temp_size_in_bytes,
             code=m.generated_code_size_in_bytes)
  out["peak"] = (out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"]
                 + out["code"])
  return out


def compiled_flops(compiled) -> float:
  """FLOPs of one step on one device, as XLA's cost analysis of the executable counts them."""
  return _flops(compiled.cost_analysis())


# Collective ops of XLA's HLO, counted by collective_bytes ('-start' forms as their op; '-done'
# only waits).
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1,
                "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
                "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
                "c128": 16, "s4": 0.5, "u4": 0.5}
_ARRAY = re.compile(r"\b(" + "|".join(sorted(_DTYPE_BYTES, key=len, reverse=True))
                    + r")\[([0-9,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?:^|[\s)}])([a-z][a-z0-9\-]*)\(")
_CALLED = re.compile(r"\b(calls|to_apply|body|condition|branch_computations|true_computation|"
                     r"false_computation)=(\{[^}]*\}|%?[\w.\-]+)")


def _arrays(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
  """The (dtype, dims) of every array in an HLO type (a tuple's in order)."""
  return [(d, tuple(int(x) for x in dims.split(",") if x))
          for d, dims in _ARRAY.findall(type_text)]


def _nbytes(arrays) -> float:
  return sum(_DTYPE_BYTES[d] * math.prod(dims) for d, dims in arrays)


def _group_size(attrs: str, num_devices: int) -> int:
  """Devices in each replica group: `{{0,1},{2,3}}`, iota `[2,2]<=[4]`, or
  `mesh['axis_0'=4,'axis_1'=2] {'axis_0'}` (the product of the named axes); all when empty."""
  m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
  if m:
    sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
    return math.prod(int(sizes[a]) for a in re.findall(r"'([^']+)'", m.group(2)))
  m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
  if m:
    return int(m.group(2))
  m = re.search(r"replica_groups=\{\{([^}]*)\}", attrs)
  if m:
    return len(m.group(1).split(","))
  return num_devices


def _ring_factor(kind: str, n: int) -> float:
  """Bytes a device sends per byte of the collective's full buffer, in a ring over n devices."""
  if kind == "collective-permute":
    return 1.0
  if n <= 1:
    return 0.0
  return (2.0 if kind == "all-reduce" else 1.0) * (n - 1) / n


def _split_computations(hlo_text: str) -> tuple[dict[str, list[str]], Optional[str]]:
  """HLO text -> {computation name: its instruction lines}, and the ENTRY computation's name."""
  comps, entry, name = {}, None, None
  for line in hlo_text.splitlines():
    if name is None:
      m = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
      if m and not line.startswith((" ", "\t")):
        name = m.group(2)
        comps[name] = []
        if m.group(1):
          entry = name
    elif line.startswith("}"):
      name = None
    else:
      comps[name].append(line)
  return comps, entry


def _trip_count(line: str, condition: list[str]) -> Optional[int]:
  """A while loop's trip count: XLA's known_trip_count, else a JAX loop's condition
  `counter < constant` (JAX's scans and fori_loops count from 0 by 1); None if neither."""
  m = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
  if m:
    return int(m.group(1))
  constants = {}
  for text in condition:
    m = _INSTRUCTION.match(text)
    if m:
      c = re.search(r"\bconstant\((-?\d+)\)", m.group(2))
      if c:
        constants[m.group(1)] = int(c.group(1))
  for text in condition:
    if "ROOT" in text and "compare(" in text and "direction=LT" in text:
      operands = re.findall(r"%([\w.\-]+)", text.split("compare(", 1)[1].split(")", 1)[0])
      if len(operands) == 2 and operands[1] in constants:
        return constants[operands[1]]
  return None


def collective_bytes(hlo_text: str, num_devices: int) -> dict[str, Any]:
  """The collectives one device runs in a step, from the optimized HLO (`compiled.as_text()`).

  Each collective op counts once per execution: an op in a while loop's body as many times as
  the loop runs (scanned layers, gradient accumulation), an op in a fusion or call as often as
  its caller; of a conditional's branches the one with the most bytes (the NaN guard's update).

  Args:
    hlo_text: the compiled program's HLO text.
    num_devices: devices of the program (the group of a collective without replica groups).

  Returns:
    {'kinds': {kind: {'ops', 'bytes', 'ring_bytes'}}, 'bytes', 'ring_bytes', 'unknown_loops'}:
    per kind the executions, the bytes of their buffers (the larger of operands and result:
    an all-gather's gathered result, a reduce-scatter's full operand), and the bytes a device
    sends in a ring algorithm (all-reduce 2 (n-1)/n of the buffer, all-gather, reduce-scatter
    and all-to-all (n-1)/n, collective-permute all of it); totals over kinds; and how many while
    loops had no trip count that could be read (counted once).
  """
  comps, entry = _split_computations(hlo_text)
  unknown_loops = [0]
  memo: dict[str, collections.Counter] = {}

  def total(name: str, stack: tuple = ()) -> collections.Counter:
    if name in memo:
      return memo[name]
    if name not in comps or name in stack:
      return collections.Counter()
    lines, sizes, out = comps[name], {}, collections.Counter()
    for line in lines:
      m = _INSTRUCTION.match(line)
      if not m:
        continue
      inst, rest = m.groups()
      op = _OPCODE.search(rest)
      if not op:
        continue
      opcode, type_text = op.group(1), rest[:op.start(1)]
      sizes[inst] = _arrays(type_text)
      called = {k: re.findall(r"%?([\w.\-]+)", v) for k, v in _CALLED.findall(rest)}
      kind = opcode[:-len("-start")] if opcode.endswith("-start") else opcode
      if kind in COLLECTIVES:
        args = rest[op.end():]
        depth, end = 1, 0
        for end, ch in enumerate(args):
          depth += (ch == "(") - (ch == ")")
          if depth == 0:
            break
        operands = [a for o in re.findall(r"%([\w.\-]+)", args[:end]) for a in sizes.get(o, [])]
        result = [a for a in sizes[inst] if a[1]]  # without async contexts (scalars)
        if opcode.endswith("-start") and result[:len(operands)] == operands and len(result) > len(operands):
          result = result[len(operands):]  # ((operands), (results)) of an async start
        nbytes = max(_nbytes(operands), _nbytes(result))
        n = _group_size(rest, num_devices)
        out[kind + ":ops"] += 1
        out[kind + ":bytes"] += nbytes
        out[kind + ":ring_bytes"] += nbytes * _ring_factor(kind, n)
      if opcode == "while" and "body" in called:
        trips = _trip_count(rest, comps.get(called.get("condition", [""])[0], []))
        if trips is None:
          unknown_loops[0] += 1
          trips = 1
        for _ in range(trips):
          out.update(total(called["body"][0], stack + (name,)))
      elif opcode == "conditional":
        branches = [total(b, stack + (name,)) for k, v in called.items() for b in v
                    if k in ("branch_computations", "true_computation", "false_computation")]
        if branches:
          out.update(max(branches, key=lambda c: sum(v for k, v in c.items()
                                                     if k.endswith(":ring_bytes"))))
      elif opcode not in ("async-done", "async-update"):
        for key in ("calls", "to_apply"):
          for callee in called.get(key, []):
            out.update(total(callee, stack + (name,)))
    memo[name] = out
    return out

  counts = total(entry) if entry else collections.Counter()
  kinds = {k: dict(ops=int(counts[k + ":ops"]), bytes=counts[k + ":bytes"],
                   ring_bytes=counts[k + ":ring_bytes"]) for k in COLLECTIVES}
  return dict(kinds=kinds, bytes=sum(v["bytes"] for v in kinds.values()),
              ring_bytes=sum(v["ring_bytes"] for v in kinds.values()),
              unknown_loops=unknown_loops[0])


def estimate_step_seconds(flops_per_device: float, ring_bytes: float, chip: Chip,
                          mfu: float) -> dict[str, float]:
  """A step's time from its FLOPs and collective bytes per device, for a chip at `mfu`.

  compute = FLOPs / (peak bf16 x mfu); collectives = ring bytes / half the bidirectional ICI
  bandwidth (a device's outbound rate with every link busy: a lower bound). The step takes
  between max(compute, collectives) (collectives hidden behind compute) and their sum.
  """
  compute = flops_per_device / (chip.peak_bf16_flops * mfu)
  comm = ring_bytes / (chip.ici_bytes_per_s / 2)
  return dict(compute=compute, collectives=comm, overlapped=max(compute, comm),
              serial=compute + comm)
