"""Reading a JSON file (local or gs://) with one clear error for each way it can fail."""
import json
from typing import Any

from etils import epath


def read_json(path, missing: str) -> Any:
  """The parsed contents of `path`.

  Args:
    path: a local or remote (gs://) file.
    missing: the FileNotFoundError message when the file does not exist.

  Raises:
    FileNotFoundError: with `missing`.
    ValueError: the file is not valid JSON, naming it and where it breaks.
  """
  p = epath.Path(path)
  if not p.exists():
    raise FileNotFoundError(missing)
  try:
    return json.loads(p.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise ValueError(f"{p}: not valid JSON: {e}") from None
