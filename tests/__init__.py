"""The test suite (a package, so subfolders may repeat module basenames)."""
