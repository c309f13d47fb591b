"""Planning a batch: keys to dense slots, operations to chains, the precedence graph and the
statistics the scheduler decides from. Everything is built by sorting and compiled passes over
arrays, never a Python object per operation."""
