"""Device time by category from a jax.profiler trace, without TensorFlow or TensorBoard.

Reads the XSpace (`*.xplane.pb`) that `jax.profiler.trace` writes, through
`jax.profiler.ProfileData`. Device events are, on a GPU or TPU, the kernels on the
device planes' stream lines ("/device:GPU:0", "Stream #..."); on the CPU, the XLA:CPU
thunks on host threads (the events that have an `hlo_op` statistic). Nested events
(a `while` thunk around its body's) count their own time only.

Each event's category comes from its HLO instruction in the compiled module's text
(`jax.stages.Compiled.as_text()`): the opcodes inside a fusion, custom-call targets
and the op's metadata (JAX name stack, source file); events of other modules, or
without an `hlo_op`, are categorised by kernel name. Idle is the part of the traced
window (first event start to last event end) where no device event runs. Shares are of
the categories' time plus idle, so they sum to 100%.
"""
import collections
import glob
import gzip
import os
import re

CATEGORIES = (
    "GEMM (dot/cuBLAS)", "attention (cuDNN/flash)", "fused elementwise & LayerNorm",
    "scatter & gather", "RNG (threefry/rng)", "optimizer & step tail", "copies & transposes", "other",
    "idle gaps")
GEMM, ATTENTION, ELEMENTWISE, SCATTER, RNG, OPTIMIZER, COPY, OTHER, IDLE = CATEGORIES

_DATA_MOVEMENT = {"copy", "transpose", "bitcast", "reshape", "slice", "concatenate", "pad",
                  "dynamic-slice", "dynamic-update-slice", "tuple", "get-tuple-element",
                  "parameter", "constant", "copy-start", "copy-done", "broadcast", "reverse"}
_CONTROL = {"while", "conditional", "call", "all-reduce", "all-gather", "reduce-scatter",
            "all-to-all", "collective-permute", "send", "recv", "infeed", "outfeed",
            "custom-call", "after-all", "async-start", "async-done"}
_INSTR = re.compile(r"^\s+(?:ROOT\s+)?%?([^\s=]+)\s+=\s+(.*)$")
_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_CALLS = re.compile(r"\b(?:calls|to_apply)=(\{[^}]*\}|%?[\w.\-]+)")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_MODULE = re.compile(r"^HloModule\s+([\w.\-]+)")
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FRAME = re.compile(r"stack_frame_id=(\d+)")


def parse_hlo(text: str) -> tuple[str, dict]:
  """(module name, {instruction name: category}) of an HLO module's text."""
  module, comps, current = "", {}, None
  tables, table = collections.defaultdict(dict), None
  for line in text.splitlines():
    if m := _MODULE.match(line):
      module = m.group(1)
      continue
    if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
      table = tables[line]
      continue
    if table is not None and (m := _TABLE_ROW.match(line)):
      table[int(m.group(1))] = m.group(2)
      continue
    table = None
    if m := _HEADER.match(line):
      current = comps.setdefault(m.group(1), [])
      continue
    if current is None:
      continue
    if m := _INSTR.match(line):
      op = _OPCODE.search(" " + m.group(2))
      calls = []
      for c in _CALLS.findall(line):
        calls += [x.strip().lstrip("%") for x in c.strip("{}").split(",") if x.strip()]
      current.append((m.group(1), op.group(1) if op else "", line, calls))

  def contents(name, seen):
    """Opcodes and lines of computation `name` and what it calls (fusions, reduce's add)."""
    ops, lines = set(), []
    for _, opcode, line, calls in comps.get(name, ()):
      ops.add(opcode)
      lines.append(line)
      for c in calls:
        if c not in seen:
          seen.add(c)
          o, l = contents(c, seen)
          ops |= o
          lines += l
    return ops, lines

  training = any("jvp(" in line for instrs in comps.values() for _, _, line, _ in instrs)
  frame_files = _frame_files(tables)
  categories = {}
  for instrs in comps.values():
    for name, opcode, line, calls in instrs:
      ops, lines = {opcode}, [line]
      if opcode in ("fusion", "call", "custom-call"):
        for c in calls:
          o, l = contents(c, {c})
          ops |= o
          lines += l
      frame = _FRAME.search(line)
      files = frame_files(int(frame.group(1))) if frame else ""
      categories[name] = _category(opcode, ops, "\n".join(lines), line, files, training)
  return module, categories


def _frame_files(tables: dict):
  """stack_frame_id -> the source files of that frame and its callers, one string."""
  names = {k: v.strip('"') for k, v in tables["FileNames"].items()}
  loc_file = {k: int(m.group(1)) for k, v in tables["FileLocations"].items()
              if (m := re.search(r"file_name_id=(\d+)", v))}
  frames = {}
  for k, v in tables["StackFrames"].items():
    loc, parent = re.search(r"file_location_id=(\d+)", v), re.search(r"parent_frame_id=(\d+)", v)
    frames[k] = (int(loc.group(1)) if loc else 0, int(parent.group(1)) if parent else 0)
  cache = {}

  def files(frame_id: int) -> str:
    if frame_id in cache:
      return cache[frame_id]
    out, seen, f = [], set(), frame_id
    while f in frames and f not in seen:
      seen.add(f)
      loc, parent = frames[f]
      out.append(names.get(loc_file.get(loc, 0), ""))
      f = parent
    cache[frame_id] = "\n".join(out)
    return cache[frame_id]
  return files


def _category(opcode: str, ops: set, text: str, line: str, files: str = "",
              training: bool = False) -> str:
  """The category of one instruction: `ops`/`text` include its fused computations; `files`
  are the source files of its stack frames; `training`: the module has a backward pass."""
  low = text.lower()
  if re.search(r"cudnn\$?[\w$]*(fmha|flash|sdpa)|__cudnn\$fmha|flash_attention|splash", low):
    return ATTENTION
  if ops & {"dot", "convolution"} or re.search(r"__cublas|cublaslt|__triton_gemm|gemm", low):
    return GEMM
  if ops & {"rng", "rng-bit-generator", "rng-get-and-update-state"} or re.search(
      r"op_name=\"[^\"]*(threefry|random_bits|rng|jit\(_bernoulli|jit\(_uniform|jit\(_normal"
      r"|jit\(_truncated_normal)", low):
    return RNG
  if ops & {"scatter", "gather", "select-and-scatter"}:
    return SCATTER
  if opcode in _DATA_MOVEMENT or (opcode == "fusion" and ops <= _DATA_MOVEMENT | {"fusion"}):
    return COPY
  name_stack = re.search(r'op_name="([^"]*)"', line)
  outside = training and name_stack and "jvp(" not in name_stack.group(1)
  if "/optax/" in files or (outside and opcode not in _CONTROL):
    return OPTIMIZER  # optax's code, or outside the forward and backward pass: norm, step tail
  if opcode in _CONTROL:
    return OTHER
  return ELEMENTWISE


# A kernel's category from its name, first match wins.
_NAME_CATEGORIES = (
    # bert_jax's Pallas dropout + residual + LayerNorm (modeling/fused_norm.py): Triton names
    # a kernel after its function (`_fused_norm_backward__2`), inside a command buffer.
    (r"fused_norm", ELEMENTWISE),
    (r"flash|fmha|sdpa|attention|cudnn", ATTENTION),
    (r"gemm|cutlass|xmma|nvjet|cublas|matmul|\bdot\b|dot_|ynn_fusion|onednn", GEMM),
    (r"threefry|philox|rng|random", RNG),
    (r"scatter|gather", SCATTER),
    (r"adam|lamb|optax", OPTIMIZER),
    (r"memcpy|memset|copy|transpose", COPY),
    (r"fusion|loop_|input_|reduce|elementwise|convert|add|multiply", ELEMENTWISE),
)


def category_by_name(name: str) -> str:
  """A kernel's category from its name alone (no HLO instruction known for it)."""
  n = name.lower()
  return next((category for pattern, category in _NAME_CATEGORIES if re.search(pattern, n)),
              OTHER)


def latest_xplane(log_dir: str) -> str:
  found = sorted(glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
                 + glob.glob(os.path.join(log_dir, "**", "*.xplane.pb.gz"), recursive=True),
                 key=os.path.getmtime)
  if not found:
    raise FileNotFoundError(f"no *.xplane.pb under {log_dir}")
  return found[-1]


def device_events(xplane_path: str) -> tuple[str, list[dict]]:
  """(where, events): the device kernels (GPU/TPU planes' stream lines) or else the XLA:CPU thunks.

  Each event: name, hlo_op, hlo_module, line, start_ns, dur_ns (own time: nested
  events' time taken out).
  """
  import jax  # pylint: disable=g-import-not-at-top
  if xplane_path.endswith(".gz"):
    with gzip.open(xplane_path, "rb") as f:
      data = jax.profiler.ProfileData.from_serialized_xspace(f.read())
  else:
    data = jax.profiler.ProfileData.from_file(xplane_path)
  dev_planes = [p for p in data.planes if p.name.startswith(("/device:GPU", "/device:TPU"))]
  raw = []
  if dev_planes:
    where = "device streams"
    for plane in dev_planes:
      lines = list(plane.lines)
      streams = [l for l in lines if l.name.startswith("Stream")] or [
          l for l in lines if not l.name.startswith(("XLA ", "Steps", "Framework", "Source",
                                                     "TensorFlow", "Launch"))]
      for line in streams:
        for e in line.events:
          raw.append(_event(e, f"{plane.name}/{line.name}"))
  else:
    where = "XLA:CPU thunks on host threads"
    for plane in data.planes:
      if not plane.name.startswith("/host"):
        continue
      for line in plane.lines:
        for e in line.events:
          ev = _event(e, f"{plane.name}/{line.name}")
          if ev["hlo_op"]:
            raw.append(ev)
  return where, _own_time(raw)


def _event(e, line: str) -> dict:
  stats = dict(e.stats)
  hlo_op, hlo_module = str(stats.get("hlo_op", "") or ""), str(stats.get("hlo_module", "") or "")
  if not hlo_op:  # a GPU kernel's XLA annotation "name:#hlo_op=...,hlo_module=...#" kept whole
    for v in stats.values():
      if isinstance(v, str) and "hlo_op=" in v:
        found = dict(kv.split("=", 1) for kv in v.split("#")[1].split(",") if "=" in kv) if (
            v.count("#") >= 2) else {}
        hlo_op, hlo_module = found.get("hlo_op", ""), hlo_module or found.get("hlo_module", "")
        break
  return dict(name=e.name, hlo_op=hlo_op, hlo_module=hlo_module, line=line,
              start_ns=float(e.start_ns), dur_ns=float(e.duration_ns))


def _own_time(events: list[dict]) -> list[dict]:
  """Subtracts from each event the time of the events nested in it on the same line."""
  by_line = collections.defaultdict(list)
  for e in events:
    by_line[e["line"]].append(e)
  for evs in by_line.values():
    evs.sort(key=lambda e: (e["start_ns"], -e["dur_ns"]))
    stack = []
    for e in evs:
      e["own_ns"] = e["dur_ns"]
      while stack and stack[-1]["start_ns"] + stack[-1]["dur_ns"] <= e["start_ns"]:
        stack.pop()
      if stack:
        parent = stack[-1]
        parent["own_ns"] -= min(e["dur_ns"], parent["start_ns"] + parent["dur_ns"] - e["start_ns"])
      stack.append(e)
  return events


def _busy_ns(events: list[dict]) -> tuple[float, float]:
  """(window, union of event intervals) over all lines, in ns."""
  spans = sorted((e["start_ns"], e["start_ns"] + e["dur_ns"]) for e in events)
  busy, cur_s, cur_e = 0.0, None, None
  for s, t in spans:
    if cur_e is None or s > cur_e:
      if cur_e is not None:
        busy += cur_e - cur_s
      cur_s, cur_e = s, t
    else:
      cur_e = max(cur_e, t)
  if cur_e is not None:
    busy += cur_e - cur_s
  return spans[-1][1] - spans[0][0] if spans else 0.0, busy


def summarize(events: list[dict], module: str, hlo_categories: dict, steps: int,
              top: int = 20) -> dict:
  """Category table and top kernels; times in ms per step."""
  if not events:
    raise ValueError("the trace holds no device events")
  for e in events:
    cat = None
    if not module or not e["hlo_module"] or e["hlo_module"] == module:
      # The HLO op, else the kernel name (XLA:GPU names kernels after their instruction,
      # "loop_add_fusion_3" for "loop_add_fusion.3").
      for key in (e["hlo_op"], e["name"], re.sub(r"_(\d+)$", r".\1", e["name"])):
        if key and (cat := hlo_categories.get(key)):
          break
    e["category"] = cat or category_by_name(e["name"] + " " + e["hlo_op"])
  window, busy = _busy_ns(events)
  by_cat = collections.Counter()
  for e in events:
    by_cat[e["category"]] += max(e["own_ns"], 0.0)
  by_cat[IDLE] = max(window - busy, 0.0)
  total = sum(by_cat.values())
  cats = [dict(category=c, ms_per_step=by_cat[c] / 1e6 / steps, share=by_cat[c] / total)
          for c in CATEGORIES]
  kernels = collections.defaultdict(lambda: dict(ns=0.0, count=0, category="", hlo_op=""))
  for e in events:
    k = kernels[e["name"]]
    k["ns"] += max(e["own_ns"], 0.0)
    k["count"] += 1
    k["category"], k["hlo_op"] = e["category"], k["hlo_op"] or e["hlo_op"]
  busy_total = total - by_cat[IDLE]
  top_k = sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])[:top]
  return dict(
      window_ms_per_step=window / 1e6 / steps, busy_ms_per_step=busy / 1e6 / steps,
      events=len(events), categories=cats,
      top_kernels=[dict(name=n, hlo_op=k["hlo_op"], category=k["category"],
                        calls_per_step=k["count"] / steps, ms_per_step=k["ns"] / 1e6 / steps,
                        share_of_busy=k["ns"] / busy_total if busy_total else 0.0)
                   for n, k in top_k])


def markdown(summary: dict, title: str) -> str:
  """The category table and the top kernels as markdown."""
  out = [f"### {title}", "",
         f"traced window {summary['window_ms_per_step']:.3f} ms/step, device busy "
         f"{summary['busy_ms_per_step']:.3f} ms/step, {summary['events']} events", "",
         "| category | ms/step | share |", "|---|---:|---:|"]
  for c in summary["categories"]:
    out.append(f"| {c['category']} | {c['ms_per_step']:.3f} | {c['share']:.1%} |")
  out += ["", f"Top {len(summary['top_kernels'])} kernels (own time; share of busy time)", "",
          "| # | kernel | HLO op | category | calls/step | ms/step | share |",
          "|---:|---|---|---|---:|---:|---:|"]
  for i, k in enumerate(summary["top_kernels"], 1):
    name = k["name"] if len(k["name"]) <= 80 else k["name"][:77] + "..."
    name = name.replace("|", "\\|").replace("`", "'")
    out.append(f"| {i} | `{name}` | `{k['hlo_op']}` | {k['category']} | {k['calls_per_step']:.1f} "
               f"| {k['ms_per_step']:.3f} | {k['share_of_busy']:.1%} |")
  return "\n".join(out)
