"""The keys of a run config that one module reads, handed to it instead of the whole config.

A task family or an objective declares the top-level keys it reads (`OPTIONS`); the run
package (fine-tuning's or pretraining's) selects them once and passes the selection down. A
module reading a key it did not declare fails at once, naming the declaration to extend.
"""
from typing import Any, Sequence


class Options:
  """Read-only values of the declared keys, read as on the config (`o.key`, `o["key"]`)."""

  def __init__(self, values: dict[str, Any], owner: str):
    object.__setattr__(self, "_values", dict(values))
    object.__setattr__(self, "_owner", owner)

  def __getattr__(self, name: str) -> Any:
    if name.startswith("__"):
      raise AttributeError(name)
    try:
      return self._values[name]
    except KeyError:
      raise AttributeError(f"{self._owner} reads config key {name!r} without declaring it in "
                           "its OPTIONS") from None

  def __getitem__(self, name: str) -> Any:
    return self.__getattr__(name)

  def __setattr__(self, name: str, value: Any) -> None:
    raise AttributeError(f"options of {self._owner} are read-only")

  def __contains__(self, name: str) -> bool:
    return name in self._values

  def __repr__(self) -> str:
    return f"Options({self._owner}: {sorted(self._values)})"


def select(config: Any, keys: Sequence[str], owner: str) -> Options:
  """The values of `keys` in `config` (a key may name a whole section, as `data`)."""
  missing = [k for k in keys if k not in config]
  if missing:
    raise KeyError(f"{owner} declares config keys the config lacks: {missing}")
  return Options({k: config[k] for k in keys}, owner)
