"""What every program runs on: quiet start-up, TensorFlow kept on the CPU, XLA flags, host
malloc settings and the compilation cache, programs compiled ahead of their first use,
multi-process start, stop signals, workdir locks, progress and logs, file reads and write
errors, array checksums, config read rules. Imports nothing above it."""
