# perf/nsp_sim: the cluster simulator
