"""The composition root: what wires a run of streamdi out of the stages.

The stages (``ingest``, ``etl_dataflows``, ``staging``, ``migration``, ``api``) are leaves that
import only what lies below them on the data path; this package imports them and puts them
together: what a run reads (:class:`RunSpec`, :func:`bind`, :func:`load_run_spec`), the pipeline
loop that drives consumer -> engine -> staging -> migration (:mod:`runtime.pipeline`), the hosted
service of ``streamdi serve`` (:mod:`runtime.serve`) and the stack's default dataflow
(:mod:`runtime.stack`). Only the CLI (``cli``) and the workload (``tpcdi``) sit above it.
"""

from runtime.runspec import RunSpec, StreamBinding, bind, load_run_spec

__all__ = ["RunSpec", "StreamBinding", "bind", "load_run_spec"]
