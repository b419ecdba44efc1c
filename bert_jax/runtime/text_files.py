"""Reading text and JSON files (local or gs://) with one clear error for each way they can fail,
and JSON text that every reader accepts."""
import codecs
import json
import math
import sys
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


STDIN = "-"  # an input path that names standard input


def input_name(path: str) -> str:
  """How messages name an input path: 'standard input' for STDIN, else the path."""
  return "standard input" if path == STDIN else path


def read_bytes(path, what: str = "file") -> bytes:
  """The bytes of `path` (local or gs://; '-' reads standard input to its end);
  FileNotFoundError or ValueError (a directory) naming it as `what`."""
  if path == STDIN:
    return sys.stdin.buffer.read()
  p = epath.Path(path)
  if not p.exists():
    raise FileNotFoundError(f"{what} {path} does not exist")
  if p.is_dir():
    raise ValueError(f"{what} {path} is a directory, not a file")
  return p.read_bytes()


def read_utf8(path, what: str = "file") -> str:
  """The text of `path` (local or gs://) as UTF-8, a byte-order mark dropped; ValueError names
  the line and column of a byte that is not UTF-8 (or says `path` is a directory)."""
  data = read_bytes(path, what)
  # The mark is dropped before decoding, not by the utf-8-sig codec: that codec counts the
  # offset of a bad byte from after the mark, 3 bytes short of the file's own.
  data = data[len(codecs.BOM_UTF8):] if data.startswith(codecs.BOM_UTF8) else data
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    before = data[data.rfind(b"\n", 0, e.start) + 1:e.start]  # valid UTF-8: decoding got past it
    column = len(before.decode("utf-8")) + 1
    raise ValueError(f"{path}:{line}: byte 0x{data[e.start]:02x} at column {column} is not "
                     f"UTF-8 ({what}s are read as UTF-8: save it as UTF-8, e.g. with "
                     "`iconv -f latin1 -t utf-8`)") from None
