# perf/nsp_a2a_perf: nested all-to-all microbenchmark
