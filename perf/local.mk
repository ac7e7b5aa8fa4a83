# perf/: microbenchmarks and the cluster simulator
