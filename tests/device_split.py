"""How many fake CPU devices each test worker has, and which worker runs which file.

A user's CPU has one JAX device; a pod has many. The suite covers both: a file marked
`pytestmark = pytest.mark.multidevice` (meshes, sharding presets, several processes compared
with one process of 8 devices) runs on 8 fake CPU devices, every other file on one device, as
a user's CPU runs it. One device is also the cheap way: on 2 cores a tiny pretraining step
split over 8 fake devices takes about 10 times as long, and a whole 6-step run twice as long.

The device count is fixed when JAX starts in a process, so it is a worker's: pytest.ini starts
one worker with BERT_JAX_TEST_DEVICES=8 and two with 1 (`--tx popen//env:...`), and
DeviceScheduling (`--dist loadfile`: a file's tests on one worker) hands the marked files to
the first and every other file to the others; the 8-device worker ends when the marked files
are done. A process started without the variable (`-n 0`, `-n N`) has 8 devices and runs any
file.
"""
import ast
import functools
import os
import pathlib

import pytest
from xdist.scheduler import LoadFileScheduling

ENV = "BERT_JAX_TEST_DEVICES"
MULTIDEVICE_COUNT = 8
DEVICES = int(os.environ.get(ENV, MULTIDEVICE_COUNT))


@functools.lru_cache(maxsize=None)
def marked_multidevice(path: pathlib.Path) -> bool:
  """Whether the test file at `path` sets a module-level `pytestmark` naming multidevice."""
  try:
    tree = ast.parse(path.read_text(encoding="utf-8"))
  except (OSError, SyntaxError, ValueError):
    return False
  return any(isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
             and "multidevice" in ast.unparse(node.value) for node in tree.body)


def _devices(node) -> int:
  return int(node.gateway.spec.env.get(ENV, MULTIDEVICE_COUNT))


class DeviceScheduling(LoadFileScheduling):
  """--dist loadfile, with the multidevice files on workers of 8 devices and the others on
  workers of fewer when there are such workers (else on any)."""

  def _fits(self, node, scope: str) -> bool:
    if marked_multidevice(self.config.rootpath / scope):
      return _devices(node) >= MULTIDEVICE_COUNT
    return (_devices(node) < MULTIDEVICE_COUNT
            or all(_devices(n) >= MULTIDEVICE_COUNT for n in self.nodes))

  def _reschedule(self, node) -> None:
    if node.shutting_down:
      return
    if not any(self._fits(node, scope) for scope in self.workqueue):
      node.shutdown()  # nothing left that this worker may run
      return
    if self._pending_of(self.assigned_work[node]) > 2:
      return
    self._assign_work_unit(node)

  def _assign_work_unit(self, node) -> None:
    scope = next((s for s in self.workqueue if self._fits(node, s)), None)
    if scope is None:
      return
    work_unit = self.workqueue.pop(scope)
    self.assigned_work.setdefault(node, {})[scope] = work_unit
    collection = self.registered_collections[node]
    node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items()
                            if not done])


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
  if config.getvalue("dist") == "loadfile":
    return DeviceScheduling(config, log)
  return None


def pytest_runtest_setup(item):
  if item.get_closest_marker("multidevice") is not None and DEVICES < MULTIDEVICE_COUNT:
    pytest.fail(f"marked multidevice: needs {MULTIDEVICE_COUNT} devices, this worker has "
                f"{DEVICES} ({ENV})", pytrace=False)
