"""kvconform's harness: the command line, the pytest plugin, reports, baselines and merging of runs."""
