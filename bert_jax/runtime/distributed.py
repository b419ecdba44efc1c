"""Multi-process start-up through the JAX runtime (jax.distributed).

One process per host (TPU VM worker), or per GPU (SLURM), or several CPU
processes on one machine (tests, launch/local_multiprocess.sh). A program
adds the flags with `define_flags(flag_values)` and calls
`initialize(flag_values)` first thing after parsing, before any JAX computation
(bert_jax.cli.run_config_program does both):

  explicit flags   --coordinator_address=HOST:PORT --num_processes=N --process_id=I
  SLURM            under srun with several tasks: detected by JAX (one GPU per task)
  Open MPI         under mpirun with several ranks: detected by JAX
  TPU VM pods      BERT_JAX_DISTRIBUTED=auto (launch/tpu_pod.sh sets it): detected by JAX
  one process      nothing to do

Cross-process collectives on CPU go through gloo; accelerators use their own
interconnect (ICI, NCCL).

With several processes, each one watches the others (bert_jax.runtime.peer_processes):
a process that dies without a word is noticed once the coordination service misses its
heartbeats for --distributed_heartbeat_timeout seconds, and every other process then
ends with one line naming it, instead of waiting in a collective for ever.
"""
import os
import re
import socket
from typing import Optional

from absl import flags
from absl import logging
import jax

from bert_jax.runtime import peer_processes
from bert_jax.runtime import stop_signals

_DEFAULT_TIMEOUT = 300
# JAX's default is 100 s; a minute bounds how long the others wait for a lost process, and
# heartbeats come from the runtime's own thread, which a busy host or a long compile does not
# hold up.
_DEFAULT_HEARTBEAT_TIMEOUT = 60


def define_flags(flag_values: flags.FlagValues) -> None:
  """Defines --coordinator_address, --num_processes, --process_id, --distributed_timeout."""
  flags.DEFINE_string("coordinator_address", None,
                      "host:port of process 0, for multi-process runs.", flag_values=flag_values)
  flags.DEFINE_integer("num_processes", None, "Total processes.", flag_values=flag_values)
  flags.DEFINE_integer("process_id", None, "This process's index, 0-based.",
                       flag_values=flag_values)
  flags.DEFINE_integer("distributed_timeout", _DEFAULT_TIMEOUT,
                       "Seconds to wait for every process to join.", flag_values=flag_values)
  flags.DEFINE_integer("distributed_heartbeat_timeout", _DEFAULT_HEARTBEAT_TIMEOUT,
                       "Seconds without a process's heartbeat before the others take it for "
                       "lost and end.", flag_values=flag_values)


def _launcher_with_several_processes() -> bool:
  """An srun step (not the batch script itself) or an mpirun with more than one process."""
  env = os.environ
  slurm = int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_STEP_NODELIST" in env
  mpi = int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1
  return slurm or mpi


def _check_flags(coordinator: str, num_processes: int, process_id: int) -> None:
  if None in (coordinator, num_processes, process_id):
    raise ValueError(
        "--coordinator_address, --num_processes and --process_id go together; got "
        f"coordinator_address={coordinator!r}, num_processes={num_processes}, "
        f"process_id={process_id}")
  if not re.fullmatch(r"[^\s:]+:\d+|\[[0-9a-fA-F:]+\]:\d+", coordinator):
    raise ValueError(f"--coordinator_address {coordinator!r} must be HOST:PORT")
  if num_processes < 1 or not 0 <= process_id < num_processes:
    raise ValueError(f"--process_id {process_id} must be in [0, --num_processes={num_processes})")
  if process_id == 0:
    _check_port_free(coordinator)


def _check_port_free(coordinator: str) -> None:
  """Process 0 hosts the coordination service on the address's port: one already listened on
  (another run's coordinator) is named here, where the runtime would fail on it with a
  segmentation fault."""
  port = int(coordinator.rsplit(":", 1)[1])
  with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as s:
    # As the service binds it: a port of a run that just ended (TIME_WAIT) is free to it.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind(("", port))
    except OSError as e:
      raise ValueError(f"--coordinator_address {coordinator}: port {port} is in use on this "
                       f"host ({e.strerror}; another run's coordinator?): choose another "
                       "port") from None


def initialize(flag_values: Optional[flags.FlagValues] = None) -> None:
  """Starts jax.distributed when flags or the environment ask for several processes.

  Explicit flags win; otherwise a multi-task SLURM step, an mpirun with
  several ranks, or BERT_JAX_DISTRIBUTED=auto (TPU VM pods) let
  jax.distributed detect the cluster itself. A single process needs nothing.
  Safe to call twice.

  Args:
    flag_values: parsed flags holding those of `define_flags` (None: the
      environment only).
  """
  if jax.distributed.is_initialized():
    return
  coordinator = n = i = None
  timeout, heartbeat = _DEFAULT_TIMEOUT, _DEFAULT_HEARTBEAT_TIMEOUT
  if flag_values is not None:
    coordinator, n, i = (flag_values[name].value
                         for name in ("coordinator_address", "num_processes", "process_id"))
    timeout = flag_values["distributed_timeout"].value
    heartbeat = flag_values["distributed_heartbeat_timeout"].value
  if heartbeat < 1:
    raise ValueError(f"--distributed_heartbeat_timeout must be at least 1 s, got {heartbeat}")
  explicit = coordinator or n is not None or i is not None
  if explicit:
    _check_flags(coordinator, n, i)
    # CPU collectives across processes go through gloo (the default in recent
    # JAX; set explicitly so it does not depend on the version).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if explicit or os.environ.get("BERT_JAX_DISTRIBUTED") == "auto" or (
      _launcher_with_several_processes()):
    _keep_going_when_a_process_is_lost()
    jax.distributed.initialize(*((coordinator, n, i) if explicit else ()),
                               initialization_timeout=timeout,
                               heartbeat_timeout_seconds=heartbeat)
    if jax.process_count() > 1:
      peer_processes.Watchdog(heartbeat, stop_signals.ORDERLY_STATUSES)
  _check_platform()
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def _keep_going_when_a_process_is_lost() -> None:
  """The runtime answers which processes are alive instead of aborting this one, and leaves
  SIGTERM to bert_jax.

  Without it the coordination service ends every other process with a fatal error and a
  long stack trace when one is lost; with it, Watchdog ends them with one line naming the
  lost process. (Set before jax.distributed starts; a JAX without the option keeps its
  fatal error.)
  """
  try:
    jax.config.update("jax_enable_recoverability", True)
  except (AttributeError, KeyError):
    pass
  # JAX's own preemption notifier installs a C handler for SIGTERM that takes the signal and
  # tells only JAX's sync point, which bert_jax does not use (stop_signals and
  # peer_processes agree on the stop): until a program installs its handlers, a SIGTERM
  # would be swallowed, not end the process.
  try:
    jax.config.update("jax_enable_preemption_service", False)
  except (AttributeError, KeyError):
    pass


def _check_platform() -> None:
  """Ends the program in one line when the platform JAX was asked for cannot be used here.

  JAX_PLATFORMS=cuda on a host whose GPU (or CUDA plugin) JAX cannot see fails in JAX with
  a RuntimeError, and on the next call with a bare AssertionError.
  """
  try:
    jax.devices()
  except (RuntimeError, AssertionError) as e:
    asked = os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or "the default"
    cause = str(e).strip().splitlines()[0] if str(e).strip() else "no such backend"
    raise SystemExit(f"bert_jax: JAX_PLATFORMS={asked}: JAX cannot use that platform on this "
                     f"machine ({cause}); install its support (pip install -e '.[gpu]' or "
                     "'.[tpu]'), or unset JAX_PLATFORMS") from None
