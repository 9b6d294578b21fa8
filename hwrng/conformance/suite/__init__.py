"""The conformance rules, one test per rule, named after it.

Run with ``hwrng conformance`` or
``pytest -p hwrng.conformance.plugin --pyargs hwrng.conformance.suite``.
"""
