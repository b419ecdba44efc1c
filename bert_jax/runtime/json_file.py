"""Reading a JSON file (local or gs://) with one clear error for each way it can fail."""
import json
import math
from typing import Any

from etils import epath


def read_json(path, missing: str) -> Any:
  """The parsed contents of `path` (local or gs://); FileNotFoundError with `missing`, or a
  ValueError naming the file and where it breaks."""
  p = epath.Path(path)
  if not p.exists():
    raise FileNotFoundError(missing)
  try:
    return json.loads(p.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise ValueError(f"{p}: not valid JSON: {e}") from None


def dumps_defined(obj: Any, **kwargs) -> tuple[str, list[str]]:
  """(JSON text of `obj` with NaN and inf written as null, the '/'-paths so written).

  json.dumps writes a bare `NaN` that JSON readers refuse (an all-equal STS-B file gives an
  undefined Pearson correlation). kwargs go to json.dumps.
  """
  undefined = []

  def clean(x, path):
    if isinstance(x, float) and not math.isfinite(x):
      undefined.append(path)
      return None
    if isinstance(x, dict):
      return {k: clean(v, f"{path}/{k}" if path else str(k)) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
      return [clean(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(x)]
    return x
  return json.dumps(clean(obj, ""), allow_nan=False, **kwargs), undefined
