"""Config keys a run reads only in some settings, and command lines that set them anyway.

A config file's `READ_ONLY_WHEN` maps a key to (controlling key, values that read it[,
CHOOSE]). A key set by `--config.KEY` that the run would not read is an error before any
long work; with CHOOSE and a single reading value, the controlling key is set to it instead
and the run says so (`--config.data.files=X` alone reads X).
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
  """Checks the explicitly set keys against `rules`, possibly setting a controlling key in
  `config`; returns one note per key chosen.

  An explicit key given its value in `defaults` is not reported (a script may pass every
  default). Raises ValueError naming a key the run will not read and what would read it.
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
