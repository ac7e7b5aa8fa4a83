# src/transport (see DESIGN.md §3)
