"""Config keys that a run reads only in some settings, and command lines that set them anyway.

A config file may declare which of its keys are read only when another key has
certain values (a module-level `READ_ONLY_WHEN`):

  READ_ONLY_WHEN = {
      "data.files": ("data.source", ("files",), CHOOSE),  # read only when data.source == 'files'
      "data.format": ("data.source", ("files",)),
      "profile_num_steps": ("profile_start_step", None),  # read only when it is set (truthy)
  }

A key given on the command line (`--config.KEY=...`) whose run would not read it
is an error naming the key and what would read it, before any long work: a user
who names a corpus expects it to be read. Where exactly one value of the
controlling key reads it, the rule says CHOOSE and the command line does not
set the controlling key, the run takes that value instead and says so
(`--config.data.files=X` alone reads X).
"""
from typing import Any, Optional, Sequence

import ml_collections

# The third element of a rule: giving the key alone sets the controlling key to its one value.
CHOOSE = "choose"
# key -> (controlling key, the values under which the key is read (None: when it is truthy)
#         [, CHOOSE])
Rules = dict[str, tuple]


def explicit_keys(argv: Sequence[str]) -> list[str]:
  """The dotted keys that `--config.KEY=V` / `--config.KEY V` arguments of argv set, in order."""
  keys = []
  for arg in argv:
    if arg == "--":
      break
    if arg.startswith("--config.") and arg != "--config.help":
      key = arg[len("--config."):].split("=", 1)[0]
      if key not in keys:
        keys.append(key)
  return keys


def _get(config: ml_collections.ConfigDict, key: str) -> Any:
  for part in key.split("."):
    config = config[part]
  return config


def _set(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
  *parents, leaf = key.split(".")
  for part in parents:
    config = config[part]
  config[leaf] = value


def _reads(value: Any, values: Optional[tuple[Any, ...]]) -> bool:
  return bool(value) if values is None else value in values


def _what_reads(control: str, values: Optional[tuple[Any, ...]]) -> str:
  if values is None:
    return f"only when {control} is set"
  return "only when " + " or ".join(f"{control}={v!r}" for v in values)


def resolve(config: ml_collections.ConfigDict, explicit: Sequence[str], rules: Rules,
            defaults: Optional[ml_collections.ConfigDict] = None) -> list[str]:
  """Checks the explicitly set keys against `rules`; may set a controlling key.

  Args:
    config: the run's config, overrides applied (changed in place when a
      controlling key is chosen).
    explicit: the keys the command line set (explicit_keys).
    rules: the config file's READ_ONLY_WHEN.
    defaults: the config file's own config; an explicit key given its default
      value is not reported (a script may pass every default).

  Returns:
    One note per controlling key chosen, for the run's header.

  Raises:
    ValueError: a key set explicitly that the run will not read (one line
      naming the key, the setting that would read it and the one in force).
  """
  given = set(explicit)
  explicit = [k for k in explicit if k in rules]
  if defaults is not None:
    explicit = [k for k in explicit if _get(config, k) != _get(defaults, k)]
  notes, chosen = [], {}
  for key in explicit:
    control, values, *choose = rules[key]
    if (choose != [CHOOSE] or control in given or control in chosen
        or _reads(_get(config, control), values)):
      continue
    # Exactly one setting reads it and the command line leaves that setting alone: take it,
    # unless another explicit key asks for another one.
    others = [k for k in explicit if rules[k][0] == control and k != key
              and rules[k][1] is not None and values[0] not in rules[k][1]]
    if others:
      raise ValueError(f"--config.{key} and --config.{others[0]} are read by different "
                       f"settings of {control} ({values[0]!r} and "
                       f"{', '.join(map(repr, rules[others[0]][1]))}); give one of them")
    chosen[control] = values[0]
    _set(config, control, values[0])
    notes.append(f"{control}={values[0]!r}: chosen because --config.{key} was given "
                 f"(the only setting that reads it)")
  for key in explicit:
    control, values = rules[key][:2]
    value = _get(config, control)
    if not _reads(value, values):
      raise ValueError(f"--config.{key} is not read by this run: it is read "
                       f"{_what_reads(control, values)}, and this run has {control}={value!r}")
  return notes
