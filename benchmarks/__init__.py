"""Benchmarks that print measured ratios (`docmt bench`, docs/benchmarks.md); installed as
`lightning_docmt.benchmarks`, so that their scripts share `bench_common` from an installed package too."""
