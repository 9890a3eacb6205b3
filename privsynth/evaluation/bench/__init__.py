"""The benchmark: a declarative suite (YAML) -> a grid of cells -> one JSON record per cell -> tables and plots.

A suite names datasets (generated or loaded once, cached under ``<results>/<suite>/data``) and a list of *stages*.
Each stage has a cell ``kind`` (a registered function), a ``grid`` (the product of its lists gives one cell per
point, e.g. synthesizer x ε x agent x seed) and fixed ``params``. A stage may ``need`` an earlier stage: each of its
cells is linked to the upstream cell that agrees on the ``match`` keys. A cell is identified by a stable hash of its
kind, params, dataset specs and upstream cell; a re-run skips every cell whose record exists. See
``docs/benchmarks.md``.

One module per job, each importing only from those above it in this list (``tests/test_architecture.py``):

* :mod:`.registry`: the cell kinds, group runners and dataset sources, by name. Cell modules import this one; it
  imports no cell module.
* :mod:`.records`: the typed results (:class:`~.records.CellRecord`, :class:`~.records.RunSummary`) and their JSON.
* :mod:`.suite`: the suite model (:class:`~.suite.Suite`, :class:`~.suite.Stage`, :class:`~.suite.Cell`), YAML
  loading, grid expansion, cell ids.
* :mod:`.sources`: dataset sources, the ``.npz`` dataset cache, splits, preparing a suite's datasets.
* :mod:`.context`: :class:`~.context.CellContext`, what a cell function may use besides its params.
* :mod:`.kinds`: kind names to functions (the built-in cell modules are imported on first use).
* :mod:`.plan`: which cells a stage has, which are finished, which run together as one job.
* :mod:`.tables`, :mod:`.plots`: the suite's tables (markdown, HTML, CSV) and plots from the finished records.
* :mod:`.execute`: running the unfinished cells stage by stage on an executor (:mod:`privsynth.evaluation.executors`).

``privsynth.evaluation.runner`` re-exports the names scripts used before this split (loading the runner's parts on
first access). This package's ``__init__`` imports nothing, so a cell module importing :mod:`.registry` loads only
the registry.
"""
