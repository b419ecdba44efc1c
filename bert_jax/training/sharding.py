"""The device mesh, logical->mesh rules presets, and derived shardings.

Mesh axes are ('data', 'fsdp', 'tensor'). Parameters and activations carry
logical axis names (bert_jax.modeling.layers); a preset maps them onto mesh axes.
Shardings of the whole train state are derived from `jax.eval_shape` of the
init function, never written by hand:

  mesh = sharding.mesh_from_config(config.mesh)
  rules = sharding.logical_rules(config.mesh.preset)
  target, shardings = sharding.abstract_state(init_fn, mesh, rules, rng)  # no allocation
  state, _ = sharding.sharded_init(init_fn, mesh, rules, rng)            # or restore into `target`

A checkpoint restores onto any mesh: build `target` on the new mesh (e.g. 4 of
the 8 devices it was saved from) and restore into it; Orbax reshards.
"""
import collections
import contextlib
import time
from typing import Any, Callable, Iterator, Optional, Sequence

from absl import logging
import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

_ACTIVATIONS_DP = (
    ("activation_batch", BATCH_AXES),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", None),
    ("activation_mlp", None),
)

# Logical axis -> mesh axes; a name missing from a table is replicated. Rules
# apply in order: the first rule of a dimension whose mesh axes are still free
# in that array and divide the dimension wins (`resolve_spec`).
PRESETS: dict[str, tuple[tuple[str, Any], ...]] = {
    # Parameters replicated, batch split over every device of 'data' x 'fsdp'.
    "data_parallel": _ACTIVATIONS_DP,
    # ZeRO-3 style: parameters and optimizer state sharded over 'fsdp', mostly
    # along the hidden ('embed') axis, which every large tensor has; gathered
    # per layer in the forward and backward passes, gradients reduce-scattered.
    # An array takes 'fsdp' on the first of these dimensions that divides.
    "fsdp": _ACTIVATIONS_DP + (
        ("embed", "fsdp"),
        ("mlp", "fsdp"),
        ("vocab", "fsdp"),
        ("position", "fsdp"),
        ("heads", "fsdp"),
        ("layers", None),
    ),
    # FSDP over 'fsdp' plus Megatron-style tensor parallelism over 'tensor':
    # attention heads, the MLP's inner axis and the vocabulary split over
    # 'tensor'; the residual stream is replicated over 'tensor'.
    "fsdp_tensor": (
        ("activation_batch", BATCH_AXES),
        ("activation_length", None),
        ("activation_embed", None),
        ("activation_heads", "tensor"),
        ("activation_mlp", "tensor"),
        ("vocab", "tensor"),
        ("embed", "fsdp"),
        ("mlp", "tensor"),
        ("heads", "tensor"),
        ("kv", None),
        ("layers", None),
    ),
}


def logical_rules(preset: str) -> tuple[tuple[str, Any], ...]:
  """The logical->mesh rules of a preset (config key `mesh.preset`)."""
  if preset not in PRESETS:
    raise ValueError(f"mesh.preset {preset!r} is not a sharding preset; known: {sorted(PRESETS)}")
  return PRESETS[preset]


def _mesh_axes_of_rules(rules) -> set[str]:
  used = set()
  for _, axes in rules:
    if axes is None:
      continue
    used.update((axes,) if isinstance(axes, str) else axes)
  return used


def check_mesh_fits_rules(mesh: Mesh, rules) -> None:
  """Fails when a mesh axis of size > 1 is not used by the rules.

  Such an axis would make its devices repeat each other's work (e.g. a
  'tensor' axis of 2 under the 'fsdp' preset).
  """
  used = _mesh_axes_of_rules(rules)
  idle = [a for a in mesh.axis_names if mesh.shape[a] > 1 and a not in used]
  if idle:
    raise ValueError(
        f"mesh {dict(mesh.shape)}: axis {idle} has size > 1 but the sharding preset does not "
        f"use it (rules use {sorted(used)}); set its mesh.shape entry to 1 or pick a preset "
        f"that uses it ({_preset_hint(idle)})")
  param_axes = _mesh_axes_of_rules([r for r in rules if not r[0].startswith("activation_")])
  if mesh.size > 1 and param_axes and all(mesh.shape[a] == 1 for a in param_axes):
    logging.warning("mesh %s: the preset shards parameters over %s, which have size 1, so "
                    "parameters stay replicated; e.g. mesh.shape=(1, -1, 1) for FSDP",
                    dict(mesh.shape), sorted(param_axes))


def _preset_hint(axes: Sequence[str]) -> str:
  good = [name for name, r in PRESETS.items() if set(axes) <= _mesh_axes_of_rules(r)]
  return "presets using it: " + ", ".join(good) if good else "no preset uses it"


def mesh_shape(shape: Sequence[int], num_devices: int, key: str = "mesh.shape") -> tuple[int, ...]:
  """Resolves one -1 in `shape` to the remaining devices; checks the product.

  Args:
    shape: sizes of ('data', 'fsdp', 'tensor'); at most one may be -1.
    num_devices: devices the mesh must cover exactly.
    key: the config key named in error messages.

  Returns:
    The resolved shape.
  """
  try:
    shape = tuple(int(s) for s in shape)
  except (TypeError, ValueError):
    raise ValueError(f"{key} {shape!r} must be {len(MESH_AXES)} integers for {MESH_AXES}") from None
  if len(shape) != len(MESH_AXES):
    raise ValueError(f"{key} {shape} must have {len(MESH_AXES)} entries, one per axis {MESH_AXES}")
  if any(s == 0 or s < -1 for s in shape):
    raise ValueError(f"{key} {shape}: sizes must be positive, or -1 for 'the remaining devices'")
  if shape.count(-1) > 1:
    raise ValueError(f"{key} {shape} may hold at most one -1")
  known = int(np.prod([s for s in shape if s != -1]))
  if -1 in shape:
    if num_devices % known:
      raise ValueError(f"{key} {shape}: {num_devices} devices do not divide by the fixed sizes' "
                       f"product {known}, so -1 cannot be resolved")
    shape = tuple(num_devices // known if s == -1 else s for s in shape)
  if int(np.prod(shape)) != num_devices:
    raise ValueError(f"{key} {shape} has {int(np.prod(shape))} slots for {num_devices} devices; "
                     f"the product must equal the device count (use -1 for one axis)")
  return shape


def make_mesh(shape: Sequence[int], devices: Optional[Sequence[jax.Device]] = None,
              dcn_shape: Optional[Sequence[int]] = None) -> Mesh:
  """A ('data', 'fsdp', 'tensor') mesh with Auto axis types.

  Args:
    shape: the whole mesh's sizes, one of which may be -1 for "the rest".
    devices: defaults to all devices (of every process).
    dcn_shape: for multi-slice TPU: how many slices each axis spans (over the
      data-center network); each slice holds shape / dcn_shape over its fast
      ICI links. None or all ones: a single slice (or not a TPU).

  Returns:
    The Mesh.

  Raises:
    ValueError: bad shapes, or a layout where processes would share batch shards.
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = mesh_shape(shape, len(devices))
  dcn = tuple(int(s) for s in (dcn_shape or (1,) * len(MESH_AXES)))
  if len(dcn) != len(MESH_AXES) or any(d <= 0 for d in dcn):
    raise ValueError(f"mesh.dcn_shape {dcn} must be {len(MESH_AXES)} positive sizes for {MESH_AXES}")
  from jax.experimental import mesh_utils  # pylint: disable=g-import-not-at-top
  if any(d > 1 for d in dcn):
    bad = [a for a, s, d in zip(MESH_AXES, shape, dcn) if s % d]
    if bad:
      raise ValueError(f"mesh.shape {shape} is not divisible by mesh.dcn_shape {dcn} on axes {bad}")
    ici = tuple(s // d for s, d in zip(shape, dcn))
    slices = {getattr(d, "slice_index", 0) for d in devices}
    if len(slices) != int(np.prod(dcn)):
      raise ValueError(f"mesh.dcn_shape {dcn} asks for {int(np.prod(dcn))} slices but the "
                       f"devices come from {len(slices)} slice(s)")
    dev_array = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
  elif devices[0].platform == "tpu":
    # Physical-topology-aware order (ICI rings) on TPU.
    try:
      dev_array = mesh_utils.create_device_mesh(shape, devices)
    except (NotImplementedError, ValueError):
      dev_array = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
  else:
    # CPU/GPU: keep jax.devices() order (process-major), so each process's
    # devices hold consecutive batch shards.
    dev_array = np.asarray(devices).reshape(shape)
  mesh = Mesh(dev_array, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))
  check_batch_layout(mesh)
  return mesh


def mesh_from_config(mesh_config: Any, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """The mesh of a config's `mesh` section (shape, dcn_shape) over `devices`."""
  return make_mesh(mesh_config.shape, devices, mesh_config.dcn_shape)


@contextlib.contextmanager
def mesh_context(mesh: Mesh, rules) -> Iterator[None]:
  """The mesh and the logical rules in scope.

  Trace (first call of) jitted steps under it: the model's activation
  constraints (`layers.constrain`) are no-ops unless both the rules and the
  mesh are in scope, and flax only sees a mesh set by `jax.set_mesh` (the
  legacy `with mesh:` leaves them silently unconstrained).
  """
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    yield


def _is_boxed(x) -> bool:
  return isinstance(x, nn.LogicallyPartitioned)


def _axes_tuple(entry) -> tuple[str, ...]:
  if entry is None:
    return ()
  return (entry,) if isinstance(entry, str) else tuple(entry)


def resolve_spec(names: Sequence[Optional[str]], shape: Sequence[int], mesh: Mesh,
                 rules) -> tuple[P, set[str]]:
  """The mesh spec of an array from its logical axis names, the rules and its shape.

  As flax's `logical_to_mesh_axes` (rules in order; a rule applies when its
  logical name is in the array, that dimension is still open and its mesh axes
  are unused in the array), except that a rule whose mesh axes' size does not
  divide the dimension is skipped, so a later rule can shard another dimension
  instead (e.g. FSDP over 'mlp' when 'embed' does not divide).

  Returns:
    (PartitionSpec without trailing Nones, mesh axes some rule wanted for this
    array but no dimension could take)
  """
  names = tuple(names)
  out: list[Any] = [None] * len(names)
  decided = [n is None for n in names]
  used: set[str] = set()
  missed: set[str] = set()
  for rule_name, mesh_axes in rules:
    if rule_name not in names:
      continue
    pos = names.index(rule_name)
    axes = _axes_tuple(mesh_axes)
    if decided[pos] or used & set(axes):
      continue
    size = int(np.prod([mesh.shape[a] for a in axes]))
    if shape[pos] % size:
      missed.update(axes)
      continue
    decided[pos] = True
    out[pos] = None if not axes else axes[0] if len(axes) == 1 else axes
    used.update(axes)
  while out and out[-1] is None:
    out.pop()
  return P(*out), missed - used


def _specs(abstract_boxed: Any, mesh: Mesh, rules) -> Any:
  check_mesh_fits_rules(mesh, rules)
  missed = []

  def one(path, x):
    if not _is_boxed(x):
      return P()
    spec, lost = resolve_spec(x.names, x.value.shape, mesh, rules)
    nbytes = int(np.prod(x.value.shape)) * np.dtype(x.value.dtype).itemsize
    if lost and nbytes >= 1 << 20:
      missed.append(f"{jax.tree_util.keystr(path)} {tuple(x.value.shape)} {x.names}: not over "
                    f"{sorted(lost)}")
    return spec
  specs = jax.tree_util.tree_map_with_path(one, abstract_boxed, is_leaf=_is_boxed)
  if missed:
    logging.warning("mesh %s: %d array(s) of >= 1 MiB have no dimension divisible by a mesh "
                    "axis their rules ask for, and stay replicated along it: %s%s",
                    dict(mesh.shape), len(missed), "; ".join(missed[:4]),
                    " ..." if len(missed) > 4 else "")
  return specs


def derive_shardings(abstract_boxed: Any, mesh: Mesh, rules) -> Any:
  """NamedShardings for a (boxed, abstract) pytree from its logical axis names.

  Leaves without logical names (step counters, rng keys, optimizer counts) are
  replicated. A dimension that does not divide by its mesh axes' size stays
  replicated along them (logged). Fails if a mesh axis of size > 1 is unused
  by the rules. The result has the structure of the unboxed tree.
  """
  return jax.tree.map(lambda s: NamedSharding(mesh, s), _specs(abstract_boxed, mesh, rules),
                      is_leaf=lambda x: isinstance(x, P))


def partition_specs(abstract_boxed: Any, mesh: Mesh, rules) -> Any:
  """Mesh PartitionSpecs of a boxed pytree (for golden tests and reports)."""
  return _specs(abstract_boxed, mesh, rules)


def replicated_leaves(abstract_boxed: Any, mesh: Mesh, rules,
                      min_bytes: int = 1 << 20) -> list[tuple[str, tuple[int, ...], int]]:
  """Leaves of at least `min_bytes` that no mesh axis shards: (path, shape, bytes)."""
  specs = _specs(abstract_boxed, mesh, rules)
  out = []

  def one(path, x, spec):
    v = x.value if _is_boxed(x) else x
    nbytes = int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
    if nbytes >= min_bytes and not any(_axes_tuple(e) for e in spec):
      out.append((jax.tree_util.keystr(path), tuple(v.shape), nbytes))
  jax.tree_util.tree_map_with_path(one, abstract_boxed, specs, is_leaf=_is_boxed)
  return out


def sharded_init(init_fn: Callable[..., Any], mesh: Mesh, rules, *args) -> tuple[Any, Any]:
  """Runs a boxed init function directly into its derived shardings.

  The full state is never materialised unsharded.

  Args:
    init_fn: returns a pytree whose leaves may be nn.LogicallyPartitioned.
    mesh: the device mesh.
    rules: logical->mesh rules.
    *args: arguments of init_fn (e.g. an rng).

  Returns:
    (unboxed state with sharded arrays, tree of its NamedShardings)
  """
  with mesh_context(mesh, rules):
    abstract = jax.eval_shape(init_fn, *args)
    shardings = derive_shardings(abstract, mesh, rules)
    state = run_init(lambda *a: nn.unbox(init_fn(*a)), *args, shardings=shardings)
  return state, shardings


def run_init(fn: Callable[..., Any], *args, shardings: Any = None) -> Any:
  """Runs a state's init program, jitted (into `shardings` when given).

  On a GPU its threefry draws (one per parameter) lower to JAX's threefry kernel instead of
  XLA's 20 unrolled rounds per draw (jax_threefry_gpu_kernel_lowering, for this program
  only): the same bits, compiled in a fraction of the time. Elsewhere the flag does nothing.
  """
  jitted = jax.jit(fn) if shardings is None else jax.jit(fn, out_shardings=shardings)
  with _threefry_gpu_kernel():
    return jitted(*args)


def _threefry_gpu_kernel():
  try:
    from jax._src import config as jax_config  # pylint: disable=g-import-not-at-top
    return jax_config.threefry_gpu_kernel_lowering(True)
  except Exception:  # pylint: disable=broad-except  # a private flag: if it moved, XLA's lowering
    return contextlib.nullcontext()


def abstract_state(init_fn: Callable[..., Any], mesh: Mesh, rules, *args) -> tuple[Any, Any]:
  """Unboxed ShapeDtypeStructs with shardings (a restore target) and the shardings.

  Nothing is allocated. Restoring a checkpoint into this target reshards it
  onto `mesh`, whatever mesh it was saved from.
  """
  with mesh_context(mesh, rules):
    abstract = jax.eval_shape(init_fn, *args)
    shardings = derive_shardings(abstract, mesh, rules)
  unboxed = nn.unbox(abstract)
  target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        unboxed, shardings)
  return target, shardings


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batch dimension over ('data', 'fsdp'), the rest replicated."""
  return NamedSharding(mesh, P(BATCH_AXES))


def check_batch_layout(mesh: Mesh) -> None:
  """Fails unless every process holds its own, equal share of the batch shards.

  Each host feeds different rows, so two processes must never hold copies of
  the same batch shard (that happens when 'tensor' spans hosts: its devices
  replicate the batch).
  """
  procs = np.vectorize(lambda d: d.process_index)(mesh.devices)  # [data, fsdp, tensor]
  procs = procs.reshape(-1, procs.shape[-1])  # [batch shard, tensor]
  shared = {i: sorted(set(row)) for i, row in enumerate(procs.tolist()) if len(set(row)) > 1}
  if shared:
    raise ValueError(
        f"mesh {dict(mesh.shape)}: batch shard(s) {sorted(shared)[:4]} are held by several "
        f"processes ({list(shared.values())[:2]}), but each host feeds its own rows; keep "
        f"'tensor' within a host (mesh.shape tensor <= devices per host)")


def host_to_global(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Host-local batches -> global jax.Arrays sharded over the batch axes.

  Each process passes its own slice, rows [i * B / n, (i + 1) * B / n) of the
  global batch B for process i of n (per-host batch = global / process count).
  """
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in batch.items()}


def global_batch_spec(batch: dict[str, np.ndarray],
                      mesh: Mesh) -> dict[str, jax.ShapeDtypeStruct]:
  """The global arrays `host_to_global` makes of the shares of the global batch `batch`, as
  shapes and dtypes (no data): for compiling a step ahead of its batch."""
  sharding = batch_sharding(mesh)
  return {k: jax.ShapeDtypeStruct(np.shape(v), jax.dtypes.canonicalize_dtype(np.asarray(v).dtype),
                                  sharding=sharding)
          for k, v in batch.items()}


class DevicePrefetch:
  """Host batches placed on the devices `size` batches ahead of the step that reads them.

  Each `next` places the next host batch (its transfer runs while the devices compute)
  and returns the oldest placed one, so the batch a step reads was on its way to the
  devices a step earlier, and the host's input work overlaps the device work before it.
  `wait_seconds` adds up the time spent waiting for the host pipeline's batches: the
  input's share of a window's time is wait_seconds / window time (`take_wait`).
  """

  def __init__(self, batches: Iterator[dict[str, np.ndarray]], mesh: Mesh, size: int = 2):
    self._batches, self._mesh, self._size = batches, mesh, size
    self._placed = collections.deque()
    self.wait_seconds = 0.0

  def __iter__(self):
    return self

  def _place_one(self) -> bool:
    t = time.perf_counter()
    try:
      batch = next(self._batches)
    except StopIteration:
      return False
    finally:
      self.wait_seconds += time.perf_counter() - t
    self._placed.append(host_to_global(batch, self._mesh))
    return True

  def __next__(self) -> dict[str, jax.Array]:
    while len(self._placed) < self._size and self._place_one():
      pass
    if not self._placed:
      raise StopIteration
    return self._placed.popleft()

  def take_wait(self) -> float:
    """The seconds waited for host batches since the last call."""
    wait, self.wait_seconds = self.wait_seconds, 0.0
    return wait
