"""The command lines of the bert_jax programs: absl flags, defined on use.

  def main(argv=None):
    flag_values = flags.FlagValues()
    flags.DEFINE_string("checkpoint", None, "...", flag_values=flag_values, required=True)
    texts = cli.parse(flag_values, argv, "bert_jax.fill_mask", __doc__, positional=("TEXT...",))

Every program uses absl flags, because ml_collections' config_flags (`--config
configs/X.py:arg --config.a.b=v`) is built on them, as in big_vision, t5x and
MaxText. Each program defines its flags inside its entry function on a
FlagValues of its own, never on the global FLAGS at import time: program
modules import each other, and tests call `main(argv)` many times in one
process. Bad usage (an unknown or malformed flag, a missing required flag, the
wrong number of positional arguments) ends the program with one line, a
SystemExit whose message names the problem; `--help` prints the module
docstring and the flags.

Every program imports this module first: bert_jax.runtime.startup (imported here) quiets
the start-up before TensorFlow or JAX load.
"""
import contextlib
import os
import sys
import threading
import time
from typing import Any, Callable, NoReturn, Optional, Sequence

from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from bert_jax.runtime import distributed
from bert_jax.runtime import host_memory
from bert_jax.runtime import peer_processes
from bert_jax.runtime import startup  # first: quiet start-up  # pylint: disable=g-bad-import-order
from bert_jax.runtime import text_files

_HELP = ("-h", "-help", "--help", "--helpshort", "--helpfull", "-?")


def usage_error(message: str) -> NoReturn:
  """Bad usage (an unknown flag, a missing one, wrong positional arguments): `message`, one
  line on stderr, then exit status 2, as argparse-style tools and the docs' exit status table
  have it (also for programs that call their main without exit_program)."""
  print(message, file=sys.stderr, flush=True)
  raise SystemExit(2)


def absolute(path: str) -> str:
  """`path` made absolute against the working directory, once, where a program starts.

  Orbax refuses relative paths (and a relative path would change meaning if a
  library changed directory), so every program makes its paths absolute on
  entry. A URL (gs://...) and '' (not given) are returned as they are; '~' is
  expanded.
  """
  if not path or "://" in path:
    return path
  return os.path.abspath(os.path.expanduser(path))


# Config keys that hold paths (made absolute by absolute_config_paths when present); the
# comma-separated globs of data.files each. Task files (train_file, ...) are relative to
# data_dir and stay as given.
_CONFIG_PATHS = ("init_checkpoint", "teacher_checkpoint", "data_dir", "tfds_data_dir",
                 "data.vocab_file", "data.spm_model", "data.prepared_dir", "data.tfds_data_dir")


def absolute_config_paths(config: ml_collections.ConfigDict) -> list[str]:
  """Makes the path keys of a program's config absolute (see `absolute`), in place; returns
  the paths given (data.files: each glob)."""
  given = []
  for key in _CONFIG_PATHS + ("data.files",):
    section, _, name = key.rpartition(".")
    owner = config.get(section) if section else config
    value = owner.get(name) if owner is not None else None
    if not isinstance(value, str):
      continue
    if key == "data.files":  # comma-separated globs
      owner[name] = ",".join(absolute(g.strip()) for g in value.split(",")) if value else value
      given += owner[name].split(",") if value else []
    else:
      owner[name] = absolute(value)
      given += [owner[name]] if value else []
  return given


def _no_credentials_hint() -> str:
  if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
    return f"GOOGLE_APPLICATION_CREDENTIALS={os.environ['GOOGLE_APPLICATION_CREDENTIALS']}"
  adc = os.path.expanduser("~/.config/gcloud/application_default_credentials.json")
  if os.path.exists(adc):
    return f"credentials {adc}"
  return ("no Google Cloud credentials found: set GOOGLE_APPLICATION_CREDENTIALS or run "
          "`gcloud auth application-default login` (on GCP VMs: the metadata server)")


def check_remote_paths(paths: Sequence[str], prog: str) -> None:
  """Probes each gs:// (any URL) path once, at the start.

  Without credentials or network, a remote workdir, checkpoint or corpus would
  fail deep in TensorFlow after the data was read; probed first, it is one
  line naming the path, the cause and the credentials found.

  Raises:
    SystemExit: one line, when a remote path cannot be reached.
  """
  for path in paths:
    if "://" not in path:
      continue
    from etils import epath  # pylint: disable=g-import-not-at-top
    failure = None
    with startup.quiet_native_stderr():  # TensorFlow's C++ auth warnings: the line below says it
      try:
        epath.Path(path.split("*")[0].rstrip("/") or path).exists()
      except Exception as e:  # pylint: disable=broad-except  # TF, gcsfs and auth errors alike
        failure = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    if failure:
      raise SystemExit(f"{prog}: error: cannot reach {path}: {failure} "
                       f"({_no_credentials_hint()})")


def parse(flag_values: flags.FlagValues, argv: Optional[Sequence[str]], prog: str, doc: str,
          positional: Sequence[str] = (), paths: Sequence[str] = (),
          input_hint: str = "", stdin: Sequence[str] = ()) -> list[str]:
  """Parses a command line into `flag_values`; returns its positional arguments.

  Args:
    flag_values: the program's own flags, already defined.
    argv: the arguments without the program name (None: sys.argv[1:]).
    prog: the program's module, e.g. 'bert_jax.embed' (for messages).
    doc: the module docstring, printed by --help above the flags.
    positional: names of the positional arguments, in order; a last name
      ending in '...' takes one or more, '[NAME...]' zero or more.
    paths: the flags that hold paths (a string or a list of them): their values
      are made absolute (`absolute`), except '-' in a flag named in `stdin`.
    stdin: the flags of `paths` whose '-' names standard input (text_files.read_bytes).
    input_hint: where a program without positional arguments reads its input, said when
      some are given (e.g. 'it reads texts from standard input').

  Returns:
    The positional arguments (flags may come before, between or after them).

  Raises:
    SystemExit: --help (status 0), or bad usage (one line naming the problem).
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  if "verbosity" not in flag_values:  # every program takes it (see the module docstring)
    add_verbosity_flag(flag_values)
  usage = f"usage: python -m {prog} [flags] {' '.join(positional)}".rstrip()
  flag_args = argv[:argv.index("--")] if "--" in argv else argv
  if any(a in _HELP for a in flag_args):
    print(f"{doc.strip()}\n\n{usage}\n\nflags:\n{flag_values.get_help()}")
    raise SystemExit(0)
  try:
    args = flag_values([prog] + argv)[1:]
  except flags.Error as e:
    message = "; ".join(str(e).splitlines())  # several failed validators: one line
    usage_error(f"{prog}: {message} ({usage}; --help lists the flags)")
  except (AttributeError, KeyError) as e:  # config_flags on --config.a.b=v naming no field
    field = str(e).strip("\"'")
    usage_error(f"{prog}: a --config.* override names no config field: {field}")
  variadic = bool(positional) and positional[-1].rstrip("]").endswith("...")
  required = len(positional) - (bool(positional) and positional[-1].startswith("["))
  if len(args) < required or (len(args) > len(positional) and not variadic):
    got = f"got {len(args)}" + (f": {args}" if args else "")
    usage_error(f"{prog}: expected positional arguments {' '.join(positional) or '(none)'}, "
                f"{got}{f'; {input_hint}' if input_hint else ''} ({usage})")
  given = []
  for name in paths:
    value = flag_values[name].value
    if name in stdin and value == text_files.STDIN:
      continue
    if isinstance(value, str):
      flag_values[name].value = absolute(value)
      given.append(flag_values[name].value)
    elif value:
      flag_values[name].value = [absolute(v) for v in value]
      given += flag_values[name].value
  check_remote_paths(given, prog)
  return args


def _config_spec(argv: Sequence[str]) -> Optional[str]:
  """The FILE.py[:ARG] of `--config FILE` or `--config=FILE` in argv, or None."""
  for i, arg in enumerate(argv):
    if arg == "--":
      break
    if arg.startswith("--config="):
      return arg[len("--config="):]
    if arg == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def define_config(flag_values: flags.FlagValues, help_string: str,
                  argv: Sequence[str], prog: str = "bert_jax",
                  has: str = "") -> flags.FlagHolder:
  """Defines --config (a configs/X.py:ARG file, overrides as --config.a.b=v, locked).

  The config is checked first: `--config.help` prints every key with its
  default and comment (bert_jax.config_help) and exits; a bad config argument
  or a --config.KEY override naming no key (at any depth) ends the program
  with one line naming it and the closest valid key.

  Args:
    flag_values: the program's flags.
    help_string: what the config is, e.g. 'configs/pretrain.py:VARIANT'.
    argv: the arguments the program will parse (config_flags reads the
      --config.* overrides from them when defining the flag).
    prog: the program's module, for messages.
    has: a top-level key every config of the program has ('objective': pretraining, 'task':
      fine-tuning): a config without it is another program's, refused in one line.
  """
  from bert_jax import config_help  # pylint: disable=g-import-not-at-top
  spec = _config_spec(argv)
  if spec is not None:
    try:
      loaded = config_help.load(spec)
    except (FileNotFoundError, ValueError) as e:
      raise SystemExit(f"{prog}: error: --config {spec}: {e}") from None
    if has and has not in loaded.config:
      raise SystemExit(f"{prog}: error: --config {spec}: not a config of this program (it has no "
                       f"'{has}' key); {prog} takes {help_string.rstrip('.')}")
    if "--config.help" in argv:
      print(config_help.describe(loaded))
      raise SystemExit(0)
    problem = config_help.unknown_override(loaded.config, argv)
    if problem:
      raise SystemExit(f"{prog}: error: {problem}")
  return config_flags.DEFINE_config_file("config", None, help_string, flag_values=flag_values,
                                         lock_config=True, sys_argv=["prog"] + list(argv))


def check_config_reads(config: ml_collections.ConfigDict, argv: Sequence[str], prog: str) -> None:
  """Ends the program in one line when argv sets a config key the run will not read.

  The rules are the config file's READ_ONLY_WHEN (bert_jax.configuration.reads); a
  controlling key chosen for an explicit key is set in `config` and printed.
  """
  from bert_jax import config_help  # pylint: disable=g-import-not-at-top
  from bert_jax.configuration import reads as config_reads  # pylint: disable=g-import-not-at-top
  spec = _config_spec(argv)
  path, _, arg = spec.partition(":")
  module = config_help.load_module(path)
  rules = getattr(module, "READ_ONLY_WHEN", None)
  if not rules:
    return
  try:
    with config.unlocked():
      notes = config_reads.resolve(config, config_reads.explicit_keys(argv), rules,
                                   defaults=module.get_config(arg or None))
  except ValueError as e:
    raise SystemExit(f"{prog}: error: {e}") from None
  for note in notes:
    print(f"{prog}: {note}", flush=True)


def run_config_program(run: Callable[[ml_collections.ConfigDict, str], Any],
                       argv: Optional[Sequence[str]], prog: str, doc: str, config_help: str,
                       workdir_help: str, has: str) -> Any:
  """Runs a `--config FILE:ARG --workdir DIR` program (pretraining, fine-tuning).

  Besides --config and --workdir, the program takes absl's --verbosity and
  the multi-process flags of bert_jax.runtime.distributed, and joins the other
  processes (`distributed.initialize`) before `run` starts.

  Args:
    run: fn(config, workdir), the program.
    argv: the arguments without the program name (None: sys.argv[1:]).
    prog: the program's module, e.g. 'bert_jax.pretrain'.
    doc: its module docstring (for --help).
    config_help: what --config takes.
    workdir_help: what --workdir is.
    has: a top-level key every config of the program has (define_config).

  Returns:
    What `run` returns.
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  flag_values = flags.FlagValues()
  config = define_config(flag_values, config_help, argv, prog, has)
  workdir = flags.DEFINE_string("workdir", None, workdir_help, flag_values=flag_values)
  verbosity = add_verbosity_flag(flag_values)
  distributed.define_flags(flag_values)
  parse(flag_values, argv, prog, doc)
  if config.value is None or not workdir.value:
    usage_error(f"{prog}: --config and --workdir are required (--help lists the flags)")
  check_config_reads(config.value, argv, prog)
  workdir_path = absolute(workdir.value)
  check_remote_paths([workdir_path] + absolute_config_paths(config.value), prog)
  logging.use_absl_handler()
  if not verbosity.present:
    logging.set_verbosity(logging.WARNING)  # progress is printed; --verbosity=0 for INFO logs
  try:
    distributed.initialize(flag_values)
  except ValueError as e:  # the multi-process flags, or the coordinator's port in use
    raise SystemExit(f"{prog}: error: {e}") from None
  # jax and orbax come with these: imported here, not by every tool that uses this module.
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import workdirs  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import write_errors  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.checkpoints import run_checkpoints as checkpoint
  from bert_jax.training import train_core  # pylint: disable=g-import-not-at-top
  writer = jax.process_index() == 0
  try:
    with workdirs.hold(workdir_path) if writer else contextlib.nullcontext():
      with host_memory.tuned_gc():
        return run(config.value, workdir_path)
  except (checkpoint.ResumeMismatchError, checkpoint.CheckpointSaveError,
          workdirs.WorkdirInUseError, train_core.NonFiniteLossError,
          write_errors.OutputWriteError, checkpoint.UnreadableCheckpointsError) as e:
    # The user's mistake or a diverged run: one line, no traceback.
    raise SystemExit(f"{prog}: {e}") from None
  except (ValueError, FileNotFoundError, FileExistsError) as e:
    # Bad config or input (every check names the key, file or record): one line; the
    # traceback with --verbosity=1.
    logging.debug("traceback of the error below", exc_info=True)
    raise SystemExit(f"{prog}: error: {e}") from None


def add_verbosity_flag(flag_values: flags.FlagValues) -> flags.Flag:
  """Adds absl logging's --verbosity (as app.run offers it; 0 for INFO logs) and returns it."""
  flag = flags.FLAGS["verbosity"]  # setting its value sets absl logging's level
  flag.present = 0  # given on this command line, not on an earlier one in this process
  flag_values["verbosity"] = flag
  flag_values.register_flag_by_module("absl.logging", flag)
  return flag


def check_output_file(path: str, flag: str = "--output") -> None:
  """Refuses, before any work, an output file path whose folder does not exist or that is a
  folder (FileNotFoundError / IsADirectoryError: the tool's one error line)."""
  if "://" in path:  # a bucket's folders exist once a file is in them
    return
  folder = os.path.dirname(path) or "."
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"{flag} directory does not exist: {folder}")
  if os.path.isdir(path):
    raise IsADirectoryError(f"{flag} {path} is a directory; give the path of a file")


def run_tool(main: Callable[[], Optional[int]], prog: str) -> None:
  """Runs a tool's main; bad input ends it with one '`prog`: error: ...' line, status 2.

  Bad input is a missing file, an output that exists, or a bad value
  (FileNotFoundError, FileExistsError, ValueError): no traceback for those. A platform JAX
  cannot use (JAX_PLATFORMS=cuda without a GPU) is the training programs' one line, status 1.
  """
  def checked() -> Optional[int]:
    try:
      return main()
    except (FileNotFoundError, FileExistsError, IsADirectoryError, ValueError) as e:
      print(f"{prog}: error: {e}", file=sys.stderr)
      return 2
    except (RuntimeError, AssertionError):
      problem = distributed.platform_problem()
      if problem is None:
        raise
      print(problem, file=sys.stderr)
      return 1
  exit_program(checked)


# Seconds a failing program waits for its background threads before it exits without them.
THREAD_GRACE_SECONDS = 5.0


def exit_program(main: Callable[[], Any]) -> None:
  """Runs `main` as the process and exits with its status; a failing program never hangs.

  A program that fails (a non-zero status, or SystemExit's message: printed, status 1)
  gives its non-daemon threads THREAD_GRACE_SECONDS to end, then exits without waiting
  for the rest: a failed asynchronous checkpoint save leaves Orbax's signalling threads
  waiting for a signal that never comes, and the interpreter would wait for them for ever.
  """
  before = set(threading.enumerate())  # a caller's own threads are not the program's
  try:
    status = main()
  except SystemExit as e:
    status = e.code
  except BaseException:
    peer_processes.settle_before_failing()
    peer_processes.record_exit(1)
    raise
  if status is None:
    status = 0
  elif not isinstance(status, int):
    peer_processes.settle_before_failing()
    print(status, file=sys.stderr)
    status = 1
  # The other processes of a multi-process run tell a finished process from a lost one.
  peer_processes.record_exit(status)
  if status:
    sys.stdout.flush()
    sys.stderr.flush()
    deadline = time.monotonic() + THREAD_GRACE_SECONDS
    for thread in _foreground_threads(before):
      try:  # (Orbax's threads raise TimeoutError from a join that times out)
        thread.join(max(0.0, deadline - time.monotonic()))
      except Exception:  # pylint: disable=broad-except
        pass
    if _foreground_threads(before):
      logging.flush()
      os._exit(status)  # pylint: disable=protected-access
  sys.exit(status)


def _foreground_threads(before: set) -> list[threading.Thread]:
  """The live threads started since `before` that the interpreter waits for at exit."""
  return [t for t in threading.enumerate()
          if t.is_alive() and not t.daemon and t not in before]
