"""Atomic operations on int64 numpy arrays inside numba kernels (LLVM atomics, sequentially
consistent), for the lock-based baselines whose worker threads coordinate through shared arrays."""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _pointer(context: Any, builder: Any, array_type: Any, array: Any, index: Any) -> Any:
    ary = context.make_array(array_type)(context, builder, array)
    getter: Any = cgutils.get_item_pointer
    return getter(context, builder, array_type, ary, [index], wraparound=False)


@intrinsic
def atomic_add(typingctx: Any, array: Any, index: Any, value: Any) -> Any:
    """``array[index] += value`` atomically; returns the previous value."""
    signature = array.dtype(array, index, value)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
        addend = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        return builder.atomic_rmw("add", pointer, addend, "seq_cst")

    return signature, codegen


@intrinsic
def atomic_load(typingctx: Any, array: Any, index: Any) -> Any:
    """``array[index]``, read atomically (never hoisted out of a spin loop)."""
    signature = array.dtype(array, index)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
        load = builder.load_atomic(pointer, "seq_cst", align=8)
        return load

    return signature, codegen


@intrinsic
def atomic_store(typingctx: Any, array: Any, index: Any, value: Any) -> Any:
    """``array[index] = value`` atomically."""
    signature = types.void(array, index, value)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        pointer = _pointer(context, builder, sig.args[0], args[0], args[1])
        stored = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        builder.store_atomic(stored, pointer, "seq_cst", align=8)
        return context.get_dummy_value()

    return signature, codegen


__all__ = ["atomic_add", "atomic_load", "atomic_store"]
