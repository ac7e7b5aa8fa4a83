# src/topology (see DESIGN.md §3)
