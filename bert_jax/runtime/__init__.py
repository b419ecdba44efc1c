"""What every program runs on: start-up, TensorFlow on the CPU, XLA and malloc settings,
compilation, multi-process start and stop, workdir locks, logs, file I/O. Imports nothing above
it."""
