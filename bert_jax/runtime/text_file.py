"""Reading a UTF-8 text file with one clear error for each way it can fail."""
import codecs

from etils import epath


def read_utf8(path, what: str = "file") -> str:
  """The text of `path` (local or gs://) as UTF-8, a byte-order mark dropped; ValueError names
  the line and column of a byte that is not UTF-8 (or says `path` is a directory)."""
  p = epath.Path(path)
  if not p.exists():
    raise FileNotFoundError(f"{what} {path} does not exist")
  if p.is_dir():
    raise ValueError(f"{what} {path} is a directory, not a file")
  data = p.read_bytes()
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
