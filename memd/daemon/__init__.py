"""The daemon process: composition root, signals, single-instance lock, watcher."""
