"""Running a compiled step operation by operation, TStream style, with lazy aborts made exact.

1. *Tasks*: one per operation whose ``when`` holds, plus one per transaction for its output;
   ordered by (timestamp, operation). A task locks its key's chain (and, if it may draw a surrogate
   key, its table's sequence) at its turn, and waits for the operations of its transaction whose
   results it reads.
2. *Passes*: worker threads run every task (:mod:`.codegen_ops`). Operations of a transaction that
   fails may already have written: so every pass starts from the step's starting state, and
   transactions assumed to abort run as probes (they evaluate at their positions, write nothing).
3. *Re-check until they agree* (DESIGN §5): after a pass, the first transaction (in timestamp
   order) whose outcome differs from what the pass assumed is decided — everything before it ran
   on exact inputs, so its outcome is exact; the next pass assumes the outcomes just observed. A
   pass with no disagreement is the serial result (MorphStream's lazy abort alone can abort more).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from etl_dataflows.executors.local.codegen_ops import OpKernelGenerator
from etl_dataflows.executors.local.kernels import load_module
from etl_dataflows.expressions import structure
from etl_dataflows.planning.levels import _pool

MAX_PASSES = 10_000


class OpLevelRunner:
    """The operation-level execution of one compiled step."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        generator = OpKernelGenerator(compiled.flow, compiled.step)
        source, self.args, deps, self.counts = generator.generate_ops()
        own = [structure(h.expr) for h in generator.hoisted]
        theirs = [structure(h.expr) for h in compiled.kernel.hoisted]
        if own != theirs or [r.template for r in generator.reasons] != [
            r.template for r in compiled.kernel.reasons
        ]:
            raise AssertionError("operation-level kernel disagrees with the transaction kernel")
        self.module = load_module(source)
        self.status = generator.status_fields()
        self.n_ops = len(compiled.step.operations)
        self.dep_ptr = np.zeros(self.n_ops + 2, dtype=np.int64)
        np.cumsum([len(d) for d in deps], out=self.dep_ptr[1:])
        self.dep_op = np.array([k for d in deps for k in d], dtype=np.int64)

    def _tasks(self, prepared: Any) -> tuple[Any, ...]:
        compiled, n = self.compiled, prepared.n
        rank = np.empty(n, dtype=np.int64)
        rank[prepared.order] = np.arange(n, dtype=np.int64)
        capacities = [t.capacity for t in compiled.tables]
        bases = np.concatenate([[0], np.cumsum(capacities)]).astype(np.int64)
        sequence_base = int(bases[-1])
        txn, kind, res_task, res_id = [], [], [], []
        count = 0
        for op in compiled.step.operations:
            j = op.index
            rows = np.arange(n, dtype=np.int64)
            when = compiled.kernel.when_hoist[j]
            if when is not None:
                # A row whose ``when`` failed to evaluate gets its task too: the task aborts the
                # transaction as an error (the kernel checks the ``when``'s error flag first),
                # as the serial executor does; skipping it would commit the rest.
                w = prepared.hoisted[when]
                rows = np.flatnonzero((w.valid & w.values.astype(np.bool_)) | w.errors)
            slot = prepared.slots[j][rows]
            task_ids = np.arange(count, count + len(rows), dtype=np.int64)
            count += len(rows)
            txn.append(rows)
            kind.append(np.full(len(rows), j, dtype=np.int64))
            has = slot >= 0
            res_task.append(task_ids[has])
            res_id.append(slot[has] + bases[compiled.table_of_op[j]])
            if compiled.draws_keys[j]:
                res_task.append(task_ids[has])
                res_id.append(np.full(int(has.sum()), sequence_base + compiled.table_of_op[j]))
        txn.append(np.arange(n, dtype=np.int64))
        kind.append(np.full(n, self.n_ops, dtype=np.int64))
        count += n
        task_txn, task_op = np.concatenate(txn), np.concatenate(kind)
        order = np.lexsort((task_op, rank[task_txn]))
        position = np.empty(count, dtype=np.int64)
        position[order] = np.arange(count, dtype=np.int64)
        rt = position[np.concatenate(res_task)] if res_task else np.zeros(0, np.int64)
        ri = np.concatenate(res_id).astype(np.int64) if res_id else np.zeros(0, np.int64)
        by_task = np.lexsort((ri, rt))
        rt, ri = rt[by_task], ri[by_task]
        ptr = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(rt, minlength=count), out=ptr[1:])
        dense_ids, dense = np.unique(ri, return_inverse=True)
        by_resource = np.lexsort((rt, dense))
        starts = np.searchsorted(dense[by_resource], dense[by_resource], side="left")
        turns = np.empty(len(dense), dtype=np.int64)
        turns[by_resource] = np.arange(len(dense), dtype=np.int64) - starts
        done = np.ones((self.n_ops + 1) * n, dtype=np.int64)
        return (
            task_txn[order],
            task_op[order],
            ptr,
            dense.astype(np.int64),
            turns,
            int(max(len(dense_ids), 1)),
            done,
        )

    def run(
        self, prepared: Any, outputs: dict[str, np.ndarray], args: list[Any], workers: int
    ) -> dict[str, Any]:
        compiled, n = self.compiled, prepared.n
        started = time.perf_counter()
        task_txn, task_op, ptr, res, turns, resources, done_template = self._tasks(prepared)
        done_template[task_op * n + task_txn] = 0
        plan_ms = (time.perf_counter() - started) * 1000
        snapshot = _Snapshot(compiled, prepared)
        results = {
            name: np.zeros((max(count, 1), n), dtype=dtype)
            for name, count, dtype in (
                ("RI", self.counts["RI"], np.int64),
                ("RF", self.counts["RF"], np.float64),
                ("RB", self.counts["RB"], np.bool_),
            )
        }
        probe = np.zeros(n, dtype=np.bool_)
        passes = 0
        while True:
            passes += 1
            if passes > 1:
                snapshot.restore()
                for array in results.values():
                    array[...] = 0
                for name, array in outputs.items():
                    if name.startswith("o_") or name == "em":
                        array[...] = 0
            served = np.zeros(resources, dtype=np.int64)
            claim = np.zeros(1, dtype=np.int64)
            done = done_template.copy()
            call = (
                task_txn,
                task_op,
                ptr,
                res,
                turns,
                served,
                claim,
                done,
                self.dep_ptr,
                self.dep_op,
                probe,
                n,
                results["RI"],
                results["RF"],
                results["RB"],
                *args,
            )
            if workers <= 1:
                self.module.run_ops(*call)
            else:
                pool = _pool(workers)
                for future in [pool.submit(self.module.run_ops, *call) for _ in range(workers)]:
                    future.result()
            status = np.stack([results["RI"][s] for s, _, _ in self.status])
            failed = (status != 0).any(axis=0)
            disagree = np.flatnonzero(failed[prepared.order] != probe[prepared.order])
            if not len(disagree) or passes >= MAX_PASSES:
                break
            probe = failed.copy()
        first = np.argmax(status != 0, axis=0)
        columns = np.arange(n)
        outputs["st_out"][:] = np.where(failed, status[first, columns], 0)
        codes = np.stack([results["RI"][r] for _, r, _ in self.status])
        values = np.stack([results["RF"][e] for _, _, e in self.status])
        outputs["rs_out"][:] = np.where(failed, codes[first, columns], -1)
        outputs["ev_out"][:] = np.where(failed, values[first, columns], 0.0)
        outputs["em"] &= ~failed
        return {"passes": passes, "tasks": len(task_txn), "plan_ms": round(plan_ms, 3)}


class _Snapshot:
    """The values of every slot a step touches and the sequences, at the step's start."""

    def __init__(self, compiled: Any, prepared: Any) -> None:
        self._sequences = compiled.sequences.copy()
        self._compiled = compiled
        self._saved: list[tuple[Any, np.ndarray, dict[str, np.ndarray]]] = []
        for t, table in enumerate(compiled.tables):
            ops = [j for j, g in enumerate(compiled.table_of_op) if g == t]
            slots = np.unique(np.concatenate([prepared.slots[j] for j in ops]))
            slots = slots[slots >= 0]
            saved = {"ex": table.exists[slots].copy(), "sk": table.sk[slots].copy()}
            for column in table.values:
                saved["v:" + column] = table.values[column][slots].copy()
                saved["m:" + column] = table.valid[column][slots].copy()
            self._saved.append((table, slots, saved))

    def restore(self) -> None:
        self._compiled.sequences[:] = self._sequences
        for table, slots, saved in self._saved:
            table.exists[slots] = saved["ex"]
            table.sk[slots] = saved["sk"]
            for column in table.values:
                table.values[column][slots] = saved["v:" + column]
                table.valid[column][slots] = saved["m:" + column]
