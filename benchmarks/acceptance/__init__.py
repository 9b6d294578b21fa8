"""The GPU acceptance run (``benchmarks/gpu_acceptance.py``): every CUDA claim, one command.

One module per job: ``steps`` (what runs, each with its time budget),
``runner`` (one step in a subprocess, its timeout and its verdict),
``outcomes`` (reading a step's output into a verdict), ``documented`` (what
the docs document for the torch a step runs on), ``goals`` (the performance
goals' verdicts), ``report`` (``report.md`` and ``report.json``),
``wheelhouse`` (``--prepare``: the wheels a GPU machine without a package
index installs, the device command and what it carries), ``provenance`` (the
commit of a copy without ``.git``), and the probes each step without a command
of its own runs as a script: ``install``, ``probe_environment``,
``probe_contract``, ``probe_compile`` and ``bandwidth``. The probes share
``_figures`` (where a probe writes its verdict and figures).
"""
