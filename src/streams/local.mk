# src/streams (see DESIGN.md §3)
