# src/attn_sp (see DESIGN.md §3)
