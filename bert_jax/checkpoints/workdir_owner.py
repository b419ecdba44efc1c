"""One owner per workdir: pretraining and fine-tuning never write into each other's.

A pretraining workdir holds checkpoints/ and an export/ whose bundle.json says
"source": "pretrain"; a fine-tuning workdir holds finetune_checkpoints/,
eval_results.json and an export/ saying "source": "finetune". Fine-tuning into
the pretraining workdir it starts from would replace that run's export with the task
model and mix both runs in metrics.jsonl, so a run refuses, in one line and before
anything is read or written, a workdir that holds the other program's run, that is
itself a bundle (a converted model, not a run), or whose checkpoint or export folder
is a file.

A fine-tuning workdir also records its run in run.json from before its first step to
after its export: the config it runs and whether it has finished. A finished run is
never replaced by another run without `--config.start_over=True` (which sets its files
aside first), and the same command given again reports the finished results.
"""
import json
from typing import Any, Optional, Sequence

from etils import epath
from flax import traverse_util

from bert_jax.checkpoints import bundle
from bert_jax.runtime import atomic_files
from bert_jax.runtime.text_files import read_json
from bert_jax.runtime import workdirs

PROGRAMS = {"pretrain": "a pretraining run", "finetune": "a fine-tuning run"}
# Folders a run writes into: one that is a file would fail the first save (or the export).
_FOLDERS = (workdirs.CHECKPOINTS, workdirs.FINETUNE_CHECKPOINTS,
            workdirs.EXPORT, workdirs.TENSORBOARD)


def owner(workdir: str) -> Optional[str]:
  """'pretrain', 'finetune', 'bundle' or None (empty or new): what `workdir` holds."""
  p = epath.Path(workdir)
  if not p.is_dir():
    return None
  if bundle.is_bundle(str(p)):
    return "bundle"
  info = p / workdirs.EXPORT / bundle.INFO_FILE
  if info.exists():
    source = _read_record(info, "an export record", object_only=False)
    source = source.get("source") if isinstance(source, dict) else None
    if source in PROGRAMS:
      return source
  if (p / workdirs.FINETUNE_CHECKPOINTS).is_dir():
    return "finetune"
  if (p / workdirs.CHECKPOINTS).is_dir():
    return "pretrain"
  if (p / workdirs.RESULTS).exists() or (p / workdirs.RESULTS_PER_SEED).exists():
    return "finetune"
  return None


def check(workdir: str, program: str) -> None:
  """Refuses a workdir that holds another program's run, or a bundle.

  Args:
    workdir: the run's --workdir.
    program: 'pretrain' or 'finetune', the program about to write there.

  Raises:
    ValueError: one line naming the workdir, what it holds and what to do.
  """
  for name in _FOLDERS:
    p = epath.Path(workdir) / name
    if p.exists() and not p.is_dir():
      raise ValueError(f"--workdir {workdir}: {p} is a file, where the run keeps a folder; "
                       "move it away or give a new --workdir")
  found = owner(workdir)
  if found is None or found == program:
    return
  what = PROGRAMS.get(found, "a bert_jax bundle (a model, not a run directory)")
  hint = (" (it can be this run's init_checkpoint)" if found == "pretrain" and
          program == "finetune" else "")
  raise ValueError(f"--workdir {workdir} holds {what}; {PROGRAMS[program]} would mix its "
                   f"logs with it and replace its files: give a new --workdir{hint}")


def read_run(workdir: str) -> Optional[dict]:
  """The workdir's run record (run.json), or None."""
  path = epath.Path(workdir) / workdirs.RUN_FILE
  if not path.exists():
    return None
  return _read_record(path, "a run record")


def _read_record(path: epath.Path, what: str, object_only: bool = True) -> Any:
  """The JSON (object, with `object_only`) in `path`; else ValueError, one line naming the
  file and what to do.

  A file that is not UTF-8 (a binary file, one overwritten by another program)
  would otherwise fail in the decoder, whose message names no file.
  """
  def refuse(why: str) -> ValueError:
    return ValueError(f"{path} is not {what} ({why}); move it away or give a new --workdir")

  try:
    record = read_json(path, missing=f"{path} does not exist")
  except UnicodeDecodeError as e:
    raise refuse(f"not UTF-8 text: byte 0x{e.object[e.start]:02x} at offset {e.start}"
                 ) from None
  except ValueError as e:  # not valid JSON (a truncated file): read_json says where it breaks
    raise refuse(str(e).replace(f"{path}: ", "", 1)) from None
  if object_only and not isinstance(record, dict):
    raise refuse("not a JSON object")
  return record


def record_run(workdir: str, program: str, state: str, config_record: dict,
               **fields: Any) -> None:
  """Writes run.json: the program, its state ('training' / 'finished'), its config."""
  record = dict(fields, program=program, state=state, config=config_record)
  atomic_files.write_text(epath.Path(workdir) / workdirs.RUN_FILE,
                          json.dumps(record, indent=2, sort_keys=True) + "\n")


def changed_keys(saved: dict, current: dict, may_change: Sequence[str]) -> list[str]:
  """The flattened config keys whose values differ, less those in `may_change` (a key
  ending in '.' covers its section)."""
  a = traverse_util.flatten_dict(saved, sep=".")
  b = traverse_util.flatten_dict(current, sep=".")
  return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and not any(
      k == m or (m.endswith(".") and k.startswith(m)) for m in may_change))


def finished_run(workdir: str, config_record: dict, may_change: Sequence[str],
                 start_over: bool) -> Optional[dict]:
  """The workdir's finished fine-tuning run when it is this run (nothing left to do).

  Args:
    workdir: the run's --workdir.
    config_record: this run's config (as JSON).
    may_change: keys that do not make another run (how often to log, the mesh, ...).
    start_over: the user asked to set a finished run aside and train anew.

  Returns:
    The finished run's record when it ran this config, else None (a new run, an
    unfinished one to resume, or, with `start_over`, any run).

  Raises:
    ValueError: the workdir holds a finished run of another config (one line naming it
      and the keys that differ), or one written without a run record.
  """
  root = epath.Path(workdir)
  record = read_run(workdir)
  legacy = record is None and (root / workdirs.RESULTS).exists()
  if start_over or not (legacy or (record and record.get("state") == "finished")):
    return None
  if legacy:
    what, keys = "a finished fine-tuning run (its results and export)", []
  else:
    keys = changed_keys(record.get("config") or {}, config_record,
                        tuple(may_change) + ("start_over",))
    if not keys:
      return record
    keys.sort(key=lambda k: k != "task")  # a changed task is named first
    task = record.get("task")
    what = f"a finished fine-tuning run{f' of {task}' if task else ''}"
  saved = traverse_util.flatten_dict((record or {}).get("config") or {}, sep=".")
  now = traverse_util.flatten_dict(config_record, sep=".")
  diff = "; ".join(f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in keys[:4])
  more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
  raise ValueError(
      f"--workdir {workdir} holds {what}" + (f" with other settings ({diff}{more})" if diff
                                             else "") +
      "; this run would replace its results and export: give a new --workdir, or pass "
      "--config.start_over=True to set that run aside (in before_start_over/) and train "
      "anew; nothing was moved or written")


def resumes_its_own_start_over(workdir: str, config_record: dict,
                               may_change: Sequence[str]) -> bool:
  """Whether the workdir's run is an unfinished one that this same config, start_over
  included, began: the command given again after a stop resumes it instead of setting it aside
  (a job controller re-issues the same command after every preemption)."""
  record = read_run(workdir)
  saved = (record or {}).get("config") or {}
  return bool(record and record.get("state") != "finished" and saved.get("start_over")
              and not changed_keys(saved, config_record, may_change))


def set_earlier_run_aside(workdir: str, names: Sequence[str]) -> Optional[epath.Path]:
  """Moves the earlier run's `names` (those present) to before_start_over[.N]/, kept whole.

  Returns:
    The folder they were moved to, or None when none was present.
  """
  root = epath.Path(workdir)
  found = [root / name for name in names if (root / name).exists()]
  if not found:
    return None
  aside, n = root / "before_start_over", 0
  while aside.exists():
    n += 1
    aside = root / f"before_start_over.{n}"
  aside.mkdir(parents=True)
  for path in found:
    path.rename(aside / path.name)
  print(f"starting over: moved the earlier run's {', '.join(p.name for p in found)} to {aside}",
        flush=True)
  return aside
