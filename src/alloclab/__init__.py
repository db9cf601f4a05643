"""alloclab: measure which memory allocator a long-running program should run on."""

__version__ = "0.1.0"
