"""One owner per workdir: pretraining and fine-tuning never write into each other's.

A pretraining workdir holds checkpoints/ and an export/ whose bundle.json says
"source": "pretrain"; a fine-tuning workdir holds finetune_checkpoints/,
eval_results.json and an export/ saying "source": "finetune". Fine-tuning with --workdir equal to the
pretraining workdir it starts from replaced that run's export with the task
model and mixed both runs in metrics.jsonl (issue 37). A run now refuses, in
one line and before anything is read or written, a workdir that holds the other
program's run, or that is itself a bundle (a converted model, not a run).
"""
from typing import Optional

from etils import epath

from bert_jax.modeling import bundle
from bert_jax.runtime.json_file import read_json

PROGRAMS = {"pretrain": "a pretraining run", "finetune": "a fine-tuning run"}
# Fine-tuning's own checkpoints (never taken for a pretraining run's, nor loaded as a model).
FINETUNE_CHECKPOINTS = "finetune_checkpoints"


def owner(workdir: str) -> Optional[str]:
  """'pretrain', 'finetune', 'bundle' or None (empty or new): what `workdir` holds."""
  p = epath.Path(workdir)
  if not p.is_dir():
    return None
  if bundle.is_bundle(str(p)):
    return "bundle"
  info = p / "export" / bundle.INFO_FILE
  if info.exists():
    source = read_json(info, missing=f"{info} does not exist")
    source = source.get("source") if isinstance(source, dict) else None
    if source in PROGRAMS:
      return source
  if (p / FINETUNE_CHECKPOINTS).is_dir():
    return "finetune"
  if (p / "checkpoints").is_dir():
    return "pretrain"
  if (p / "eval_results.json").exists() or (p / "eval_results_per_seed.json").exists():
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
  found = owner(workdir)
  if found is None or found == program:
    return
  what = PROGRAMS.get(found, "a bert_jax bundle (a model, not a run directory)")
  hint = (" (it can be this run's init_checkpoint)" if found == "pretrain" and
          program == "finetune" else "")
  raise ValueError(f"--workdir {workdir} holds {what}; {PROGRAMS[program]} would mix its "
                   f"logs with it and replace its files: give a new --workdir{hint}")
