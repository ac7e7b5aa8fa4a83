# src/planner: the three planners and nsp_plan_create (static, disjoint, nested)
