"""The conformance rules, one test per rule, named after it.

Run with ``hwrng conformance`` or
``pytest -p hwrng_conformance.plugin --pyargs hwrng_conformance.suite``.
"""
