"""hwrng's built-in backends: ``cpu``, ``cuda`` and ``npu``.

Each is a plugin registered through the ``hwrng`` entry-point group exactly as a
third-party backend is, and imports only hwrng's public names; see
:mod:`hwrng.hookspecs` for the contract and :mod:`hwrng.conformance` for the
suite every backend passes.
"""
