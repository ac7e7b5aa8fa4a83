# perf/nsp_plan_perf: planning time
