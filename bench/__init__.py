"""The benchmarks: run each as a module from the repository root, ``python -m bench.<name>``
(see ``bench/README.md``); what they share is in ``bench.lib``."""
