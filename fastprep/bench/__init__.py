"""``python -m fastprep.bench``: input-pipeline benchmark and bottleneck finder.

Run ``python -m fastprep.bench`` for the table (reference, reference-optimized, fastprep and
its variants x worker counts, fed to a toy CNN or a simulated accelerator, then each
pipeline alone),
``python -m fastprep.bench diagnose`` for the caching ladder, and ``--help`` for options.

This package is the installed benchmark users run; the checkout's top-level ``bench/`` holds
the developer benchmark scripts (``python bench/bench_<name>.py``), which are not installed.

Modules: :mod:`~fastprep.bench.cli` (command line), :mod:`~fastprep.bench.config`
(:class:`~fastprep.bench.config.BenchConfig`, the settings every runner takes),
:mod:`~fastprep.bench.dataset` (built-in cached JPEGs, user folders checked file by file),
:mod:`~fastprep.bench.pipelines` (``register_pipeline`` to add one; see ``docs/bench.md``),
:mod:`~fastprep.bench.trainer` (ToyNet, SimulatedAccelerator), :mod:`~fastprep.bench.runner`
(measurement), :mod:`~fastprep.bench.diagnose`, :mod:`~fastprep.bench.profiling`
(:class:`~fastprep.bench.profiling.LabelledCompose` for your own traces),
:mod:`~fastprep.bench.report`, :mod:`~fastprep.bench.uncapped` (each pipeline alone: its own
rate and the CPU cores to feed a target rate), :mod:`~fastprep.bench.synthetic` (photo-like
images).
"""
