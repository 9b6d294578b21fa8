"""hwrng's built-in backend: ``cpu``, the one every machine has.

It is a plugin registered through the ``hwrng`` entry-point group exactly as a
third-party backend is, and imports only hwrng's public names. The accelerator
backends are distributions of their own (``hwrng-cuda``, ``hwrng-npu``:
``pip install "hwrng[cuda]"``); see :mod:`hwrng.hookspecs` for the contract and
the ``hwrng-conformance`` distribution for the suite every backend passes.
"""
