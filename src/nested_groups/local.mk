# src/nested_groups (see DESIGN.md §3)
