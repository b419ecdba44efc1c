"""Multi-process start-up through jax.distributed.

`initialize(flag_values)` runs first thing after flag parsing (bert_jax.cli does it). The
cluster comes from explicit flags, else is detected by JAX under a multi-task SLURM step,
mpirun, or BERT_JAX_DISTRIBUTED=auto (TPU VM pods). With several processes each watches the
others (peer_processes.py): one that dies silently is named once its heartbeats time out,
instead of the rest waiting in a collective for ever.
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
  """Names a port already listened on (another run's coordinator) on process 0, where the
  runtime would segfault."""
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
  """Starts jax.distributed when flags or the environment ask for several processes (explicit
  flags win); safe to call twice."""
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
  """The runtime reports lost processes instead of aborting this one (set before jax.distributed
  starts), and leaves SIGTERM to bert_jax: Watchdog then ends with one line, not a fatal
  error's stack trace."""
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
  """Ends the program in one line when the platform JAX was asked for (JAX_PLATFORMS=cuda
  without a visible GPU) cannot be used, instead of JAX's bare AssertionError."""
  problem = platform_problem()
  if problem:
    raise SystemExit(problem)


def platform_problem() -> Optional[str]:
  """The one line saying that JAX cannot use the platform it was asked for, or None when it
  can (a tool that failed for another reason)."""
  try:
    jax.devices()
  except (RuntimeError, AssertionError) as e:
    asked = os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or "the default"
    cause = str(e).strip().splitlines()[0] if str(e).strip() else "no such backend"
    return (f"bert_jax: JAX_PLATFORMS={asked}: JAX cannot use that platform on this machine "
            f"({cause}); install its support (pip install -e '.[gpu]' or '.[tpu]'), or unset "
            "JAX_PLATFORMS")
  return None
