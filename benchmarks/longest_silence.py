r"""The longest a command stays silent: the gap between two of its printed lines.

  python benchmarks/longest_silence.py [--label NAME] [--list_over S] -- CMD ARGS...

Runs CMD with stdout and stderr joined into one pipe (PYTHONUNBUFFERED=1 in its environment, so
a Python program's lines arrive when printed), passes each line through as it arrives, and
stamps it with the time it arrived. The silences are the time from the start to the first line,
the gaps between lines, and the time from the last line to the exit. At the end it prints one
line:

  longest_silence [NAME]: exit 0, wall 41.2 s, longest silence 8.31 s between 'A' and 'B'

(A is the line before the silence, B the one after; "(start)" and "(exit)" stand for the ends)
and exits with the command's status. --list_over S first lists every silence longer than S
seconds, the same way. A line ends at a newline or a carriage return, so a progress bar that
redraws itself counts at each redraw.
"""
import argparse
import os
import subprocess
import sys
import time
from typing import List, Optional, Sequence, Tuple

START, EXIT = "(start)", "(exit)"


def _trim(line: str, width: int = 100) -> str:
  line = line.strip()
  return line if len(line) <= width else line[:width - 3] + "..."


def silences(stamps: Sequence[Tuple[float, str]], end: float) -> List[Tuple[float, str, str]]:
  """(seconds, line before, line after) for each gap, from stamps of (seconds since start, line).

  The first gap runs from the start (0) to the first line; the last from the last line to `end`.
  """
  out, prev_t, prev_line = [], 0.0, START
  for t, line in stamps:
    out.append((t - prev_t, prev_line, line))
    prev_t, prev_line = t, line
  out.append((end - prev_t, prev_line, EXIT))
  return out


def _describe(gap: Tuple[float, str, str]) -> str:
  seconds, before, after = gap
  return f"{seconds:.2f} s between {_trim(before)!r} and {_trim(after)!r}"


def run(cmd: Sequence[str], out=None) -> Tuple[int, float, List[Tuple[float, str]]]:
  """Runs cmd, passing its lines to `out` as they arrive; (exit status, wall s, stamps)."""
  out = out or sys.stdout
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  start = time.monotonic()
  proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          stdin=subprocess.DEVNULL)
  stamps, pending = [], b""
  fd = proc.stdout.fileno()
  try:
    while True:
      chunk = os.read(fd, 65536)  # returns what has arrived, without waiting for a full buffer
      now = time.monotonic() - start
      if not chunk:
        break
      pending += chunk
      while True:
        ends = [i for i in (pending.find(b"\n"), pending.find(b"\r")) if i >= 0]
        if not ends:
          break
        i = min(ends)
        line = pending[:i].decode("utf-8", "replace")
        pending = pending[i + 1:]
        if not line.strip():
          continue  # a blank line or the \n of a \r\n pair: nothing a reader sees as progress
        stamps.append((now, line))
        print(line, file=out, flush=True)
    if pending.strip():
      line = pending.decode("utf-8", "replace")
      stamps.append((time.monotonic() - start, line))
      print(line, file=out, flush=True)
    status = proc.wait()
  except KeyboardInterrupt:  # Ctrl-C reached the command too: report what it printed so far
    status = proc.wait()
  return status, time.monotonic() - start, stamps


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--" not in argv:
    print("usage: longest_silence.py [--label NAME] [--list_over S] -- CMD ARGS...",
          file=sys.stderr)
    return 2
  split = argv.index("--")
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--label", default="", help="a name for the summary line")
  parser.add_argument("--list_over", type=float, default=None,
                      help="also list every silence longer than this many seconds")
  args = parser.parse_args(argv[:split])
  cmd = argv[split + 1:]
  if not cmd:
    parser.error("no command after --")
  try:
    status, wall, stamps = run(cmd)
  except OSError as e:
    print(f"longest_silence: cannot run {cmd[0]!r}: {e.strerror}", file=sys.stderr)
    return 127
  gaps = silences(stamps, wall)
  name = f" [{args.label}]" if args.label else ""
  if args.list_over is not None:
    for gap in gaps:
      if gap[0] > args.list_over:
        print(f"longest_silence{name}: silence of {_describe(gap)}", flush=True)
  print(f"longest_silence{name}: exit {status}, wall {wall:.1f} s, {len(stamps)} lines, "
        f"longest silence {_describe(max(gaps, key=lambda g: g[0]))}", flush=True)
  return status if status >= 0 else 128 - status


if __name__ == "__main__":
  sys.exit(main())
